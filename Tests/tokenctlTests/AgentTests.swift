import Config
import Testing
import TokendClient

@testable import TokenctlProgram

/// The agent's bookkeeping and words, apart from the bus and tokend.
@Suite struct AgentTests {
    @Test func oneNotificationPerEpisodeClosedWhenTheSessionIsUsableAgain() {
        var episodes = AgentEpisodes()
        #expect(episodes.observe(session: "web", state: "active") == nil, "nothing while all is well")
        #expect(episodes.observe(session: "web", state: "loginRequired") == .post(session: "web"))
        #expect(episodes.posted(session: "web", id: 7) == nil)
        #expect(episodes.session(of: 7) == "web")
        // A failed or abandoned login, or the same state told again: the same episode.
        #expect(episodes.observe(session: "web", state: "loginRequired") == nil)
        #expect(episodes.observe(session: "mail", state: "loginRequired") == .post(session: "mail"), "each session its own")
        #expect(episodes.observe(session: "web", state: "active") == .close(id: 7))
        #expect(episodes.session(of: 7) == nil)
        #expect(episodes.observe(session: "web", state: "loginRequired") == .post(session: "web"), "a new episode")
    }

    @Test func anEpisodeThatEndsWhileItsNotificationIsPostedClosesIt() {
        var episodes = AgentEpisodes()
        #expect(episodes.observe(session: "web", state: "loginRequired") == .post(session: "web"))
        #expect(episodes.observe(session: "web", state: "active") == nil, "nothing posted yet")
        #expect(episodes.posted(session: "web", id: 3) == .close(id: 3))
        #expect(episodes.posted.isEmpty)
    }

    @Test func whatAReaderFindsAtTheStartIsKeptQuiet() {
        var episodes = AgentEpisodes()
        #expect(episodes.observe(session: "web", state: "loginRequired", announce: false) == nil)
        #expect(episodes.observe(session: "web", state: "loginRequired") == nil, "the same episode, still unannounced")
        #expect(episodes.observe(session: "web", state: "loggedOut") == nil, "ended, with nothing to close")
        #expect(episodes.observe(session: "web", state: "loginRequired") == .post(session: "web"))
    }

    @Test func theAdminTablesDecideWhoMaySignIn() {
        var tables = AccessTables()
        tables.global.readUsers = ["4242"]
        tables.sessions["web"] = {
            var own = AccessSettings()
            own.adminGroups = ["4343"]
            return own
        }()
        let reader = AgentAuthority(tables: tables, tokendUID: 990, person: .init(uid: 4242, gid: 4242, groups: []))
        #expect(!reader.mayLogIn("default"))
        #expect(reader.whoMay("default") == "root or uid 990")
        #expect(!reader.mayLogIn("web"), "the session's own table keeps the global admin-users")
        let member = AgentAuthority(tables: tables, tokendUID: 990, person: .init(uid: 4242, gid: 1, groups: [4343]))
        #expect(member.mayLogIn("web") && !member.mayLogIn("default"))
        #expect(AgentAuthority(tables: tables, tokendUID: 990, person: .init(uid: 990, gid: 1, groups: [])).mayLogIn("default"))
        #expect(AgentAuthority(tables: nil, tokendUID: nil, person: .init(uid: 4242, gid: 1, groups: [])).mayLogIn("x"),
                "no tables: the button is offered and tokend decides")
    }
}
