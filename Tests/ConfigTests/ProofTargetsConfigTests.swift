import Testing
@testable import Config

/// `proof-targets`: the URLs GetProof signs for besides the resources and the userinfo endpoint.
@Suite struct ProofTargetsConfigTests {
    let parsing = DPoPConfigTests()

    @Test func listedInOrderOnADPoPSession() throws {
        let session = try parsing.parse("dpop = true\nproof-targets = [\"https://api.example/v1/\", \"http://127.0.0.1:8080\"]").sessions[0]
        #expect(session.proofTargets == ["https://api.example/v1/", "http://127.0.0.1:8080"])
        #expect(try parsing.parse("dpop = true").sessions[0].proofTargets == [])
    }

    @Test func needsDPoP() {
        let error = parsing.problem("proof-targets = [\"https://api.example/\"]")
        #expect(error?.key == "sessions.g.proof-targets" && error?.problem.contains("set dpop = true") == true)
    }

    @Test(arguments: [
        "ftp://api.example/", "api.example/v1", "https://user@api.example/", "https://api.example/?q=1", "https://api.example/#f",
        "https:///v1", "not a url",
    ])
    func eachIsAnHTTPURLWithoutUserQueryOrFragment(_ target: String) {
        #expect(parsing.problem("dpop = true\nproof-targets = [\"\(target)\"]")?.key == "sessions.g.proof-targets")
    }

    @Test func noneTwiceAndAtMost32() {
        #expect(parsing.problem("dpop = true\nproof-targets = [\"https://a.example/\", \"https://a.example/\"]")?.problem.contains("twice") == true)
        let many = (0...32).map { "\"https://a.example/\($0)\"" }.joined(separator: ", ")
        #expect(parsing.problem("dpop = true\nproof-targets = [\(many)]")?.problem.contains("at most 32") == true)
    }
}
