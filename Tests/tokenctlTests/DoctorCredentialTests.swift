import Config
import Foundation
import Glibc
import Testing

@testable import TokenctlProgram

/// The doctor's credentials check: a systemd credential is judged by the file
/// the unit loads it from, not by its private copy.
@Suite struct DoctorCredentialTests {
    let standIns = "/tmp/tokenctl-doctor-test"
    var secret: CredentialFile { CredentialFile(key: "client-secret-file", path: "\(standIns)/default.client-secret") }

    func facts(_ table: [String: (mode: UInt32, gid: UInt32)]) -> (String) -> FileFacts? {
        { path in table[path].map { FileFacts(path: path, uid: 0, gid: $0.gid, mode: $0.mode) } }
    }

    @Test func eachCredentialsSourceIsReadFromTheUnitAndItsDropIns() throws {
        let store = try temporaryStore(holding: "work.client-secret")
        defer { try? FileManager.default.removeItem(atPath: store) }
        let text = """
            [Service]
            LoadCredential=default.client-secret:/etc/tokend/default.client-secret
            LoadCredential=work.client-secret
            LoadCredential=gone.client-secret:gone
            LoadCredentialEncrypted=tokend.state-key
            SetCredential=inline.client-secret:hunter2
            # /etc/systemd/system/tokend.service.d/secret.conf
            [Service]
            LoadCredential=default.client-secret:/etc/credstore/default.client-secret
            """
        let sources = DoctorCredentialCheck.sources(inUnitText: text, stores: ["/nonexistent", store])
        #expect(sources["default.client-secret"] == .file("/etc/credstore/default.client-secret"), "the drop-in wins")
        #expect(sources["work.client-secret"] == .file("\(store)/work.client-secret"))
        #expect(sources["gone.client-secret"] == .missing("gone"))
        #expect(sources["tokend.state-key"] == .encrypted)
        #expect(sources["inline.client-secret"] == .inUnit)
    }

    @Test func aCredentialIsJudgedByTheFileItIsLoadedFrom() {
        let source = "/etc/tokend/default.client-secret"
        let unit: [String: DoctorCredentialCheck.Source] = ["default.client-secret": .file(source)]
        // The stand-in (the copy's place) is 0600; the source is what others may read.
        let open = DoctorCredentialCheck.judge(
            session: "default", files: [secret], standIns: standIns, unitSources: unit, ownGroup: 0,
            facts: facts([secret.path: (0o600, 0), source: (0o644, 0)]))
        #expect(open.outcome == .fail)
        #expect(open.detail == "client-secret-file \(source) (mode 0644) may be read by every user of this host: they can read the client secret")
        #expect(open.fix?.hasPrefix("chmod 0600 \(source)") == true)
        let closed = DoctorCredentialCheck.judge(
            session: "default", files: [secret], standIns: standIns, unitSources: unit, ownGroup: 0,
            facts: facts([source: (0o600, 0)]))
        #expect(closed == .ok("credentials (default)", "no other user may read \(source)"))
        let gone = DoctorCredentialCheck.judge(
            session: "default", files: [secret], standIns: standIns, unitSources: unit, ownGroup: 0, facts: facts([:]))
        #expect(gone.detail == "client-secret-file \(source) does not exist")
        #expect(gone.fix == "create it (mode 0600), or point LoadCredential= in tokend.service at the file")
    }

    @Test func groupReadPassesOnlyForTokendsGroup() {
        let file = CredentialFile(key: "client-key-file", path: "/etc/tokend/key.pem")
        let judge = { (gid: UInt32, own: UInt32?) in
            DoctorCredentialCheck.judge(
                session: "s", files: [file], standIns: nil, unitSources: [:], ownGroup: own,
                facts: facts([file.path: (0o640, gid)])).outcome
        }
        #expect(judge(990, 990) == .ok)
        #expect(judge(990, 991) == .fail)
        #expect(judge(990, nil) == .fail, "tokend's group unknown: group-read is not assumed safe")
        #expect(CredentialFile.exposure(mode: 0o600, group: 5, ownGroup: 6) == nil)
        #expect(CredentialFile.exposure(mode: 0o604, group: 6, ownGroup: 6) == "every user of this host")
    }

    @Test func aSecretWrittenInTheUnitOrMissingFromTheStoresIsNamed() {
        let inUnit = DoctorCredentialCheck.judge(
            session: "default", files: [secret], standIns: standIns, unitSources: ["default.client-secret": .inUnit],
            ownGroup: 0, facts: facts([:]))
        #expect(inUnit.outcome == .fail && inUnit.detail.contains("SetCredential="))
        #expect(inUnit.fix?.contains("LoadCredentialEncrypted=default.client-secret") == true)
        let missing = DoctorCredentialCheck.judge(
            session: "default", files: [secret], standIns: standIns,
            unitSources: ["default.client-secret": .missing("default.client-secret")], ownGroup: 0, facts: facts([:]))
        #expect(missing.outcome == .fail && missing.detail.contains("found in none of /etc/credstore"))
        let sealed = DoctorCredentialCheck.judge(
            session: "default", files: [secret], standIns: standIns, unitSources: ["default.client-secret": .encrypted],
            ownGroup: 0, facts: facts([:]))
        #expect(sealed == .ok("credentials (default)", "no other user may read default.client-secret (encrypted)"))
    }

    func temporaryStore(holding name: String) throws -> String {
        var template = Array("/tmp/credstore-test-XXXXXX".utf8CString)
        let directory = String(cString: try #require(mkdtemp(&template)))
        _ = FileManager.default.createFile(atPath: "\(directory)/\(name)", contents: Data("s".utf8))
        return directory
    }
}
