// WebKitGTK 6.0 (GTK 4), libsoup 3 and GLib's Unix sources, for Swift.
#include <gtk/gtk.h>
#include <webkit/webkit.h>
#include <libsoup/soup.h>
#include <glib-unix.h>
#include <jsc/jsc.h>
#include <sys/pidfd.h>

// The calls that differ between WebKitGTK 6.0 and 4.1, under one name:
// CWebKit2GTK/shim.h has the same functions for 4.1, so TokendWebView's
// Swift sources are the same for both APIs.

/// The cookie manager of the web view's store (6.0: its network session's).
static inline WebKitCookieManager *tokend_webkit_cookie_manager(WebKitWebView *view) {
    return webkit_network_session_get_cookie_manager(webkit_web_view_get_network_session(view));
}

/// Whether the web view's store lives in memory only.
static inline gboolean tokend_webkit_is_ephemeral(WebKitWebView *view) {
    return webkit_network_session_is_ephemeral(webkit_web_view_get_network_session(view));
}

static inline void tokend_webkit_unregister_handler(WebKitUserContentManager *manager, const char *name, const char *world) {
    webkit_user_content_manager_unregister_script_message_handler(manager, name, world);
}

/// A web view with a store of its own in memory (a floating reference, as from webkit_web_view_new()).
static inline WebKitWebView *tokend_webkit_new_ephemeral_web_view(void) {
    WebKitNetworkSession *session = webkit_network_session_new_ephemeral();
    WebKitWebView *view = g_object_new(WEBKIT_TYPE_WEB_VIEW, "network-session", session, NULL);
    g_object_unref(session);
    return view;
}

/// How a web view gets an ephemeral store, for attach's refusal.
#define TOKEND_WEBKIT_EPHEMERAL_HINT "give it an ephemeral network session (webkit_network_session_new_ephemeral())"
