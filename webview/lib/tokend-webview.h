/* libtokend-webview-1: tokend as the native side of a WebKitGTK web view, for
 * any GTK application (C, and through GObject introspection Python, GJS, Vala,
 * Rust...), on WebKitGTK 6.0 (GTK 4) and 4.1 (GTK 3) alike.
 *
 *     #include <tokend-webview.h>
 *     g_autoptr(GError) error = NULL;
 *     g_autoptr(TokendWebViewAttachment) tokend = tokend_web_view_attach (web_view, "portal", &error);
 *
 * pkg-config: tokend-webview-1. */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

/**
 * TOKEND_WEB_VIEW_ERROR:
 *
 * The error domain of tokend_web_view_attach().
 */
#define TOKEND_WEB_VIEW_ERROR (tokend_web_view_error_quark ())
GQuark tokend_web_view_error_quark (void);

/**
 * TokendWebViewError:
 * @TOKEND_WEB_VIEW_ERROR_NOT_A_WEB_VIEW: the object is not a WebKitWebView
 * @TOKEND_WEB_VIEW_ERROR_UNSUPPORTED_WEBKIT: the process has neither WebKitGTK 6.0 nor 4.1 loaded
 * @TOKEND_WEB_VIEW_ERROR_BACKEND: this library's part for the process's WebKitGTK did not load
 * @TOKEND_WEB_VIEW_ERROR_PERSISTENT_STORE: the web view keeps cookies on disk; tokend keeps the
 *   session's cookies, so the web view needs an ephemeral store
 * @TOKEND_WEB_VIEW_ERROR_ALREADY_ATTACHED: the web view is attached already
 *
 * Why tokend_web_view_attach() refused.
 */
typedef enum {
    TOKEND_WEB_VIEW_ERROR_NOT_A_WEB_VIEW,
    TOKEND_WEB_VIEW_ERROR_UNSUPPORTED_WEBKIT,
    TOKEND_WEB_VIEW_ERROR_BACKEND,
    TOKEND_WEB_VIEW_ERROR_PERSISTENT_STORE,
    TOKEND_WEB_VIEW_ERROR_ALREADY_ATTACHED,
} TokendWebViewError;

#define TOKEND_WEB_VIEW_TYPE_ATTACHMENT (tokend_web_view_attachment_get_type ())
G_DECLARE_FINAL_TYPE (TokendWebViewAttachment, tokend_web_view_attachment, TOKEND_WEB_VIEW, ATTACHMENT, GObject)

TokendWebViewAttachment *tokend_web_view_attach (gpointer web_view, const char *session, GError **error);
TokendWebViewAttachment *tokend_web_view_attach_to_socket (gpointer web_view, const char *session,
                                                           const char *socket, GError **error);
void tokend_web_view_attachment_detach (TokendWebViewAttachment *self);
gboolean tokend_web_view_attachment_is_attached (TokendWebViewAttachment *self);
const char *tokend_web_view_attachment_get_session (TokendWebViewAttachment *self);
const char *tokend_web_view_attachment_get_webkit_api (TokendWebViewAttachment *self);

G_END_DECLS
