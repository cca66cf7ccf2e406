#!/usr/bin/gjs -m
// A GJS application on GTK 4 (WebKitGTK 6.0) whose web view is attached to
// tokend through the TokendWebView typelib, as README's GJS example does. The
// web view suite (Tests/integration/test_webview.py) runs against it as against
// tokend-webview: the same command line,
//     tokend_webview_gjs.js [--session NAME] [--socket PATH] URL
// and it ends cleanly on SIGTERM. On SIGUSR1 it destroys its window without
// detaching and lets go of the attachment (test_webview_gi.py: detach on destroy).
import GLib from 'gi://GLib';
import Gtk from 'gi://Gtk?version=4.0';
import WebKit from 'gi://WebKit?version=6.0';
import TokendWebView from 'gi://TokendWebView?version=1';
import System from 'system';

const SIGINT = 2, SIGUSR1 = 10, SIGTERM = 15;
const say = (text) => printerr(`tokend_webview_gjs: ${text}`);

function parse(args) {
    const options = {session: 'default', socket: null, urls: []};
    for (let i = 0; i < args.length; i++) {
        const name = args[i].replace(/^--/, '');
        if ((name === 'session' || name === 'socket') && args[i].startsWith('--') && i + 1 < args.length)
            options[name] = args[++i];
        else if (args[i].startsWith('--'))
            return null;
        else
            options.urls.push(args[i]);
    }
    return options.urls.length === 1 ? options : null;
}

function main(args) {
    const options = parse(args);
    if (!options) {
        say('usage: tokend_webview_gjs.js [--session NAME] [--socket PATH] URL');
        return 64;
    }
    if (!Gtk.init_check()) {
        say('cannot open a display');
        return 69;
    }
    let view = new WebKit.WebView({network_session: WebKit.NetworkSession.new_ephemeral()});
    let tokend;
    try {
        tokend = TokendWebView.attach_to_socket(view, options.session, options.socket);
    } catch (error) {
        say(error.message);
        return 1;
    }
    tokend.connect('logged-out', (_, reason) => say(`signal logged-out (${reason})`));
    tokend.connect('cookies-restored', (_, count) => say(`signal cookies-restored (${count} cookies)`));
    let collecting = 0;
    tokend.connect('detached', (attachment) => {
        say(`signal detached (attached: ${Number(attachment.is_attached())})`);
        if (collecting)
            GLib.source_remove(collecting);
        collecting = 0;
    });

    const loop = new GLib.MainLoop(null, false);
    let window = new Gtk.Window({title: 'tokend_webview_gjs', default_width: 1024, default_height: 768});
    window.set_child(view);
    // The title from the view's own window: a closure holding the window would keep it (and the view) alive.
    view.connect('notify::title', (self) => self.get_root()?.set_title(self.get_title() ?? ''));
    window.connect('close-request', () => {
        loop.quit();
        return false;
    });
    for (const number of [SIGTERM, SIGINT]) {
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, number, () => {
            loop.quit();
            return GLib.SOURCE_CONTINUE;
        });
    }
    // The window goes, and the web view with it; the attachment is not detached (the web view's end does it).
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, SIGUSR1, () => {
        if (window) {
            say('destroying the window without detaching');
            window.destroy();
            window = view = tokend = null;
            // GJS lets go of an object some collections after its last wrapper: the window's, then the view's.
            collecting = GLib.timeout_add(GLib.PRIORITY_DEFAULT, 200, () => {
                System.gc();
                return GLib.SOURCE_CONTINUE;
            });
        }
        return GLib.SOURCE_CONTINUE;
    });
    view.load_uri(options.urls[0]);
    window.present();
    loop.run();
    tokend?.detach();
    return 0;
}

System.exit(main(System.programArgs));
