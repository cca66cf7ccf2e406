import Testing

@testable import OAuth

/// What a provider's answer says a token's audience is (security round four): an audience that
/// restricts nothing, or one tokend cannot read, says nothing.
@Suite struct AudienceReadingTests {
    func read(_ json: String) -> [String]? {
        AudienceReading.introspected(Array(json.utf8))?.audience
    }

    @Test func introspectionsAudIsAStringOrAnArrayOfStrings() {
        #expect(read(#"{"active":true,"aud":"https://a/"}"#) == ["https://a/"])
        #expect(read(#"{"active":true,"aud":["https://a/","https://b/"]}"#) == ["https://a/", "https://b/"])
    }

    @Test func anEmptyOrUnreadableAudSaysNothing() {
        #expect(read(#"{"active":true}"#) == nil)
        #expect(read(#"{"active":true,"aud":[]}"#) == nil)
        #expect(read(#"{"active":true,"aud":""}"#) == nil)
        #expect(read(#"{"active":true,"aud":[123]}"#) == nil)
        #expect(read(#"{"active":true,"aud":["https://a/",5]}"#) == nil, "a value tokend cannot read is not left out")
    }

    @Test func onlyActiveTrueIsActive() {
        #expect(AudienceReading.introspected(Array(#"{"active":true,"aud":"a"}"#.utf8))?.active == true)
        #expect(AudienceReading.introspected(Array(#"{"active":false,"aud":"a"}"#.utf8))?.active == false)
        #expect(AudienceReading.introspected(Array(#"{"aud":"a"}"#.utf8))?.active == false)
        #expect(AudienceReading.introspected(Array(#"{"active":"true","aud":"a"}"#.utf8))?.active == false)
        #expect(AudienceReading.introspected(Array(#"{"active":null}"#.utf8))?.active == false)
        // The number 1 some servers write for true (a reading that is active only narrows).
        #expect(AudienceReading.introspected(Array(#"{"active":1,"aud":"a"}"#.utf8))?.active == true)
        #expect(AudienceReading.introspected(Array(#"{"active":0,"aud":"a"}"#.utf8))?.active == false)
        #expect(AudienceReading.introspected(Array(#"{"active":2,"aud":"a"}"#.utf8))?.active == false)
    }

    @Test func anAnswerThatIsNoJSONObjectIsUnreadable() {
        #expect(AudienceReading.introspected(Array("not json".utf8)) == nil)
        #expect(AudienceReading.introspected(Array(#"["active",true]"#.utf8)) == nil)
        #expect(AudienceReading.introspected(Array(#""active""#.utf8)) == nil)
        #expect(AudienceReading.introspected(Array(#"{"active":true"#.utf8)) == nil)
        #expect(AudienceReading.introspected([]) == nil)
    }

    @Test func anAudOfAnotherTypeSaysNothing() {
        #expect(read(#"{"active":true,"aud":null}"#) == nil)
        #expect(read(#"{"active":true,"aud":7}"#) == nil)
        #expect(read(#"{"active":true,"aud":{"a":"b"}}"#) == nil)
        #expect(read(#"{"active":true,"aud":["https://a/",""]}"#) == nil, "an empty member is not left out")
        #expect(read(#"{"active":true,"aud":["https://a/",["https://b/"]]}"#) == nil)
        #expect(read(#"{"active":true,"aud":"h\u00e9"}"#) == ["hé"])
    }
}
