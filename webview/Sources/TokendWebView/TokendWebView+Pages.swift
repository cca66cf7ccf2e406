import Glibc
import TokendInterface
import Varlink

/// Pages ask through the relay (relay.js, in the "tokend" world of the pages of
/// the session's web origins) with the page API of the browser extension:
/// GetToken, Refresh and GetProof, marked with the page's origin (`page`),
/// answered once the token's events are in the web view. Which URLs a page's
/// proofs may name is tokend's rule (GetProof holds a call marked with its
/// page to the session's web-resources), as for the browser bridge.
extension TokendWebView {
    static let pageMethods: Set<String> = ["GetToken", "Refresh", "GetProof"]
    /// The refusal pages get, named as the browser extension names it (one page API).
    static let permissionDenied = "io.tokend.Broker.PermissionDenied"
    static let relaySource = String(decoding: PackageResources.relay_js, as: UTF8.self)

    func watchPages() {
        webkit_user_content_manager_register_script_message_handler_with_reply(contentManager, "tokend", Self.world)
        let received: @convention(c) (UnsafeMutableRawPointer?, JSValue?, OpaquePointer?, gpointer?) -> gboolean = {
            _, value, reply, data in
            MainActor.assumeIsolated {
                let attachment = Unmanaged<TokendWebView>.fromOpaque(data!).takeUnretainedValue()
                attachment.pageAsked(value, PageReply(reply!, context: jsc_value_get_context(value)))
            }
            return 1
        }
        listen(raw(contentManager)!, "script-message-with-reply-received::tokend", received,
               Unmanaged.passUnretained(self).toOpaque())
    }

    /// The relay goes into top frames of the web origins' hosts only (pages elsewhere have no
    /// way to ask); the origin, port included, is checked again for each request. Until
    /// tokend has named the origins (it is down as the app starts) it goes into every top
    /// frame, so that pages learn that tokend is unavailable instead of waiting.
    func installRelay(everywhere: Bool = false) {
        removeRelay()
        relayEverywhere = everywhere
        let patterns = everywhere ? ["*://*/*"] : Set(hosts.hosts.flatMap { ["http://\($0)/*", "https://\($0)/*"] }).sorted()
        guard !patterns.isEmpty else { return }
        var list = patterns.map { UnsafePointer(strdup($0)) } + [nil]
        defer { for pattern in list { free(UnsafeMutablePointer(mutating: pattern)) } }
        script = list.withUnsafeMutableBufferPointer {
            webkit_user_script_new_for_world(
                Self.relaySource, WEBKIT_USER_CONTENT_INJECT_TOP_FRAME, WEBKIT_USER_SCRIPT_INJECT_AT_DOCUMENT_START,
                Self.world, $0.baseAddress, nil)
        }
        webkit_user_content_manager_add_script(contentManager, script)
    }

    /// The script stays ours (the manager keeps what it needs, not our handle) until removed.
    func removeRelay() {
        guard let script else { return }
        webkit_user_content_manager_remove_script(contentManager, script)
        webkit_user_script_unref(script)
        self.script = nil
    }

    func pageAsked(_ value: JSValue?, _ reply: PageReply) {
        guard let text = jsc_value_to_json(value, 0).map({ String(cString: $0) }),
            let message = (try? JSONParser.parse(text))?.objectValue,
            let method = message["method"]?.stringValue, let origin = message["origin"]?.stringValue
        else {
            log("a page sent a request that is not {method, parameters, origin}: answered InvalidRequest")
            return reply.send(["error": "io.tokend.Bridge.InvalidRequest"])
        }
        guard ready || !origins.isEmpty else {
            return reply.send(["error": "io.tokend.Bridge.Disconnected", "parameters": ["reason": "tokend has not answered yet"]])
        }
        guard Self.pageMethods.contains(method), origins.contains(origin), origin == currentOrigin else {
            log("refused \(method) from \(origin): not GetToken/Refresh/GetProof from one of session \(session)'s web-origins")
            return reply.send(["error": .string(Self.permissionDenied)])
        }
        guard var parameters = message["parameters"].map({ $0.isNull ? [:] : $0.objectValue }) ?? [:] else {
            log("a page sent \(method) with parameters that are not an object: answered InvalidRequest")
            return reply.send(["error": "io.tokend.Bridge.InvalidRequest"])
        }
        parameters = parameters.filter { !$0.value.isNull }
        // A resource only of the session's web-resources, as the browser bridge allows.
        if let resource = parameters["resource"] {
            guard let name = resource.stringValue, webResources.contains(name) else {
                log("refused \(method) from \(origin): resource not among session \(session)'s web-resources")
                return reply.send([
                    "error": .string(Self.permissionDenied),
                    "parameters": ["session": .string(session), "resource": resource,
                                   "reason": "not one of the session's web-resources"],
                ])
            }
        }
        let keyed = parameters["resource"] != nil || parameters["scope"] != nil
        parameters["session"] = .string(session)
        // The call is the page's: tokend hands out only a token whose audience pages may have (web-resources).
        // The page's own word for it is not taken; this is the origin checked above, the one the web view shows.
        parameters["page"] = .string(origin)
        call(method, parameters) { [weak self] result in
            switch result {
            case .success(let answer) where answer.error != nil:
                reply.send(["error": .string(answer.error!), "parameters": .object(answer.parameters)])
            case .success(let answer):
                let generation = answer.parameters["token"]?["generation"]?.intValue ?? 0
                guard let self, !keyed else { return reply.send(["parameters": .object(answer.parameters)]) }
                self.whenApplied(generation) { reply.send(["parameters": .object(answer.parameters)]) }
            case .failure(let failure):
                self?.log("\(method) for \(origin): \(failure)")
                reply.send(["error": "io.tokend.Bridge.Disconnected", "parameters": ["reason": .string("\(failure)")]])
            }
        }
    }

    /// Passes a session event to the page, if it is on one of the web origins.
    func tellPages(_ message: JSONObject) {
        guard keepAlive != nil, let origin = currentOrigin, origins.contains(origin) else { return }
        let source = "tokendRelay.event(\(JSONWriter.string(.object(message))))"
        webkit_web_view_evaluate_javascript(webView, source, -1, Self.world, nil, nil, nil, nil)
    }
}

/// A page's pending answer: the reply handle and the page's JavaScript context, kept until answered.
@MainActor
final class PageReply {
    private let reply: OpaquePointer
    private let context: JSContext?
    private var sent = false

    init(_ reply: OpaquePointer, context: JSContext?) {
        self.reply = webkit_script_message_reply_ref(reply)
        self.context = context
        if let context { g_object_ref(raw(context)) }
    }

    func send(_ answer: JSONObject) {
        guard !sent else { return }
        sent = true
        let value = jsc_value_new_from_json(context, JSONWriter.string(.object(answer)))
        webkit_script_message_reply_return_value(reply, value)
        if let value { g_object_unref(raw(value)) }
        webkit_script_message_reply_unref(reply)
        if let context { g_object_unref(raw(context)) }
    }
}
