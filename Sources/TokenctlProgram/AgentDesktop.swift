#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the agent asks of the desktop: notifications
/// (org.freedesktop.Notifications, the Desktop Notifications Specification)
/// and opening a URL (the XDG desktop portal's OpenURI, which works from a
/// sandbox and from a user service without $DISPLAY).
struct AgentDesktop: Sendable {
    let bus: AgentBus

    static let notifications = "org.freedesktop.Notifications"
    static let notificationsPath = "/org/freedesktop/Notifications"
    static let portal = "org.freedesktop.portal.Desktop"
    static let portalPath = "/org/freedesktop/portal/desktop"
    /// The action key of the sign-in button.
    static let signInAction = "sign-in"

    /// Posts a notification (or replaces `replacing`); its id. With a sign-in
    /// action it stays (resident) after the action is chosen, so that a login
    /// abandoned in the browser can be started again from it.
    func notify(summary: String, body: String, signIn: Bool, replacing: UInt32 = 0) async throws(BusError) -> UInt32 {
        let actions = signIn ? [Self.signInAction, "Sign in"] : []
        let hints: [(String, BusVariant)] =
            [("urgency", .byte(1))] + (signIn ? [("resident", .boolean(true))] : [])
        let body = Self.escaped(body)
        return try await bus.perform { bus throws(BusError) in
            try BusMessage.call(
                bus, destination: Self.notifications, path: Self.notificationsPath, interface: Self.notifications,
                member: "Notify",
                append: { message throws(BusError) in
                    try message.append("tokend")
                    try message.append(replacing)
                    try message.append("dialog-password")
                    try message.append(summary)
                    try message.append(body)
                    try message.append(strings: actions)
                    try message.append(dictionary: hints)
                    try message.append(Int32(0))  // never expires: it goes when the session is active again
                },
                read: { reply throws(BusError) in try reply.readUInt32() })
        }
    }

    /// The notification server's name and version ("gnome-shell 43.9"), asked once at start.
    func notificationServer() async throws(BusError) -> String {
        try await bus.perform { bus throws(BusError) in
            try BusMessage.call(
                bus, destination: Self.notifications, path: Self.notificationsPath, interface: Self.notifications,
                member: "GetServerInformation", timeout: 10_000_000, append: { _ throws(BusError) in },
                read: { reply throws(BusError) in
                    let name = try reply.readString("s")
                    _ = try reply.readString("s")  // vendor
                    return "\(name) \(try reply.readString("s"))"
                })
        }
    }

    func close(_ id: UInt32) async throws(BusError) {
        try await bus.perform { bus throws(BusError) in
            try BusMessage.call(
                bus, destination: Self.notifications, path: Self.notificationsPath, interface: Self.notifications,
                member: "CloseNotification", append: { message throws(BusError) in try message.append(id) },
                read: { _ throws(BusError) in })
        }
    }

    /// How the URL was opened.
    enum Opened: Equatable, Sendable {
        case portal
        /// No portal answered; xdg-open was started.
        case xdgOpen(reason: String)
    }

    /// Opens `url` in the user's browser through the portal; only when no
    /// portal answers (none installed, none running), through xdg-open.
    /// A portal that answers with a refusal is not bypassed.
    func open(_ url: String) async throws(BusError) -> Opened {
        do {
            _ = try await bus.perform { bus throws(BusError) in
                try BusMessage.call(
                    bus, destination: Self.portal, path: Self.portalPath, interface: "org.freedesktop.portal.OpenURI",
                    member: "OpenURI", timeout: 30_000_000,
                    append: { message throws(BusError) in
                        try message.append("")  // no parent window
                        try message.append(url)
                        try message.append(dictionary: [])
                    },
                    read: { reply throws(BusError) in try reply.readString("o") })
            }
            return .portal
        } catch let error where Self.noPortal(error) {
            BrowserLogin.startBrowser(url)
            return .xdgOpen(reason: error.description)
        }
    }

    /// The errors that mean nobody answers for the portal.
    static func noPortal(_ error: BusError) -> Bool {
        guard let name = error.name else { return false }
        return [
            "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.TimedOut",
            "org.freedesktop.DBus.Error.UnknownObject", "org.freedesktop.DBus.Error.UnknownInterface",
            "org.freedesktop.DBus.Error.UnknownMethod",
        ].contains(name)
    }

    /// Notification bodies may be read as markup (the "body-markup" capability).
    static func escaped(_ text: String) -> String {
        Text.htmlEscaped(text)
    }
}
