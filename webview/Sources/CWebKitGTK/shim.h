// WebKitGTK 6.0 (GTK 4), libsoup 3 and GLib's Unix sources, for Swift.
#include <gtk/gtk.h>
#include <webkit/webkit.h>
#include <libsoup/soup.h>
#include <glib-unix.h>
#include <jsc/jsc.h>
#include <sys/pidfd.h>
