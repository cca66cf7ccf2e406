import Varlink

/// The session's cookies: their wire form and the methods that read and change them.
extension BrokerInterface {
    public struct Cookie: Codable, Sendable, Equatable {
        public var name: String
        public var value: String
        public var domain: String
        public var hostOnly: Bool
        public var path: String
        public var expiresAt: Int?
        public var secure: Bool
        public var httpOnly: Bool
        /// Strict, Lax or None
        public var sameSite: String?

        public init(
            name: String, value: String, domain: String, hostOnly: Bool, path: String, expiresAt: Int?, secure: Bool,
            httpOnly: Bool, sameSite: String?
        ) {
            self.name = name
            self.value = value
            self.domain = domain
            self.hostOnly = hostOnly
            self.path = path
            self.expiresAt = expiresAt
            self.secure = secure
            self.httpOnly = httpOnly
            self.sameSite = sameSite
        }
    }

    public struct CookieChange: Codable, Sendable, Equatable {
        public var action: String
        public var cookie: Cookie

        public init(action: String, cookie: Cookie) {
            self.action = action
            self.cookie = cookie
        }
    }

    public enum GetCookies {
        public struct In: Codable, Sendable {
            public var session: String?
            public var url: String
            public init(session: String? = nil, url: String) {
                self.session = session
                self.url = url
            }
        }
        public struct Out: Codable, Sendable {
            public var cookies: [Cookie]
            /// Exactly the Cookie header a browser would send ("" when none).
            public var header: String
            public var version: Int
            public init(cookies: [Cookie], header: String, version: Int) {
                self.cookies = cookies
                self.header = header
                self.version = version
            }
        }
    }

    public enum ImportCookies {
        public struct In: Codable, Sendable {
            public var session: String?
            public var url: String
            public var setCookie: [String]
            public init(session: String? = nil, url: String, setCookie: [String]) {
                self.session = session
                self.url = url
                self.setCookie = setCookie
            }
        }
        public struct Out: Codable, Sendable {
            public var version: Int
            public var applied: Int
            public var rejected: [String]
            public init(version: Int, applied: Int, rejected: [String]) {
                self.version = version
                self.applied = applied
                self.rejected = rejected
            }
        }
    }

    public enum DeleteCookies {
        public struct In: Codable, Sendable {
            public var session: String?
            public var url: String?
            public var name: String?
            public init(session: String? = nil, url: String? = nil, name: String? = nil) {
                self.session = session
                self.url = url
                self.name = name
            }
        }
        public struct Out: Codable, Sendable {
            public var version: Int
            public var deleted: Int
            public init(version: Int, deleted: Int) {
                self.version = version
                self.deleted = deleted
            }
        }
    }

    public enum ExportCookies {
        public struct In: Codable, Sendable {
            public var session: String?
            public var format: String?
            public init(session: String? = nil, format: String? = nil) {
                self.session = session
                self.format = format
            }
        }
        public struct Out: Codable, Sendable {
            public var text: String
            public init(text: String) { self.text = text }
        }
    }
}
