import Varlink

/// GetAccess: what a user may do with each session (tokenctl access).
extension BrokerInterface {
    public struct SessionAccess: Codable, Sendable, Equatable {
        public var session: String
        public var read: Bool
        public var login: Bool
        public var cookiesWrite: Bool
        public var share: Bool
        public var pages: [String]
        public var deniedResources: [String]

        public init(
            session: String, read: Bool, login: Bool, cookiesWrite: Bool, share: Bool, pages: [String],
            deniedResources: [String]
        ) {
            self.session = session
            self.read = read
            self.login = login
            self.cookiesWrite = cookiesWrite
            self.share = share
            self.pages = pages
            self.deniedResources = deniedResources
        }
    }

    public enum GetAccess {
        public struct In: Codable, Sendable {
            public var session: String?
            /// A user name or uid; nil: the caller.
            public var user: String?
            public init(session: String? = nil, user: String? = nil) {
                self.session = session
                self.user = user
            }
        }
        public struct Out: Codable, Sendable {
            public var uid: Int
            public var user: String
            public var sessions: [SessionAccess]
            public init(uid: Int, user: String, sessions: [SessionAccess]) {
                self.uid = uid
                self.user = user
                self.sessions = sessions
            }
        }
    }
}
