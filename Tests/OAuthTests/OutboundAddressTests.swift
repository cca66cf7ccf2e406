import Foundation
import Testing
@testable import OAuth

/// Which addresses a user's URL may reach, address by address.
@Suite struct OutboundAddressTests {
    enum Expected: Equatable { case global, loopback, privateUse, never }

    static func simplified(_ kind: AddressKind) -> Expected {
        switch kind {
        case .global: .global
        case .loopback: .loopback
        case .privateUse: .privateUse
        case .never: .never
        }
    }

    static let table: [(String, Expected)] = [
        ("93.184.216.34", .global), ("1.1.1.1", .global), ("2606:4700::1111", .global),
        ("127.0.0.1", .loopback), ("127.255.0.9", .loopback), ("::1", .loopback), ("::ffff:127.0.0.1", .loopback),
        ("10.1.2.3", .privateUse), ("172.16.0.1", .privateUse), ("172.31.255.255", .privateUse), ("192.168.1.1", .privateUse),
        ("100.64.0.1", .privateUse), ("198.18.0.1", .privateUse), ("fd12:3456::1", .privateUse), ("fc00::1", .privateUse),
        ("::ffff:10.0.0.1", .privateUse), ("64:ff9b:1::a00:1", .privateUse), ("64:ff9b:1::808:808", .privateUse),
        ("172.32.0.1", .global), ("100.128.0.1", .global), ("64:ff9b::808:808", .global), ("2002:808:808::1", .global),
        ("169.254.169.254", .never), ("169.254.0.1", .never), ("169.254.170.2", .never), ("fe80::1", .never),
        ("febf::1", .never), ("fd00:ec2::254", .never), ("100.100.100.200", .never), ("192.0.0.192", .never),
        ("168.63.129.16", .never), ("0.0.0.0", .never), ("0.1.2.3", .never), ("::", .never), ("224.0.0.1", .never),
        ("239.255.255.250", .never), ("ff02::1", .never), ("255.255.255.255", .never), ("240.0.0.1", .never),
        ("192.0.2.1", .never), ("2001:db8::1", .never), ("2001::1", .never), ("100::1", .never),
        ("::ffff:169.254.169.254", .never), ("::ffff:a9fe:a9fe", .never), ("64:ff9b::a9fe:a9fe", .never),
        ("64:ff9b::169.254.169.254", .never), ("64:ff9b::7f00:1", .never), ("::169.254.169.254", .never),
        ("::127.0.0.1", .never), ("2002:a9fe:a9fe::1", .never), ("2002:7f00:1::", .never), ("::ffff:0:a9fe:a9fe", .never),
        ("64:ff9b:1::a9fe:a9fe", .never), ("::ffff:0.0.0.0", .never), ("::ffff:224.0.0.1", .never),
    ]

    @Test(arguments: table) func classified(_ literal: String, _ expected: Expected) throws {
        let address = try #require(IPAddress(literal))
        #expect(Self.simplified(address.kind) == expected, "\(literal): \(address.kind.what)")
    }

    @Test func refusalsSayWhatTheAddressIs() throws {
        #expect(try #require(IPAddress("169.254.169.254")).kind.what == "link-local (cloud metadata)")
        let mapped = try #require(IPAddress("::ffff:a9fe:a9fe"))
        #expect(mapped.description == "::ffff:169.254.169.254")
        #expect(mapped.kind.what == "the IPv4-mapped form of 169.254.169.254: link-local (cloud metadata)")
        #expect(try #require(IPAddress("64:ff9b::a9fe:a9fe")).kind.what.contains("NAT64"))
    }

    @Test func onlyInetPtonFormsAreLiterals() {
        // These are names to inet_pton; getaddrinfo reads them as numbers, so they are resolved and checked.
        for text in ["2130706433", "0x7f.1", "127.1", "017700000001", "169.254.43518", "localhost", "[::1]"] {
            #expect(IPAddress(text) == nil, "\(text)")
        }
    }

    @Test func numericSpellingsAreCheckedAsTheAddressesTheyMean() async throws {
        let expected = ["2130706433": "127.0.0.1", "0x7f.1": "127.0.0.1", "127.1": "127.0.0.1", "169.254.43518": "169.254.169.254",
            "0xa9.0xfe.0xa9.0xfe": "169.254.169.254", "2852039166": "169.254.169.254"]
        for (text, address) in expected {
            #expect(try await Outbound.addresses(of: text).map(\.description) == [address], "\(text)")
        }
        let policy = OutboundPolicy(allowLoopbackHTTP: true, patterns: ["https://*"])
        for text in ["169.254.43518", "2852039166", "0xa9fea9fe"] {
            let refused = await #expect(throws: AddressRefused.self) {
                try await policy.checkedTarget(URL(string: "https://\(text)/latest/meta-data")!)
            }
            #expect(refused?.address == "169.254.169.254", "\(text)")
            #expect(refused?.description.contains("169.254.169.254 is link-local (cloud metadata); tokend does not connect there for a user") == true)
        }
        #expect(try await policy.checkedTarget(URL(string: "http://2130706433:8080/")!).addresses == [IPAddress("127.0.0.1")!])
    }

    @Test func aNameThatDoesNotResolveIsUnreachableNotRefused() async {
        await #expect(throws: ResolveFailed.self) { try await Outbound.addresses(of: "no-such-host.invalid") }
    }
}
