// WebKitGTK 4.1 (GTK 3), libsoup 3 and GLib's Unix sources, for Swift: the
// same names as CWebKitGTK/shim.h (6.0) where the two APIs differ.
#include <gtk/gtk.h>
#include <webkit2/webkit2.h>
#include <libsoup/soup.h>
#include <glib-unix.h>
#include <jsc/jsc.h>
#include <sys/pidfd.h>

/// The cookie manager of the web view's store (4.1: its website data manager's).
static inline WebKitCookieManager *tokend_webkit_cookie_manager(WebKitWebView *view) {
    return webkit_website_data_manager_get_cookie_manager(webkit_web_view_get_website_data_manager(view));
}

/// Whether the web view's store lives in memory only.
static inline gboolean tokend_webkit_is_ephemeral(WebKitWebView *view) {
    return webkit_web_view_is_ephemeral(view);
}

static inline void tokend_webkit_unregister_handler(WebKitUserContentManager *manager, const char *name, const char *world) {
    webkit_user_content_manager_unregister_script_message_handler_in_world(manager, name, world);
}

/// A web view with a store of its own in memory (a floating reference, as from webkit_web_view_new()):
/// an ephemeral web context's, so that one network process serves it (the is-ephemeral property
/// would add one beside the default context's).
static inline WebKitWebView *tokend_webkit_new_ephemeral_web_view(void) {
    WebKitWebContext *context = webkit_web_context_new_ephemeral();
    WebKitWebView *view = g_object_new(WEBKIT_TYPE_WEB_VIEW, "web-context", context, NULL);
    g_object_unref(context);
    return view;
}

/// How a web view gets an ephemeral store, for attach's refusal.
#define TOKEND_WEBKIT_EPHEMERAL_HINT "give it an ephemeral web context (webkit_web_context_new_ephemeral())"
