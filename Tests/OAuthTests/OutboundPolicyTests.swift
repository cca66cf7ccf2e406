import Foundation
import Testing
@testable import OAuth

/// The admin's patterns and the checks made before any DNS.
@Suite struct OutboundPolicyTests {
    @Test(arguments: [
        ("https://*", "https://idp.example.com", true),
        ("https://*", "https://idp.example.com:8443/tenant/x?y=1", true),
        ("https://*", "http://idp.example.com", false),
        ("https://idp.corp.example/*", "https://idp.corp.example", true),
        ("https://idp.corp.example/*", "https://IDP.Corp.Example/realms/a", true),
        ("https://idp.corp.example/*", "https://idp.corp.example:443/realms/a", true),
        ("https://idp.corp.example/*", "https://idp.corp.example:8443/realms/a", false),
        ("https://idp.corp.example/*", "https://idp.corp.example.evil.com/", false),
        ("https://idp.corp.example/*", "https://evil.com/idp.corp.example/", false),
        ("https://*.corp.example/*", "https://a.corp.example/x", true),
        ("https://*.corp.example/*", "https://evil.com/.corp.example/x", false),
        ("https://*.corp.example/*", "https://evil.com?.corp.example/x", false),
        ("https://idp.corp.example/realms/*", "https://idp.corp.example/realms/dev", true),
        ("https://idp.corp.example/realms/*", "https://idp.corp.example/other", false),
        ("https://idp.corp.example:*/*", "https://idp.corp.example:9000/", true),
        ("https://[fd00::5]/*", "https://[fd00::5]/a", true),
        ("https://*", "https://user@idp.example.com/", false),
    ])
    func patterns(_ pattern: String, _ issuer: String, _ admitted: Bool) {
        #expect(OutboundPolicy(patterns: [pattern]).admits(issuer: issuer) == admitted, "\(pattern) vs \(issuer)")
    }

    @Test func loopbackIssuersOnlyWithAllowLoopbackHTTP() {
        #expect(!OutboundPolicy().admits(issuer: "http://127.0.0.1:9000/"))
        #expect(OutboundPolicy(allowLoopbackHTTP: true).admits(issuer: "http://127.0.0.1:9000/"))
        #expect(OutboundPolicy(allowLoopbackHTTP: true).admits(issuer: "http://[::1]:9000"))
        #expect(OutboundPolicy(allowLoopbackHTTP: true).admits(issuer: "http://localhost:9000"))
        #expect(!OutboundPolicy(allowLoopbackHTTP: true).admits(issuer: "http://10.0.0.1:9000"))
        #expect(!OutboundPolicy(allowLoopbackHTTP: true, patterns: []).admits(issuer: "https://idp.example.com"))
    }

    @Test func privateAddressesOnlyForAHostTheAdminNamed() throws {
        let policy = OutboundPolicy(patterns: ["https://*", "https://idp.corp.example/*", "https://*.lab.example/*"])
        let privateAddress = try #require(IPAddress("10.1.2.3"))
        #expect(throws: Never.self) { try policy.check(privateAddress, for: URL(string: "https://idp.corp.example/token")!) }
        let wildcard = #expect(throws: AddressRefused.self) {
            try policy.check(privateAddress, for: URL(string: "https://a.lab.example/token")!)
        }
        #expect(wildcard?.reason.contains("private (10.0.0.0/8)") == true)
        #expect(throws: AddressRefused.self) { try policy.check(privateAddress, for: URL(string: "https://other.example/")!) }
        // Naming a host does not open link-local or metadata addresses to it.
        for never in ["169.254.169.254", "fd00:ec2::254", "fe80::1", "100.100.100.200"] {
            let address = try #require(IPAddress(never))
            #expect(throws: AddressRefused.self) { try policy.check(address, for: URL(string: "https://idp.corp.example/")!) }
        }
    }

    @Test(arguments: [
        ("ftp://idp.example.com/", "only https"),
        ("file:///etc/passwd", "only https"),
        ("http://idp.example.com/", "plain http is not used"),
        ("http://127.0.0.1:8080/", "plain http is not used"),
        ("https://user:pw@idp.example.com/", "user information"),
        ("https://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local (cloud metadata)"),
        ("https://[fe80::1]/", "link-local (fe80::/10)"),
        ("https://[::ffff:169.254.169.254]/", "IPv4-mapped form of 169.254.169.254"),
        ("https://127.0.0.1/", "allow-loopback-http is off"),
    ])
    func refusedBeforeAnyConnection(_ url: String, _ said: String) {
        let refused = #expect(throws: AddressRefused.self) { try OutboundPolicy().precheck(URL(string: url)!) }
        #expect(refused?.description.contains(said) == true, "\(url): \(refused?.description ?? "")")
    }

    @Test func plainHTTPGoesOnlyToLoopback() throws {
        let policy = OutboundPolicy(allowLoopbackHTTP: true)
        #expect(throws: Never.self) { try policy.precheck(URL(string: "http://127.0.0.1:8080/")!) }
        #expect(throws: Never.self) { try policy.precheck(URL(string: "http://[::1]:8080/")!) }
        let global = #expect(throws: AddressRefused.self) {
            try policy.check(IPAddress("93.184.216.34")!, for: URL(string: "http://example.com/")!)
        }
        #expect(global?.reason.contains("plain http goes only to loopback") == true)
        // A pattern that names the host lets https reach its private address, never plain http.
        let named = OutboundPolicy(allowLoopbackHTTP: true, patterns: ["http://lan.example/*", "https://lan.example/*"])
        #expect(throws: Never.self) { try named.check(IPAddress("192.168.1.5")!, for: URL(string: "https://lan.example/")!) }
        let lan = #expect(throws: AddressRefused.self) {
            try named.check(IPAddress("192.168.1.5")!, for: URL(string: "http://lan.example/")!)
        }
        #expect(lan?.reason == "plain http goes only to loopback, and 192.168.1.5 is private (192.168.0.0/16); use https")
        let metadata = #expect(throws: AddressRefused.self) {
            try named.check(IPAddress("169.254.169.254")!, for: URL(string: "http://lan.example/")!)
        }
        #expect(metadata?.reason == "169.254.169.254 is link-local (cloud metadata)")
    }

    @Test func refusalsAreSaidWholly() {
        let refusal = AddressRefused(url: "https://meta.example/", address: "169.254.169.254", reason: "169.254.169.254 is link-local (cloud metadata)")
        #expect(refusal.description == "https://meta.example/: 169.254.169.254 is link-local (cloud metadata); tokend does not connect there for a user")
        let failure = DiscoveryFailed(step: "resource-metadata", url: "https://mcp.example/.well-known/oauth-protected-resource", status: 404, reason: "none")
        #expect(failure.description == "resource-metadata: https://mcp.example/.well-known/oauth-protected-resource answered HTTP 404: none")
    }
}
