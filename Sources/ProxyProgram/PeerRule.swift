import ArgumentParser
import Logging
import Persons
import Synchronization
import TokendClient

/// Who may use the proxy on TCP, where any local user can connect: its own person only (the proxy's user
/// and the uids of that user's /etc/subuid range), or every local user. A session a user added (tokend's
/// status names its owner) is served to its owner only, whatever --peers says; one tokend.toml configures
/// is served as --peers says, to all by default (as before there were users' sessions). Until tokend has
/// said which kind the session is, only the own person is served: a session a user added is never lent
/// out for the moments before tokend answers. On a Unix socket, SO_PEERCRED admits only the proxy's user.
final class PeerRule: Sendable {
    enum Setting: String, ExpressibleByArgument, CaseIterable, Sendable {
        case own, all
    }

    /// What the person asked for (nil: what suits the session).
    let setting: Setting?
    private let persons: SubordinateIDs
    /// The proxy's own person.
    private let own: UInt32
    /// What tokend's status said: the session's owner (nil: tokend.toml's), or nothing yet.
    private let learned = Mutex<Kind?>(nil)
    private let logger: Logger

    enum Kind: Equatable, Sendable {
        case configured
        case owned(by: String)
    }

    init(setting: Setting?, persons: SubordinateIDs, own uid: UInt32, logger: Logger) {
        self.setting = setting
        self.persons = persons
        own = persons.person(of: uid)
        self.logger = logger
    }

    /// tokend's answer about the session: a user's (`owner`) or tokend.toml's.
    func learn(_ kind: Kind) {
        let before = learned.withLock { state in
            defer { state = kind }
            return state
        }
        guard before != kind else { return }
        switch kind {
        case .owned(let owner):
            if setting == .all {
                logger.warning("the session is a user's: only its owner's programs are served, whatever --peers says", metadata: ["owner": "\(owner)"])
            } else {
                logger.notice("the session is a user's: only its owner's programs are served", metadata: ["owner": "\(owner)"])
            }
        case .configured:
            logger.notice(
                ownOnly ? "the session is one tokend.toml configures: only this user's programs are served (--peers own)"
                    : "the session is one tokend.toml configures: on TCP every local user's programs are served (--peers all)")
        }
    }

    /// Only the proxy's own person is served on TCP, now.
    var ownOnly: Bool {
        switch (learned.withLock { $0 }, setting) {
        case (.owned?, _): true
        case (_, .own?): true
        case (.configured?, .all?), (.configured?, nil): false
        case (nil, _): true  // not known yet: the safe side
        }
    }

    /// Whether a TCP peer whose socket the uid `owner` holds (nil: the kernel did not say) is served.
    func admits(owner uid: UInt32?) -> Bool {
        guard ownOnly else { return true }
        guard let uid else { return false }
        return persons.person(of: uid) == own
    }
}
