import ArgumentParser
import Config
import Testing
import TokendInterface
import Varlink

@testable import TokendClient
@testable import TokenctlProgram

/// `tokenctl add`, `remove` and `proxy` apart from tokend: what they accept, and what they say when refused.
@Suite struct UserSessionTests {
    @Test func aNameIsTheBareNameTokendMakesUserSlashNameOf() throws {
        for name in ["mcp", "forge-2", "my_api.v1"] { try UserSessionAdvice.checkName(name) }
        for name in ["", ".", "..", "-mcp", "a b", "mcp!", "ça", String(repeating: "m", count: 65)] {
            #expect(throws: ValidationError.self, "\(name)") { try UserSessionAdvice.checkName(name) }
        }
        let error = #expect(throws: ValidationError.self) { try UserSessionAdvice.checkName("alice/mcp") }
        #expect(error?.message.contains("without USER/") == true)
    }

    /// What tokenctl says of `arguments` (ArgumentParser's words for a usage error); nil when they parse.
    func refused<C: ParsableCommand>(_ command: C.Type, _ arguments: [String]) -> String? {
        do {
            _ = try command.parse(arguments)
            return nil
        } catch {
            return command.message(for: error)
        }
    }

    @Test func addNeedsAResourceOrAnIssuerAndTakesOnlyWebURLs() throws {
        #expect(refused(AddCommand.self, ["mcp"])?.contains("give --resource URL") == true)
        #expect(refused(AddCommand.self, ["mcp", "--resource", "mcp.example.com/mcp"])?.contains("give an https URL") == true)
        #expect(refused(AddCommand.self, ["mcp", "--issuer", "ftp://idp.example.com"])?.contains("--issuer ftp://") == true)
        #expect(refused(AddCommand.self, ["mcp", "--issuer", "https://idp.example.com", "--scope", " "])?.contains("--scope is empty") == true)
        #expect(refused(AddCommand.self, ["mcp", "--issuer", "https://idp.example.com", "--client-id", ""])?.contains("--client-id") == true)
        #expect(refused(AddCommand.self, ["alice/mcp", "--issuer", "https://idp.example.com"])?.contains("without USER/") == true)
        let add = try AddCommand.parse(["mcp", "--resource", "https://a.example.com/mcp", "--resource", "https://b.example.com/"])
        #expect(add.resources == ["https://a.example.com/mcp", "https://b.example.com/"] && add.issuer == nil && !add.dpop)
        // tokend decides whether plain http is allowed (loopback, allow-loopback-http): not refused here.
        #expect(refused(AddCommand.self, ["local", "--resource", "http://127.0.0.1:8000/mcp"]) == nil)
    }

    @Test func removeTakesANameOrAnAdministratorsUserSlashName() throws {
        #expect(refused(RemoveCommand.self, ["mcp"]) == nil)
        #expect(refused(RemoveCommand.self, ["alice/mcp", "--no-revoke"]) == nil)
        for name in ["a/b/c", "/mcp", "alice/", "alice/m p"] {
            #expect(refused(RemoveCommand.self, [name]) != nil, "\(name)")
        }
    }

    @Test func eachRefusalOfAnAddSaysTheFix() {
        func advice(_ error: TokendClientError) -> (Int32, String)? {
            UserSessionAdvice.add(error, name: "mcp").map { ($0.code, $0.advice) }
        }
        #expect(advice(.sessionExists(session: "alice/mcp"))?.0 == Exit.failure)
        #expect(advice(.sessionExists(session: "alice/mcp"))?.1.contains("`tokenctl remove mcp` first") == true)
        let refused = advice(.sessionRefused(session: "alice/mcp", reason: "alice may not add sessions"))
        #expect(refused?.0 == Exit.permissionDenied && refused?.1.contains("[user-sessions]") == true)
        #expect(advice(.tooManySessions(limit: 8))?.1.contains("tokenctl remove NAME") == true)
        let limited = advice(.rateLimited(session: "alice/mcp", retryAfter: 90))
        #expect(limited?.0 == Exit.rateLimited && limited?.1.contains("allowed in 90 s") == true)
        #expect(UserSessionAdvice.message(.rateLimited(session: "alice/mcp", retryAfter: 90)) == "you added sessions faster than one person may")
        #expect(limited?.1.contains("stale-generation") == false, "a forced refresh's advice does not fit an add")
        let address = advice(.addressRefused(url: "https://meta.example/", address: "169.254.169.254", reason: "link-local"))
        #expect(address?.0 == Exit.permissionDenied && address?.1.contains("issuers of [user-sessions]") == true)
        #expect(advice(.unreachable(socket: "/run/x", reason: "gone")) == nil, "Common.run's own advice")
        #expect(advice(.noSuchSession(session: "mcp")) == nil)
    }

    @Test func aFailedDiscoveryStepNamesWhatToCheck() {
        func advice(_ step: String, _ status: Int?) -> String {
            UserSessionAdvice.add(.discoveryFailed(step: step, url: "https://x/", status: status, reason: ""), name: "mcp")?.advice ?? ""
        }
        #expect(advice("challenge", 200).contains("--issuer URL") && advice("challenge", 200).contains("oauth-protected-resource"))
        #expect(advice("resource-metadata", 404).contains("RFC 9728"))
        #expect(advice("server-metadata", 404).contains("without /.well-known"))
        #expect(advice("registration", 400).contains("--client-id ID"))
        #expect(advice("token", 500).contains("operator"))
        #expect(advice("challenge", nil).hasPrefix("Nothing answered there"))
        #expect(!advice("challenge", 401).hasPrefix("Nothing answered there"))
    }

    @Test func tokendsErrorsKeepTheirParameters() {
        let failed = TokendClientError(VarlinkError(BrokerInterface.Error.discoveryFailed, [
            "step": .string("registration"), "url": .string("https://as.example.com/register"), "status": .int(403),
            "reason": .string("registration is closed"),
        ]))
        guard case .discoveryFailed("registration", "https://as.example.com/register", 403, "registration is closed") = failed else {
            Issue.record("\(failed)")
            return
        }
        #expect("\(failed)" == "discovery failed at its registration step: https://as.example.com/register answered HTTP 403 (registration is closed)")
        let silent = TokendClientError(VarlinkError(BrokerInterface.Error.discoveryFailed, [
            "step": .string("challenge"), "url": .string("https://mcp.example.com/mcp"), "reason": .string("timed out"),
        ]))
        #expect("\(silent)".contains("gave no answer (timed out)"))
        let refused = TokendClientError(VarlinkError(BrokerInterface.Error.addressRefused, [
            "url": .string("https://metadata.example/"), "address": .string("169.254.169.254"), "reason": .string("link-local"),
        ]))
        #expect("\(refused)" == "tokend does not connect to https://metadata.example/ for a user (address 169.254.169.254): link-local")
        guard case .tooManySessions(8) = TokendClientError(VarlinkError(BrokerInterface.Error.tooManySessions, ["limit": .int(8)])),
            case .sessionExists("alice/mcp") = TokendClientError(
                VarlinkError(BrokerInterface.Error.sessionExists, ["session": .string("alice/mcp")])),
            case .sessionRefused("alice/mcp", "no") = TokendClientError(VarlinkError(
                BrokerInterface.Error.sessionRefused, ["session": .string("alice/mcp"), "reason": .string("no")]))
        else {
            Issue.record("an AddSession error lost its parameters")
            return
        }
    }

    @Test func removeSaysWhichSessionsAreYours() {
        let none = UserSessionAdvice.remove(.noSuchSession(session: "mpc"), name: "mpc", yours: ["mcp", "forge"])
        #expect(none?.code == Exit.noSuchSession && none?.advice.contains("yours: mcp, forge") == true)
        #expect(UserSessionAdvice.remove(.noSuchSession(session: "x"), name: "x", yours: [])?.advice.contains("you have added none") == true)
        #expect(UserSessionAdvice.remove(.permissionDenied, name: "bob/mcp", yours: [])?.code == Exit.permissionDenied)
        let unrevoked = UserSessionAdvice.remove(
            .upstreamUnavailable(session: "alice/mcp", reason: "the revocation endpoint did not answer", retryAfter: nil),
            name: "mcp", yours: ["mcp"])
        #expect(unrevoked?.advice.contains("tokenctl remove mcp --no-revoke") == true)
        #expect(UserSessionAdvice.remove(.unreachable(socket: "s", reason: "r"), name: "x", yours: []) == nil)
    }

    @Test func addSaysWhatWasFoundAndTheNextStep() {
        var status = SessionStatus(session: "alice/mcp", state: "loginRequired", generation: 0)
        status.owner = "alice"
        status.resources = ["https://mcp.example.com/mcp"]
        status.redirectUri = "http://127.0.0.1:49152/callback"
        let text = AddCommand.text(
            AddedSession(status: status, issuer: "https://auth.example.com", clientId: "c-123", registered: true),
            name: "mcp", scope: nil)
        #expect(text.hasPrefix("added session alice/mcp, yours (alice's); mcp names it\n"))
        #expect(text.contains("authorization server  https://auth.example.com"))
        #expect(text.contains("client                c-123, registered by tokend (RFC 7591)"))
        #expect(text.contains("resources             https://mcp.example.com/mcp"))
        #expect(text.contains("scope                 as the server names it"))
        #expect(text.contains("Next, log it in:  tokenctl login --session mcp --browser"))
        #expect(text.contains("tokenctl proxy mcp"))
        let given = AddCommand.text(
            AddedSession(status: status, issuer: "https://auth.example.com", clientId: "mine", registered: false),
            name: "mcp", scope: "read write")
        #expect(given.contains("mine, as given") && given.contains("scope                 \"read write\""))
    }

    @Test func theLoginAddSuggestsIsTheBrowserUnlessOnlyADeviceCodeWorks() {
        #expect(UserSessionAdvice.nextLogin(name: "mcp", flows: nil) == "tokenctl login --session mcp --browser")
        #expect(UserSessionAdvice.nextLogin(name: "mcp", flows: ["device", "browser"]) == "tokenctl login --session mcp --browser")
        #expect(UserSessionAdvice.nextLogin(name: "mcp", flows: ["device"]) == "tokenctl login --session mcp --device")
    }

    @Test func statusNamesTheOwnerOfAUsersSession() {
        var status = SessionStatus(session: "alice/mcp", state: "active", generation: 1)
        status.owner = "alice"
        #expect(StatusAdvice(status, now: 0).details.contains {
            $0.hasPrefix("alice's own session: only alice may use it")
        })
        #expect(!StatusAdvice(SessionStatus(session: "default", state: "active", generation: 1), now: 0).details.contains {
            $0.contains("own session")
        })
    }

    @Test func theProxyForwardsToTheResourcesOriginAndTheAgentAsksForItsPath() throws {
        let mcp = try #require(ProxyTarget(resource: "https://mcp.example.com/mcp"))
        #expect(mcp.origin == "https://mcp.example.com" && mcp.path == "/mcp")
        #expect(mcp.agentURL(.tcp(host: "127.0.0.1", port: 8765)) == "http://127.0.0.1:8765/mcp")
        #expect(mcp.agentURL(.tcp(host: "[::1]", port: 8765)) == "http://[::1]:8765/mcp")
        #expect(mcp.agentURL(.unix(path: "/run/user/1000/mcp.sock")).contains("--unix-socket /run/user/1000/mcp.sock"))
        let ported = try #require(ProxyTarget(resource: "https://api.example.com:8443/v1/mcp?tenant=7"))
        #expect(ported.origin == "https://api.example.com:8443" && ported.path == "/v1/mcp?tenant=7")
        let bare = try #require(ProxyTarget(resource: "http://127.0.0.1:9000"))
        #expect(bare.origin == "http://127.0.0.1:9000" && bare.path == "/")
        #expect(ProxyTarget(resource: "urn:example:api") == nil)
    }

    @Test func proxyListensOnlyOnLoopbackOrAPath() throws {
        #expect(try ProxyTarget.listenAddress("tcp:127.0.0.1:8765") == .tcp(host: "127.0.0.1", port: 8765))
        #expect(try ProxyTarget.listenAddress("tcp:[::1]:8765") == .tcp(host: "[::1]", port: 8765))
        #expect(try ProxyTarget.listenAddress("unix:/tmp/p.sock") == .unix(path: "/tmp/p.sock"))
        for text in ["tcp:0.0.0.0:8765", "tcp:10.0.0.1:80", "tcp:127.0.0.1:0", "tcp:127.0.0.1", "unix:", "8765", "tcp::80"] {
            #expect(throws: ValidationError.self, "\(text)") { try ProxyTarget.listenAddress(text) }
        }
    }
}

extension UserSessionTests {
    @Test func proxyPassesOtherOptionsButNotTheOnesItSets() throws {
        let proxy = try ProxyCommand.parse(["mcp", "--listen", "tcp:127.0.0.1:8765", "--", "--stream-idle-timeout", "600"])
        #expect(proxy.proxyOptions == ["--stream-idle-timeout", "600"] && proxy.listen == "tcp:127.0.0.1:8765")
        for own in [["--upstream", "https://elsewhere.example"], ["--session=other"], ["--listen", "tcp:127.0.0.1:1"]] {
            #expect(refused(ProxyCommand.self, ["mcp", "--"] + own)?.contains("tokenctl proxy sets it") == true, "\(own)")
        }
        #expect(refused(ProxyCommand.self, ["mcp", "--listen", "tcp:0.0.0.0:8765"])?.contains("loopback") == true)
    }

    @Test func aUsersOwnSessionIsSignedInByItsOwnerAndToldToNobodyElse() {
        var tables = AccessTables()
        tables.global.readUsers = ["65534"]
        let nobody = AgentAuthority(tables: tables, tokendUID: 990, person: .init(uid: 65534, gid: 65534, groups: []))
        #expect(!nobody.mayLogIn("default"), "tokend.toml's session: its admin tables")
        #expect(nobody.mayLogIn("nobody/mcp", owner: AgentAuthority.userName(65534)), "their own: the owner signs it in")
        #expect(nobody.mayLogIn("65534/mcp", owner: "65534"), "an owner tokend names by uid")
        #expect(!nobody.mayLogIn("alice/mcp", owner: "alice"))
        #expect(nobody.whoMay("alice/mcp", owner: "alice") == "alice")
        #expect(nobody.concerns(owner: nil) && nobody.concerns(owner: AgentAuthority.userName(65534)))
        #expect(!nobody.concerns(owner: "alice"), "another person's session is their agent's to tell")
        let root = AgentAuthority(tables: tables, tokendUID: 990, person: .init(uid: 0, gid: 0, groups: []))
        #expect(!root.mayLogIn("alice/mcp", owner: "alice") && !root.concerns(owner: "alice"), "nor an administrator's")
    }

    @Test func theFreePortReachesTheProxyAsDescriptor3ThroughTheShell() {
        let proxy = ["/usr/bin/tokend-proxy", "--session", "mcp"]
        let (program, arguments) = FreePort.command(fd: 6, proxy)
        #expect(program == "/bin/sh")
        #expect(arguments == ["sh", "-c", "exec 3<&6 6<&- && exec \"$@\"", "tokend-proxy"] + proxy)
        #expect(FreePort.command(fd: 3, proxy) == (proxy[0], proxy), "already there")
        #expect(FreePort.command(fd: 12, proxy) == (proxy[0], proxy), "moved by dup2: the shell names 0 to 9 only")
    }
}
