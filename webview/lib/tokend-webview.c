/* libtokend-webview-1: the GObject face of TokendWebView's core.
 *
 * This library links no WebKitGTK: an application has either WebKitGTK 6.0
 * (GTK 4) or 4.1 (GTK 3) in its process, and the first attach loads the
 * core's build for that one from tokend-webview-1/ beside this library
 * (libtokend-webview-6.so or libtokend-webview-4.1.so: the Swift core of
 * webview/Sources/TokendWebView, with the Swift runtime inside). So one
 * header, one pkg-config name and one typelib serve both APIs. */
#define _GNU_SOURCE
#define G_LOG_DOMAIN "TokendWebView"

#include "tokend-webview.h"
#include "tokend-webview-backend.h"

#include <dlfcn.h>
#include <stdlib.h>

/* The web view's reference to its attachment. */
#define ATTACHMENT_KEY "tokend-web-view-attachment"

typedef struct {
    const char *api;
    const char *webkit; /* the WebKitGTK library whose presence in the process selects this backend */
    const char *file;   /* in tokend-webview-1/ beside this library */
} Api;

static const Api apis[] = {
    { "6.0", "libwebkitgtk-6.0.so.4", "libtokend-webview-6.so" },
    { "4.1", "libwebkit2gtk-4.1.so.0", "libtokend-webview-4.1.so" },
};

/* Where the backends are: tokend-webview-1/ beside this library, as an absolute path taken as the
 * library is loaded. dladdr() gives the name the library was loaded by, which is relative when that
 * was (LD_LIBRARY_PATH=lib, dlopen ("lib/...")); resolved at the first attach, it would be taken
 * against whatever the working directory is by then. */
static char *backend_directory;

__attribute__ ((constructor)) static void
find_backend_directory (void)
{
    Dl_info self;
    if (dladdr ((void *) find_backend_directory, &self) && self.dli_fname) {
        g_autofree char *directory = g_path_get_dirname (self.dli_fname);
        g_autofree char *absolute = g_canonicalize_filename (directory, NULL); /* against the directory of now */
        backend_directory = g_build_filename (absolute, "tokend-webview-1", NULL);
    }
}

__attribute__ ((destructor)) static void
forget_backend_directory (void)
{
    g_clear_pointer (&backend_directory, g_free);
}

/* The backend, once loaded: a process has one WebKitGTK, so one backend. */
static struct {
    const Api *api;
    TokendBackendAttach attach;
    TokendBackendDetach detach;
    TokendBackendRelease release;
} backend;

/**
 * TokendWebViewAttachment:
 *
 * One web view attached to one tokend session: the page's tokend-page.js asks
 * tokend (through a relay in a script world of its own) instead of refreshing,
 * tokend's cookies are in the web view's store before every navigation to the
 * session's web origins, the site's cookies go to tokend, and a store lost
 * with WebKit's network process is restored.
 *
 * The web view holds the attachment until it is detached: by
 * tokend_web_view_attachment_detach(), or by the web view's end, on GTK 3 and
 * GTK 4 alike: its #GtkWidget::destroy, which GTK 3's gtk_widget_destroy()
 * emits and both GTKs emit as the widget is disposed (on GTK 4, when its last
 * reference goes, as when its window is destroyed). The attachment holds no
 * reference to the web view, so it never keeps one alive; hiding, unrealizing
 * or moving the web view to another parent does not detach it.
 *
 * Once detached, either way, the attachment stays a valid object for as long
 * as the app holds it: tokend_web_view_attachment_is_attached() returns
 * %FALSE, tokend_web_view_attachment_get_session() and
 * tokend_web_view_attachment_get_webkit_api() answer as before,
 * tokend_web_view_attachment_detach() does nothing, and no signal is emitted
 * after #TokendWebViewAttachment::detached. The web view, if it is still
 * there, can be attached again.
 */
struct _TokendWebViewAttachment {
    GObject parent_instance;
    char *session;
    void *core;        /* the core's attachment, while attached */
    GObject *web_view; /* while attached; not a reference (it holds one to us) */
    gboolean detaching; /* in tokend_web_view_attachment_detach() */
};

G_DEFINE_FINAL_TYPE (TokendWebViewAttachment, tokend_web_view_attachment, G_TYPE_OBJECT)
G_DEFINE_QUARK (tokend-web-view-error-quark, tokend_web_view_error)

enum { PROP_SESSION = 1, PROP_ATTACHED, PROP_WEBKIT_API, N_PROPS };
enum { SIGNAL_LOGGED_OUT, SIGNAL_DISCONNECTED, SIGNAL_RECONNECTED, SIGNAL_COOKIES_RESTORED, SIGNAL_DETACHED, N_SIGNALS };

static GParamSpec *properties[N_PROPS];
static guint signals[N_SIGNALS];

static gboolean
load_backend (GError **error)
{
    if (backend.attach)
        return TRUE;
    const Api *api = NULL;
    for (gsize i = 0; i < G_N_ELEMENTS (apis) && !api; i++) {
        void *webkit = dlopen (apis[i].webkit, RTLD_LAZY | RTLD_NOLOAD);
        if (webkit) {
            dlclose (webkit);
            api = &apis[i];
        }
    }
    if (!api) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_UNSUPPORTED_WEBKIT,
                     "neither WebKitGTK 6.0 (%s) nor 4.1 (%s) is loaded in this process", apis[0].webkit, apis[1].webkit);
        return FALSE;
    }
    if (!backend_directory) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_BACKEND, "cannot tell where libtokend-webview-1 is");
        return FALSE;
    }
    g_autofree char *path = g_build_filename (backend_directory, api->file, NULL);
    void *module = dlopen (path, RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_BACKEND, "WebKitGTK %s: %s", api->api, dlerror ());
        return FALSE;
    }
    TokendBackendAttach attach = (TokendBackendAttach) dlsym (module, "tokend_webview_backend_attach");
    backend.detach = (TokendBackendDetach) dlsym (module, "tokend_webview_backend_detach");
    backend.release = (TokendBackendRelease) dlsym (module, "tokend_webview_backend_release");
    if (!attach || !backend.detach || !backend.release) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_BACKEND, "%s lacks the backend's entry points", path);
        return FALSE;
    }
    backend.api = api;
    backend.attach = attach; /* last: it says the backend is complete */
    return TRUE;
}

static gboolean
tell_detached (gpointer self)
{
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_ATTACHED]);
    g_signal_emit (self, signals[SIGNAL_DETACHED], 0);
    return G_SOURCE_REMOVE;
}

/* The core ended the attachment (detach, or the web view's end): the web view lets go of us.
 * An app's detach hears it at once. The web view's end may come from a language's garbage
 * collector (GJS disposes a widget as it collects its last wrapper, when no callback into the
 * language may run), so the app hears of that from the main loop; is-attached is FALSE already. */
static void
detached (TokendWebViewAttachment *self)
{
    if (!self->core)
        return;
    g_object_ref (self); /* the web view's reference goes below */
    void *core = self->core;
    GObject *web_view = self->web_view;
    self->core = NULL;
    self->web_view = NULL;
    g_object_set_data (web_view, ATTACHMENT_KEY, NULL);
    if (self->detaching) {
        tell_detached (self);
        backend.release (core);
        g_object_unref (self);
    } else {
        backend.release (core);
        g_idle_add_full (G_PRIORITY_DEFAULT, tell_detached, self, g_object_unref);
    }
}

static void
notice (void *owner, int what, const char *text, int count)
{
    TokendWebViewAttachment *self = owner;
    switch (what) {
    case TOKEND_BACKEND_LOG:
        g_message ("%s", text);
        break;
    case TOKEND_BACKEND_LOGGED_OUT:
        g_signal_emit (self, signals[SIGNAL_LOGGED_OUT], 0, text);
        break;
    case TOKEND_BACKEND_DISCONNECTED:
        g_signal_emit (self, signals[SIGNAL_DISCONNECTED], 0, text);
        break;
    case TOKEND_BACKEND_RECONNECTED:
        g_signal_emit (self, signals[SIGNAL_RECONNECTED], 0);
        break;
    case TOKEND_BACKEND_COOKIES_RESTORED:
        g_signal_emit (self, signals[SIGNAL_COOKIES_RESTORED], 0, (guint) MAX (count, 0));
        break;
    case TOKEND_BACKEND_DETACHED:
        detached (self);
        break;
    default:
        break;
    }
}

/**
 * tokend_web_view_attach_to_socket:
 * @web_view: (type GObject.Object): a WebKitWebView (WebKitGTK 6.0 or 4.1) whose store is ephemeral
 * @session: the tokend session (a [sessions.NAME] of tokend.toml)
 * @socket: (nullable): tokend's socket; %NULL: $TOKEND_SOCKET, else /run/tokend/io.tokend.Broker
 * @error: the reason, in the %TOKEND_WEB_VIEW_ERROR domain
 *
 * Like tokend_web_view_attach(), with tokend's socket named.
 *
 * Returns: (transfer full): the attachment, or %NULL with @error set
 */
TokendWebViewAttachment *
tokend_web_view_attach_to_socket (gpointer web_view, const char *session, const char *socket, GError **error)
{
    g_return_val_if_fail (G_IS_OBJECT (web_view), NULL);
    g_return_val_if_fail (session != NULL, NULL);
    g_return_val_if_fail (error == NULL || *error == NULL, NULL);

    GType web_view_type = g_type_from_name ("WebKitWebView");
    if (!web_view_type || !g_type_is_a (G_OBJECT_TYPE (web_view), web_view_type)) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_NOT_A_WEB_VIEW, "a %s is not a WebKitWebView",
                     G_OBJECT_TYPE_NAME (web_view));
        return NULL;
    }
    if (g_object_get_data (web_view, ATTACHMENT_KEY)) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_ALREADY_ATTACHED,
                     "the web view is attached already; detach it first");
        return NULL;
    }
    if (!load_backend (error))
        return NULL;
    TokendWebViewAttachment *self = g_object_new (TOKEND_WEB_VIEW_TYPE_ATTACHMENT, "session", session, NULL);
    char *why = NULL;
    self->core = backend.attach (web_view, session, socket, notice, self, &why);
    if (!self->core) {
        g_set_error (error, TOKEND_WEB_VIEW_ERROR, TOKEND_WEB_VIEW_ERROR_PERSISTENT_STORE, "%s", why ? why : "refused");
        free (why);
        g_object_unref (self);
        return NULL;
    }
    self->web_view = web_view;
    g_object_set_data_full (web_view, ATTACHMENT_KEY, g_object_ref (self), g_object_unref);
    return self;
}

/**
 * tokend_web_view_attach:
 * @web_view: (type GObject.Object): a WebKitWebView (WebKitGTK 6.0 or 4.1) whose store is ephemeral
 *   (6.0: a network session from webkit_network_session_new_ephemeral(); 4.1: a web context from
 *   webkit_web_context_new_ephemeral(), or #WebKitWebView:is-ephemeral)
 * @session: the tokend session (a [sessions.NAME] of tokend.toml)
 * @error: the reason, in the %TOKEND_WEB_VIEW_ERROR domain
 *
 * Attaches @web_view to tokend's @session, through tokend's socket
 * ($TOKEND_SOCKET, else the system socket). Call it on the thread that runs
 * GTK, before loading the first page: that navigation waits for tokend's
 * cookies.
 *
 * Returns: (transfer full): the attachment (the web view holds it too, until
 *   it is detached), or %NULL with @error set
 */
TokendWebViewAttachment *
tokend_web_view_attach (gpointer web_view, const char *session, GError **error)
{
    return tokend_web_view_attach_to_socket (web_view, session, NULL, error);
}

/**
 * tokend_web_view_attachment_detach:
 * @self: the attachment
 *
 * Stops relaying and mirroring; the web view keeps the cookies it has.
 * The web view's end does the same. Detaching a detached attachment does nothing.
 */
void
tokend_web_view_attachment_detach (TokendWebViewAttachment *self)
{
    g_return_if_fail (TOKEND_WEB_VIEW_IS_ATTACHMENT (self));
    if (!self->core)
        return;
    self->detaching = TRUE;
    backend.detach (self->core); /* its last notice, TOKEND_BACKEND_DETACHED, lets go */
    self->detaching = FALSE;
}

/**
 * tokend_web_view_attachment_is_attached:
 * @self: the attachment
 *
 * Returns: whether it is still attached to its web view
 */
gboolean
tokend_web_view_attachment_is_attached (TokendWebViewAttachment *self)
{
    g_return_val_if_fail (TOKEND_WEB_VIEW_IS_ATTACHMENT (self), FALSE);
    return self->core != NULL;
}

/**
 * tokend_web_view_attachment_get_session:
 * @self: the attachment
 *
 * Returns: the tokend session it is attached to
 */
const char *
tokend_web_view_attachment_get_session (TokendWebViewAttachment *self)
{
    g_return_val_if_fail (TOKEND_WEB_VIEW_IS_ATTACHMENT (self), NULL);
    return self->session;
}

/**
 * tokend_web_view_attachment_get_webkit_api:
 * @self: the attachment
 *
 * Returns: the WebKitGTK API of the process: "6.0" (GTK 4) or "4.1" (GTK 3)
 */
const char *
tokend_web_view_attachment_get_webkit_api (TokendWebViewAttachment *self)
{
    g_return_val_if_fail (TOKEND_WEB_VIEW_IS_ATTACHMENT (self), NULL);
    return backend.api ? backend.api->api : NULL;
}

static void
tokend_web_view_attachment_get_property (GObject *object, guint id, GValue *value, GParamSpec *spec)
{
    TokendWebViewAttachment *self = TOKEND_WEB_VIEW_ATTACHMENT (object);
    switch (id) {
    case PROP_SESSION:
        g_value_set_string (value, self->session);
        break;
    case PROP_ATTACHED:
        g_value_set_boolean (value, self->core != NULL);
        break;
    case PROP_WEBKIT_API:
        g_value_set_string (value, tokend_web_view_attachment_get_webkit_api (self));
        break;
    default:
        G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, spec);
    }
}

static void
tokend_web_view_attachment_set_property (GObject *object, guint id, const GValue *value, GParamSpec *spec)
{
    TokendWebViewAttachment *self = TOKEND_WEB_VIEW_ATTACHMENT (object);
    switch (id) {
    case PROP_SESSION:
        g_free (self->session);
        self->session = g_value_dup_string (value);
        break;
    default:
        G_OBJECT_WARN_INVALID_PROPERTY_ID (object, id, spec);
    }
}

static void
tokend_web_view_attachment_finalize (GObject *object)
{
    TokendWebViewAttachment *self = TOKEND_WEB_VIEW_ATTACHMENT (object);
    g_free (self->session);
    G_OBJECT_CLASS (tokend_web_view_attachment_parent_class)->finalize (object);
}

static void
tokend_web_view_attachment_class_init (TokendWebViewAttachmentClass *klass)
{
    GObjectClass *object_class = G_OBJECT_CLASS (klass);
    object_class->get_property = tokend_web_view_attachment_get_property;
    object_class->set_property = tokend_web_view_attachment_set_property;
    object_class->finalize = tokend_web_view_attachment_finalize;

    /**
     * TokendWebViewAttachment:session:
     *
     * The tokend session the web view is attached to.
     */
    properties[PROP_SESSION] = g_param_spec_string ("session", NULL, NULL, NULL,
        G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);
    /**
     * TokendWebViewAttachment:attached:
     *
     * Whether the attachment still holds its web view.
     */
    properties[PROP_ATTACHED] = g_param_spec_boolean ("attached", NULL, NULL, FALSE,
        G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
    /**
     * TokendWebViewAttachment:webkit-api:
     *
     * The WebKitGTK API in use: "6.0" (GTK 4) or "4.1" (GTK 3).
     */
    properties[PROP_WEBKIT_API] = g_param_spec_string ("webkit-api", NULL, NULL, NULL,
        G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
    g_object_class_install_properties (object_class, N_PROPS, properties);

    /**
     * TokendWebViewAttachment::logged-out:
     * @self: the attachment
     * @reason: "loggedOut" (the session ended) or "loginRequired" (the provider refused it)
     *
     * The session's cookies have left the web view; the page has the event too.
     */
    signals[SIGNAL_LOGGED_OUT] = g_signal_new ("logged-out", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                               NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
    /**
     * TokendWebViewAttachment::disconnected:
     * @self: the attachment
     * @reason: why tokend is not reachable
     *
     * tokend went away: pages get io.tokend.Bridge.Disconnected, and the web
     * view keeps the cookies it has, until tokend is back.
     */
    signals[SIGNAL_DISCONNECTED] = g_signal_new ("disconnected", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                                 NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_STRING);
    /**
     * TokendWebViewAttachment::reconnected:
     * @self: the attachment
     *
     * tokend is back; the web view catches up with what it missed.
     */
    signals[SIGNAL_RECONNECTED] = g_signal_new ("reconnected", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                                NULL, NULL, NULL, G_TYPE_NONE, 0);
    /**
     * TokendWebViewAttachment::cookies-restored:
     * @self: the attachment
     * @count: the cookies put back
     *
     * WebKit's network process ended and its cookie store with it; tokend's
     * cookies are back in the new one.
     */
    signals[SIGNAL_COOKIES_RESTORED] = g_signal_new ("cookies-restored", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                                     0, NULL, NULL, NULL, G_TYPE_NONE, 1, G_TYPE_UINT);
    /**
     * TokendWebViewAttachment::detached:
     * @self: the attachment
     *
     * The attachment let go of its web view: tokend_web_view_attachment_detach() (emitted
     * before it returns), or the web view's end (emitted from the main loop, once the web view
     * is gone). The last signal of the attachment.
     */
    signals[SIGNAL_DETACHED] = g_signal_new ("detached", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
                                             NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
tokend_web_view_attachment_init (TokendWebViewAttachment *self)
{
    (void) self;
}
