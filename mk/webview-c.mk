# libtokend-webview-1 (webview/lib): web views in any GTK application, in C and
# through GObject introspection, on WebKitGTK 6.0 (GTK 4) and 4.1 (GTK 3).
# The library links no WebKitGTK; it loads, from tokend-webview-1/ beside it,
# the build of TokendWebView's Swift core for the WebKitGTK its process has:
# the package's tokend-webview-backend product, built once per API (the
# WebKitGTK4_1 trait selects 4.1), with the Swift runtime linked in.
#
#   make webview-c         the library, both backends, the typelib, the C test app, in webview/.build-c
#   make webview-c-test    the web view suite against the C app, the PyGObject GTK 4 and GTK 3 apps and the GJS app
#   make deb-libtokend-webview   libtokend-webview1, libtokend-webview-dev, gir1.2-tokendwebview-1

WEBVIEW_C_PACKAGES := libwebkitgtk-6.0-dev libwebkit2gtk-4.1-dev libgtk-3-dev gobject-introspection \
	libgirepository1.0-dev python3-gi gir1.2-webkit-6.0 gir1.2-webkit2-4.1 gir1.2-gtk-3.0 gir1.2-gtk-4.0 \
	gjs chrpath xvfb xauth imagemagick
DEPS_EXTRA += $(WEBVIEW_C_PACKAGES)
CLEAN_EXTRA += webview/.build-c webview/.build-4.1

WEBVIEW_C := webview/.build-c
WEBVIEW_C_LIB := $(WEBVIEW_C)/lib
WEBVIEW_C_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC

.PHONY: webview-c webview-c-deps webview-c-backends webview-c-test deb-libtokend-webview

webview-c-deps:
	@missing=""; for p in $(WEBVIEW_C_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# One build of the core per WebKitGTK API. The 6.0 one shares webview/.build with
# `make webview` (release beside debug: one resolution and checkout of the
# dependencies, not two); the 4.1 one has a directory of its own, since the trait
# recompiles TokendWebView, and sharing would rebuild both cores on every run.
webview-c-backends: webview-c-deps
	cd webview && $(SWIFT) build -c release --product tokend-webview-backend
	cd webview && $(SWIFT) build -c release --product tokend-webview-backend --scratch-path .build-4.1 \
		--disable-default-traits --traits WebKitGTK4_1
	install -d $(WEBVIEW_C_LIB)/tokend-webview-1
	install -m 0644 webview/.build/release/libtokend-webview-backend.so $(WEBVIEW_C_LIB)/tokend-webview-1/libtokend-webview-6.so
	install -m 0644 webview/.build-4.1/release/libtokend-webview-backend.so $(WEBVIEW_C_LIB)/tokend-webview-1/libtokend-webview-4.1.so
	chrpath -d $(WEBVIEW_C_LIB)/tokend-webview-1/*.so  # SwiftPM's $$ORIGIN: the Swift runtime is inside

$(WEBVIEW_C_LIB)/libtokend-webview.so.1: webview/lib/tokend-webview.c webview/lib/tokend-webview.h \
		webview/lib/tokend-webview-backend.h webview/lib/tokend-webview.map
	install -d $(WEBVIEW_C_LIB)
	$(CC) $(WEBVIEW_C_CFLAGS) -shared -o $@ webview/lib/tokend-webview.c $$(pkg-config --cflags --libs gobject-2.0) -ldl \
		-Wl,-soname,libtokend-webview.so.1 -Wl,--version-script=webview/lib/tokend-webview.map -Wl,-z,defs -Wl,--as-needed
	ln -sf libtokend-webview.so.1 $(WEBVIEW_C_LIB)/libtokend-webview.so

# The uninstalled tree looks like an installed one: include/, lib/, lib/pkgconfig, the .gir and .typelib.
$(WEBVIEW_C_LIB)/pkgconfig/tokend-webview-1.pc: webview/lib/tokend-webview-1.pc.in
	install -d $(WEBVIEW_C_LIB)/pkgconfig $(WEBVIEW_C)/include/tokend-webview-1
	install -m 0644 webview/lib/tokend-webview.h $(WEBVIEW_C)/include/tokend-webview-1/
	sed -e "s|@PREFIX@|$(abspath $(WEBVIEW_C))|" -e "s|@LIBDIR@|\$${prefix}/lib|" webview/lib/tokend-webview-1.pc.in > $@

$(WEBVIEW_C_LIB)/girepository-1.0/TokendWebView-1.typelib: $(WEBVIEW_C_LIB)/libtokend-webview.so.1
	install -d $(WEBVIEW_C)/share/gir-1.0 $(WEBVIEW_C_LIB)/girepository-1.0
	g-ir-scanner --quiet --warn-all --warn-error --namespace=TokendWebView --nsversion=1 \
		--identifier-prefix=TokendWebView --symbol-prefix=tokend_web_view --include=GObject-2.0 --pkg=gobject-2.0 \
		--pkg-export=tokend-webview-1 --c-include=tokend-webview.h --library=tokend-webview \
		--library-path=$(WEBVIEW_C_LIB) --output=$(WEBVIEW_C)/share/gir-1.0/TokendWebView-1.gir \
		webview/lib/tokend-webview.h webview/lib/tokend-webview.c
	g-ir-compiler --output=$@ $(WEBVIEW_C)/share/gir-1.0/TokendWebView-1.gir

# The C test app, built as any C program would be: with pkg-config.
$(WEBVIEW_C)/bin/tokend-webview-c: Tests/webview-apps/tokend-webview-c.c $(WEBVIEW_C_LIB)/pkgconfig/tokend-webview-1.pc \
		$(WEBVIEW_C_LIB)/libtokend-webview.so.1
	install -d $(WEBVIEW_C)/bin
	$(CC) $(WEBVIEW_C_CFLAGS) -o $@ $< \
		$$(PKG_CONFIG_PATH=$(WEBVIEW_C_LIB)/pkgconfig pkg-config --cflags --libs tokend-webview-1 webkitgtk-6.0) \
		-Wl,-rpath,$(abspath $(WEBVIEW_C_LIB))

webview-c: webview-c-deps webview-c-backends $(WEBVIEW_C_LIB)/libtokend-webview.so.1 \
		$(WEBVIEW_C_LIB)/pkgconfig/tokend-webview-1.pc $(WEBVIEW_C_LIB)/girepository-1.0/TokendWebView-1.typelib \
		$(WEBVIEW_C)/bin/tokend-webview-c

# The package's manifest names WebKitGTK 4.1 too (the WebKitGTK4_1 trait): its headers are
# there before any build of webview/.
webview-deps: webview-c-deps

# The web view suite runs against the library's apps too (make integration-test runs
# Tests/integration whole): they need it built. `make test` builds it as a phase of its own.
TEST_BUILD_EXTRA += webview-c
integration-test: $(call needs,webview-c)
webview-test: $(call needs,webview-c)

webview-c-test: venv build webview webview-c
	$(PY) -m pytest -q Tests/integration/test_webview.py Tests/integration/test_webview_gi.py -k "not swift"

# The three packages, lintian clean, and tried as installed (smoke.sh).
deb-libtokend-webview: webview-c
	@for p in dpkg-dev fakeroot lintian; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev fakeroot lintian >/dev/null; break; }; done
	rm -f .build/deb/libtokend-webview1_*.deb .build/deb/libtokend-webview-dev_*.deb .build/deb/gir1.2-tokendwebview-1_*.deb
	packaging/deb-libtokend-webview/build.sh $(WEBVIEW_C) .build/deb
	lintian --fail-on error .build/deb/libtokend-webview1_*.deb .build/deb/libtokend-webview-dev_*.deb \
		.build/deb/gir1.2-tokendwebview-1_*.deb
	packaging/deb-libtokend-webview/smoke.sh .build/deb
