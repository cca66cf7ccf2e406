/* The contract between libtokend-webview-1 (tokend-webview.c: the GObject
 * type, no WebKit of its own) and its backends: the Swift core built once
 * per WebKitGTK API (libtokend-webview-6.so, libtokend-webview-4.1.so;
 * webview/Sources/TokendWebViewBackend). Not installed: private to the two.
 * Every call and notice happens on the thread that runs GTK. */
#pragma once

typedef enum {
    TOKEND_BACKEND_LOG,              /* text: a line for the log */
    TOKEND_BACKEND_LOGGED_OUT,       /* text: "loggedOut" or "loginRequired" */
    TOKEND_BACKEND_DISCONNECTED,     /* text: why */
    TOKEND_BACKEND_RECONNECTED,
    TOKEND_BACKEND_COOKIES_RESTORED, /* count: cookies put back */
    TOKEND_BACKEND_DETACHED,         /* the last notice; the handle is the owner's to release */
} TokendBackendNotice;

typedef void (*TokendBackendNotify) (void *owner, int notice, const char *text, int count);

/* Attaches `web_view` (a WebKitWebView of the backend's API) to `session`;
 * `socket` NULL: $TOKEND_SOCKET, else the system socket. Returns a handle, or
 * NULL with a malloc'd *error. */
typedef void *(*TokendBackendAttach) (void *web_view, const char *session, const char *socket,
                                      TokendBackendNotify notify, void *owner, char **error);
/* Detaches (at once, with TOKEND_BACKEND_DETACHED) unless already detached. */
typedef void (*TokendBackendDetach) (void *handle);
/* Gives the handle back; after TOKEND_BACKEND_DETACHED. */
typedef void (*TokendBackendRelease) (void *handle);
