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
}
