import Foundation
import Glibc
import Testing

@testable import TokenctlProgram

/// Each of the doctor's checks, as a function of what it found.
@Suite struct DoctorTests {
    let root = DaemonIdentity(uid: 0, gid: 0, source: "pid 42")

    @Test func aLineSaysOutcomeCheckDetailAndFix() {
        let line = DoctorResult.fail("socket mode", "mode 0666", fix: "chmod 0660 /run/x").line
        #expect(line == "FAIL  socket mode: mode 0666 — fix: chmod 0660 /run/x")
        #expect(DoctorResult.ok("socket", "answers").line == "ok    socket: answers")
    }

    @Test func tokendsWordsOnTheConfigurationAreKept() {
        let bad = DoctorConfigCheck.judge(
            config: "/etc/t.toml", status: 78, output: "tokend: /etc/t.toml: daemon.socket-mode: not a mode\n")
        #expect(bad.outcome == .fail && bad.detail == "/etc/t.toml: daemon.socket-mode: not a mode")
        #expect(bad.fix!.contains("tokend --check-config --config /etc/t.toml"))
        #expect(DoctorConfigCheck.judge(config: "/etc/t.toml", status: 0, output: "tokend: /etc/t.toml: valid (default)\n")
            == .ok("configuration", "/etc/t.toml: valid (default)"))
    }

    @Test func theUnitsCredentialsAreReadFromItsTextAndDropIns() throws {
        let shipped = try String(contentsOfFile: #filePath.replacingOccurrences(
            of: "Tests/tokenctlTests/DoctorTests.swift", with: "systemd/tokend.service"), encoding: .utf8)
        let dropIn = "\n# /etc/systemd/system/tokend.service.d/key.conf\n[Service]\nLoadCredentialEncrypted=tokend.state-key\n"
        #expect(DoctorSystemd.credentials(inUnitText: shipped) == ["default.client-secret"])
        #expect(DoctorSystemd.credentials(inUnitText: shipped + dropIn) == ["default.client-secret", "tokend.state-key"])
    }

    @Test func aProblemWithAStandInForTheUnitsCredentialIsNotOne() throws {
        let standIns = try #require(CredentialStandIns.make(for: ["default.client-secret"]))
        defer { standIns.remove() }
        #expect(FileManager.default.isReadableFile(atPath: "\(standIns.directory)/default.client-secret"))
        let key = "tokend: session default: client key \(standIns.directory)/default.client-key: not a PEM key\n"
        #expect(DoctorConfigCheck.judge(config: "/etc/t.toml", status: 78, output: key, standIns: standIns.directory)
            .outcome == .ok)
        #expect(DoctorConfigCheck.judge(config: "/etc/t.toml", status: 78, output: key, standIns: nil).outcome == .fail)
        standIns.remove()
        #expect(!FileManager.default.fileExists(atPath: standIns.directory))
    }

    @Test func aListeningSocketIsProbedAndItsModeComparedWithTheConfiguration() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/sock"
        let listener = try listen(at: path)
        defer { close(listener) }
        chmod(path, 0o666)
        let facts = SocketFacts.probe(path)
        #expect(facts.connectError == nil && facts.mode == 0o666)
        #expect(facts.peer?.pid == getpid(), "SO_PEERCRED names the listening process")
        let results = DoctorSocketCheck.judge(
            facts, expectedMode: 0o660, daemon: DoctorSocketCheck.identity(of: facts), clientSocket: path,
            configuredSocket: path, me: (uid: getuid(), name: "me"))
        #expect(results.map(\.outcome) == [.ok, .fail, .ok])
        #expect(results[1].fix?.hasPrefix("chmod 0660 \(path)") == true)
    }

    @Test func aRefusedConnectNeverSuggestsJoiningRootsGroup() {
        func refused(gid: UInt32) -> DoctorResult {
            let facts = SocketFacts(path: "/run/tokend/io.tokend.Broker", mode: 0o660, gid: gid, connectError: EACCES)
            return DoctorSocketCheck.judge(
                facts, expectedMode: nil, daemon: nil, clientSocket: facts.path, configuredSocket: nil,
                me: (uid: 1000, name: "me"))[0]
        }
        #expect(refused(gid: 0).outcome == .fail)
        #expect(!refused(gid: 0).fix!.contains("usermod -aG root"))
        #expect(refused(gid: 0).fix!.contains("[access] read-groups"))
        #expect(refused(gid: 65534).fix!.hasPrefix("usermod -aG \(DoctorSocketCheck.groupName(65534)) me"))
    }

    @Test func noSocketSaysHowToStartTokend() {
        let results = DoctorSocketCheck.judge(
            SocketFacts.probe("/nonexistent/sock"), expectedMode: 0o660, daemon: nil,
            clientSocket: "/run/tokend/io.tokend.Broker", configuredSocket: "/nonexistent/sock", me: (uid: 1000, name: "me"))
        #expect(results.map(\.outcome) == [.warn, .fail])
        #expect(results[0].fix == "export TOKEND_SOCKET=/nonexistent/sock (or pass --socket)")
        #expect(results[1].fix!.contains("systemctl start tokend.socket"))
    }

    @Test func theStateDirectoryFollowsTokendsOwnRules() {
        #expect(DoctorStateCheck.parents(of: "/var/lib/tokend") == ["/", "/var", "/var/lib"])
        let stranger = FileFacts(path: "/var/lib/tokend", uid: 65534, gid: 65534, mode: 0o700)
        let refused = DoctorStateCheck.judgeDirectory(stranger, daemon: root)
        #expect(refused.outcome == .fail && refused.fix == "chown -R root: /var/lib/tokend after checking its contents")
        let writable = FileFacts(path: "/var/lib/tokend", uid: 0, gid: 0, mode: 0o770)
        #expect(DoctorStateCheck.judgeDirectory(writable, daemon: root).fix == "chmod 0700 /var/lib/tokend")
        let listable = FileFacts(path: "/var/lib/tokend", uid: 0, gid: 0, mode: 0o755)
        #expect(DoctorStateCheck.judgeDirectory(listable, daemon: root).outcome == .warn)
        let open = FileFacts(path: "/srv", uid: 0, gid: 0, mode: 0o777)
        #expect(DoctorStateCheck.judgeParent(open, daemon: root)?.fix == "chmod go-w /srv")
        let sticky = FileFacts(path: "/tmp", uid: 0, gid: 0, mode: 0o1777)
        #expect(DoctorStateCheck.judgeParent(sticky, daemon: root) == nil)
        let file = FileFacts(path: "/var/lib/tokend/default.session", uid: 0, gid: 0, mode: 0o644)
        #expect(DoctorStateCheck.judgeFile(file, daemon: root)?.fix == "chmod 0600 /var/lib/tokend/default.session")
    }

    @Test func encryptionAtRestNamesHowToSeal() {
        let none = DoctorEncryptionCheck.judge(.init(fileEncryptions: ["default.session": "none"]), daemon: root)
        #expect(none.outcome == .warn && none.fix!.contains("systemd-creds encrypt --name=tokend.state-key"))
        let missing = DoctorEncryptionCheck.judge(.init(keyFile: "/etc/tokend/state.key"), daemon: root)
        #expect(missing.outcome == .fail && missing.fix!.hasPrefix("tokend --generate-state-key > /etc/tokend/state.key"))
        let readable = FileFacts(path: "/etc/tokend/state.key", uid: 0, gid: 0, mode: 0o644)
        let open = DoctorEncryptionCheck.judge(.init(keyFile: readable.path, keyFileFacts: readable), daemon: root)
        #expect(open.fix == "chmod 0600 /etc/tokend/state.key")
        let sealed = DoctorEncryptionCheck.judge(
            .init(unitLoadsCredential: true, fileEncryptions: ["default.session": "aes-256-gcm"]), daemon: root)
        #expect(sealed.outcome == .ok)
    }

    @Test func theProvidersClockIsComparedByItsDateHeader() throws {
        let date = try #require(DoctorProviderCheck.httpDate("Thu, 28 May 2026 20:26:40 GMT"))
        #expect(date.timeIntervalSince1970 == 1_780_000_000)
        func answer(skew: Double) -> DoctorProviderCheck.Answer {
            .init(url: "https://id.example.com/x", curlStatus: 0, httpStatus: 200, date: date,
                  receivedAt: date.addingTimeInterval(skew))
        }
        let far = try #require(DoctorProviderCheck.judgeClock(answer(skew: 120), session: "default"))
        #expect(far.outcome == .fail && far.detail.hasPrefix("this machine's clock is 120 s ahead of the provider's"))
        #expect(far.fix!.contains("timedatectl set-ntp true"))
        #expect(DoctorProviderCheck.judgeClock(answer(skew: -20), session: "default")?.outcome == .warn)
        #expect(DoctorProviderCheck.judgeClock(answer(skew: 1), session: "default")?.outcome == .ok)
    }

    @Test func curlsFailuresAreNamed() {
        func judge(_ status: Int32) -> DoctorResult {
            DoctorProviderCheck.judge(
                .init(url: "https://id.example.com/.well-known/openid-configuration", curlStatus: status,
                      curlMessage: "curl: (\(status)) something", receivedAt: Date()),
                session: "default", isDiscovery: true)
        }
        #expect(judge(60).detail.hasPrefix("TLS to https://id.example.com/.well-known/openid-configuration does not verify"))
        #expect(judge(60).fix!.contains("update-ca-certificates"))
        let verbose = DoctorProviderCheck.judge(
            .init(url: "https://id.example.com/", curlStatus: 60,
                  curlMessage: "curl: (60) SSL certificate problem: self-signed certificate\nMore details here: https://curl.se/docs/sslcerts.html\n\ncurl failed to verify", receivedAt: Date()),
            session: "default", isDiscovery: true)
        #expect(verbose.detail == "TLS to https://id.example.com/ does not verify: curl: (60) SSL certificate problem: self-signed certificate")
        #expect(!DoctorResult.fail("x", "a\nb", fix: "c").line.contains("\n"), "a check is one line")
        #expect(judge(7).outcome == .fail && judge(6).fix!.contains("sessions.default.issuer"))
        let found = DoctorProviderCheck.judge(
            .init(url: "https://id.example.com/.well-known/openid-configuration", curlStatus: 0, httpStatus: 200,
                  receivedAt: Date()),
            session: "default", isDiscovery: true)
        #expect(found.outcome == .ok && found.detail.hasSuffix("(HTTP 200, TLS verified)"))
        #expect(DoctorProviderCheck.targets(of: .init(name: "d", issuer: "https://id.example.com/realms/x/"))?.urls == [
            "https://id.example.com/realms/x/.well-known/openid-configuration",
            "https://id.example.com/.well-known/oauth-authorization-server/realms/x",
        ])
    }

    @Test func tokenFilesKeepTheirConfiguredModeAndGroup() {
        let file = DoctorSetup.TokenFile(path: "/run/tokend/ci/token", mode: 0o640, group: "ci")
        let loose = FileFacts(path: file.path, uid: 0, gid: 1234, mode: 0o644)
        let wrongMode = DoctorTokenFileCheck.judge(file, found: loose, session: "ci", hasToken: true, groupID: 1234)
        #expect(wrongMode.fix == "chmod 0640 /run/tokend/ci/token (tokend writes 0640 at each refresh)")
        let otherGroup = FileFacts(path: file.path, uid: 0, gid: 0, mode: 0o640)
        #expect(DoctorTokenFileCheck.judge(file, found: otherGroup, session: "ci", hasToken: true, groupID: 1234).fix?
            .hasPrefix("chgrp ci /run/tokend/ci/token") == true)
        #expect(DoctorTokenFileCheck.judge(file, found: nil, session: "ci", hasToken: true, groupID: 1234).outcome == .fail)
        #expect(DoctorTokenFileCheck.judge(file, found: nil, session: "ci", hasToken: false, groupID: 1234).outcome == .ok)
    }

    @Test func aFleetStoreOffThisHostNeedsVerifiedTLS() throws {
        let plain = try #require(DoctorFleetCheck.address("postgresql://tokend@db.example.com/tokend?sslmode=disable"))
        #expect(plain == .init(host: "db.example.com", port: 5432, sslMode: "disable"))
        #expect(DoctorFleetCheck.judgeSSLMode(plain, session: "ci").outcome == .fail)
        let preferred = try #require(DoctorFleetCheck.address("postgres://u@192.0.2.9:6432/db?sslmode=prefer"))
        #expect(DoctorFleetCheck.judgeSSLMode(preferred, session: "ci").fix!.hasPrefix("sslmode=verify-full"))
        let local = try #require(DoctorFleetCheck.address("postgresql://u@127.0.0.1/db?sslmode=disable"))
        #expect(DoctorFleetCheck.judgeSSLMode(local, session: "ci").outcome == .ok)
        let byDefault = try #require(DoctorFleetCheck.address("postgresql://u@db.example.com/db"))
        #expect(byDefault.sslMode == "verify-full" && DoctorFleetCheck.judgeSSLMode(byDefault, session: "ci").outcome == .ok)
        #expect(DoctorFleetCheck.judgeSSLMode(.init(host: "db", port: 5432, sslMode: "require"), session: "ci").outcome == .warn)
    }

    @Test func theFleetStoresPortIsConnectedTo() {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                #expect(bind(listener, $0, length) == 0 && Glibc.listen(listener, 4) == 0)
                #expect(getsockname(listener, $0, &length) == 0)
            }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let open = DoctorFleetCheck.Address(host: "127.0.0.1", port: port, sslMode: "verify-full")
        #expect(DoctorFleetCheck.connectProblem(open) == nil)
        close(listener)
        let problem = DoctorFleetCheck.connectProblem(open)
        #expect(problem == "Connection refused")
        #expect(DoctorFleetCheck.judgeReach(open, problem: problem, session: "ci").fix!.contains("pg_hba.conf"))
    }

    @Test func aBridgeManifestMustNameAnExecutableHostAndTheExtension() {
        let manifest = BrowserBridgeCommand.manifest(host: "/usr/bin/tokend-native-host", firefox: false)
        #expect(DoctorBridgeCheck.problem(manifest: manifest, browser: "chromium", hostIsExecutable: { _ in true }) == nil)
        #expect(DoctorBridgeCheck.problem(manifest: manifest, browser: "chromium", hostIsExecutable: { _ in false })?
            .hasPrefix("names a host that is not an executable") == true)
        #expect(DoctorBridgeCheck.problem(manifest: manifest, browser: "firefox", hostIsExecutable: { _ in true })
            == "does not allow tokend's extension")
        let broken = DoctorBridgeCheck.judge(
            found: [("firefox", "/home/me/.mozilla/native-messaging-hosts/io.tokend.bridge.json", "names a host …")],
            webOrigins: true, user: "me")
        #expect(broken.outcome == .fail && broken.fix == "tokenctl browser-bridge --browser firefox")
        #expect(DoctorBridgeCheck.judge(found: [], webOrigins: true, user: "me").outcome == .warn)
        #expect(DoctorBridgeCheck.judge(found: [], webOrigins: false, user: "me").outcome == .skip)
    }

    @Test func aWeakenedUnitIsNamedSettingBySetting() {
        #expect(DoctorUnitCheck.judge(loadState: "not-found", properties: [:]).outcome == .skip)
        var properties = Dictionary(uniqueKeysWithValues: DoctorUnitCheck.expected.map { ($0.property, $0.value) })
        #expect(DoctorUnitCheck.judge(loadState: "loaded", properties: properties).outcome == .ok)
        properties["NoNewPrivileges"] = "no"
        let weakened = DoctorUnitCheck.judge(loadState: "loaded", properties: properties)
        #expect(weakened.outcome == .fail && weakened.detail.contains("NoNewPrivileges=no"))
        #expect(weakened.fix!.contains("systemctl revert tokend.service"))
    }

    func temporaryDirectory() throws -> String {
        var template = Array("/tmp/doctorXXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        return String(cString: made)
    }

    func listen(at path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, 4) == 0 else { throw POSIXError(.EADDRINUSE) }
        return fd
    }
}
