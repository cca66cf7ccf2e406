/* A GTK 4 application in C whose web view is attached to tokend through
 * libtokend-webview-1 (built with `pkg-config --cflags --libs tokend-webview-1
 * webkitgtk-6.0`). The web view suite (Tests/integration/test_webview.py)
 * runs against it as against tokend-webview: the same command line,
 *     tokend-webview-c [--session NAME] [--socket PATH] URL
 * and it ends cleanly on SIGTERM. On SIGUSR1 it destroys its window without
 * detaching and lets go of the attachment, and says when the web view and the
 * attachment are finalized (test_webview_gi.py: detach on destroy). */
#include <glib-unix.h>
#include <gtk/gtk.h>
#include <tokend-webview.h>
#include <webkit/webkit.h>

/* What SIGUSR1 takes away. */
typedef struct {
    GtkWindow *window;
    TokendWebViewAttachment *tokend;
} App;

static void
finalized (gpointer what, GObject *gone)
{
    (void) gone;
    g_printerr ("tokend-webview-c: %s finalized\n", (const char *) what);
}

static void
detached (TokendWebViewAttachment *tokend, gpointer data)
{
    (void) data;
    g_printerr ("tokend-webview-c: signal detached (attached: %d)\n", tokend_web_view_attachment_is_attached (tokend));
}

/* The window goes, and the web view with it (the window held the only reference); the
 * attachment is not detached: the web view's end does it. */
static gboolean
destroy_window (gpointer data)
{
    App *app = data;
    if (app->window) {
        g_printerr ("tokend-webview-c: destroying the window without detaching\n");
        gtk_window_destroy (g_steal_pointer (&app->window));
        g_clear_object (&app->tokend);
    }
    return G_SOURCE_CONTINUE;
}

static gboolean
quit (gpointer loop)
{
    g_main_loop_quit (loop);
    return G_SOURCE_CONTINUE;
}

static gboolean
closed (GtkWindow *window, gpointer loop)
{
    (void) window;
    g_main_loop_quit (loop);
    return FALSE;
}

static void
title_changed (WebKitWebView *view, GParamSpec *spec, gpointer window)
{
    (void) spec;
    gtk_window_set_title (window, webkit_web_view_get_title (view));
}

static void
logged_out (TokendWebViewAttachment *tokend, const char *reason, gpointer data)
{
    (void) tokend, (void) data;
    g_printerr ("tokend-webview-c: signal logged-out (%s)\n", reason);
}

static void
cookies_restored (TokendWebViewAttachment *tokend, guint count, gpointer data)
{
    (void) tokend, (void) data;
    g_printerr ("tokend-webview-c: signal cookies-restored (%u cookies)\n", count);
}

int
main (int argc, char **argv)
{
    g_autofree char *session = g_strdup ("default");
    g_autofree char *socket = NULL;
    g_auto (GStrv) urls = NULL;
    GOptionEntry entries[] = {
        { "session", 0, 0, G_OPTION_ARG_STRING, &session, "The tokend session to use", "NAME" },
        { "socket", 0, 0, G_OPTION_ARG_FILENAME, &socket, "tokend's socket", "PATH" },
        { G_OPTION_REMAINING, 0, 0, G_OPTION_ARG_STRING_ARRAY, &urls, NULL, "URL" },
        { NULL },
    };
    g_autoptr (GOptionContext) options = g_option_context_new ("URL");
    g_autoptr (GError) error = NULL;
    g_option_context_add_main_entries (options, entries, NULL);
    if (!g_option_context_parse (options, &argc, &argv, &error) || !urls || g_strv_length (urls) != 1) {
        g_printerr ("usage: tokend-webview-c [--session NAME] [--socket PATH] URL%s%s\n", error ? ": " : "",
                    error ? error->message : "");
        return 64;
    }
    if (!gtk_init_check ()) {
        g_printerr ("tokend-webview-c: cannot open a display\n");
        return 69;
    }

    WebKitNetworkSession *network = webkit_network_session_new_ephemeral ();
    WebKitWebView *view = g_object_new (WEBKIT_TYPE_WEB_VIEW, "network-session", network, NULL);
    g_object_unref (network);
    App app = { NULL, tokend_web_view_attach_to_socket (view, session, socket, &error) };
    if (!app.tokend) {
        g_printerr ("tokend-webview-c: %s\n", error->message);
        return 1;
    }
    g_signal_connect (app.tokend, "logged-out", G_CALLBACK (logged_out), NULL);
    g_signal_connect (app.tokend, "cookies-restored", G_CALLBACK (cookies_restored), NULL);
    g_signal_connect (app.tokend, "detached", G_CALLBACK (detached), NULL);
    g_object_weak_ref (G_OBJECT (view), finalized, "web view");
    g_object_weak_ref (G_OBJECT (app.tokend), finalized, "attachment");

    GMainLoop *loop = g_main_loop_new (NULL, FALSE);
    app.window = GTK_WINDOW (gtk_window_new ());
    gtk_window_set_title (app.window, "tokend-webview-c");
    gtk_window_set_default_size (app.window, 1024, 768);
    gtk_window_set_child (app.window, GTK_WIDGET (view));
    g_signal_connect (view, "notify::title", G_CALLBACK (title_changed), app.window);
    g_signal_connect (app.window, "close-request", G_CALLBACK (closed), loop);
    g_unix_signal_add (SIGTERM, quit, loop);
    g_unix_signal_add (SIGINT, quit, loop);
    g_unix_signal_add (SIGUSR1, destroy_window, &app);
    webkit_web_view_load_uri (view, urls[0]);
    gtk_window_present (app.window);
    g_main_loop_run (loop);

    if (app.tokend)
        tokend_web_view_attachment_detach (app.tokend);
    g_clear_object (&app.tokend);
    if (app.window)
        gtk_window_destroy (app.window);
    g_main_loop_unref (loop);
    return 0;
}
