# tokend — see README.md. `make demo` and `make test` install what they need.
SHELL := /bin/bash

# Each part with targets of its own keeps them in mk/*.mk; it may add Debian
# packages to DEPS_EXTRA, targets to TEST_EXTRA (run by `make test`) and to
# BENCH_EXTRA (run by `make bench`), and files to CLEAN_EXTRA.
DEPS_EXTRA :=
TEST_EXTRA :=
BENCH_EXTRA :=
CLEAN_EXTRA :=
# Builds `make test` makes before its tests (a part's build of its own, e.g. webview-c), side by
# side with the fuzz build: each in a build directory of its own, its packages installed before
# (webview-deps installs webview-c's).
TEST_BUILD_EXTRA :=
# `make test` runs its phases one after another through mk/phases, which prints
# their times at the end; each phase's make gets PHASED=1, and a prerequisite
# written $(call needs,...) is left to the phase before it (no second no-op
# `swift build` inside the next phase's time).
needs = $(if $(PHASED),,$(1))
.DEFAULT_GOAL := all
include $(sort $(wildcard mk/*.mk))
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
SWIFT ?= swift
VENV := .venv
PY := $(VENV)/bin/python
BIN := .build/debug

UNITDIR ?= /etc/systemd/system
USERUNITDIR ?= /etc/systemd/user
SYSUSERSDIR ?= /usr/lib/sysusers.d

.PHONY: deb-sizes deb-webview webview webview-deps webview-build-tests webview-unit-test webview-test build-tests test-long bench bench-flood bench-profile bench-syscalls test-crash demo-login demo-fleet deb all build release deps venv test unit-test integration-test test-e2e bench-startup demo install clean fuzz fuzz-build fuzz-smoke

all: build

# System packages (Debian) the build and tests need; skipped when present.
deps:
	@missing=""; \
	for p in python3-venv libsystemd-dev curl publicsuffix chromium chromium-driver firefox-esr git postgresql-15 pgbouncer iproute2 openssl groff-base strace uidmap openssh-server glewlwyd $(DEPS_EXTRA); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v kubectl >/dev/null || missing="$$missing kubernetes-client"; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.done: Tests/authserver/requirements.txt Tests/provider2/requirements.txt Tests/integration/requirements.txt Tests/mcpserver/requirements.txt clients/python/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r Tests/authserver/requirements.txt
	$(VENV)/bin/pip install -q -r Tests/provider2/requirements.txt
	$(VENV)/bin/pip install -q -r Tests/integration/requirements.txt
	$(VENV)/bin/pip install -q -r Tests/mcpserver/requirements.txt
	$(VENV)/bin/pip install -q -e "./clients/python[requests,httpx]"
	touch $@

venv: deps $(VENV)/.done

build:
	$(SWIFT) build

# The package and its unit tests in one build: `make test`'s compile phase.
build-tests:
	$(SWIFT) build --build-tests

release:
	$(SWIFT) build -c release

# One test at a time: several tests block a thread in a socket read, and on a
# 2-core machine two of them hold both threads Swift's concurrency has, so every
# other test's tasks wait (seconds, or for good when the blocked ones wait on
# those tasks). The whole suite takes about 25 s so.
unit-test:
	$(SWIFT) test --no-parallel $(if $(PHASED),--skip-build)

# Side by side on TEST_WORKERS pytest-xdist workers: the tests mostly wait on
# their servers (run one at a time they keep a fifth to two fifths of one core
# busy; 4 workers kept 0.9 of the 2 cores busy, every worker busy to the end),
# so 5 workers use the 2 cores without crowding them. Tests that
# must not overlap are grouped by their marks (docs/testing.md); the 30 slowest
# are listed after every run. The web view suite runs here against
# tokend-webview; `make webview-test` runs it against every app (the C and
# PyGObject ones too), as CI does. Long campaigns and soaks (@pytest.mark.long)
# run in `make test-long` only: neither `make test` nor CI runs them.
TEST_WORKERS ?= 5
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup --durations=30
integration-test: $(call needs,venv build webview)
	TOKEND_WEBVIEW_APPS=swift $(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not long" Tests/integration

test-long: venv build webview
	TOKEND_WEBVIEW_APPS=swift $(PY) -m pytest -q $(PYTEST_PARALLEL) -m long Tests/integration

# The parts' own builds (TEST_BUILD_EXTRA) and the fuzz build, in build
# directories of their own, ran at 1.0-1.1 cores on average each, one after
# the other: one phase runs them side by side.
space := $(subst ,, )
TEST_PHASES = venv build-tests webview-build-tests $(subst $(space),+,$(strip $(TEST_BUILD_EXTRA) fuzz-build)) \
	unit-test webview-unit-test integration-test fuzz-smoke $(TEST_EXTRA)
test:
	@mk/phases --phased "make test" "$(MAKE)" $(TEST_PHASES)

# Web views (webview/): tokend-webview and the TokendWebView library on
# WebKitGTK 6.0. A package of its own, so nothing else needs WebKitGTK to build.
webview-deps:
	@missing=""; for p in libwebkitgtk-6.0-dev xvfb xauth imagemagick; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

webview: webview-deps
	cd webview && $(SWIFT) build

webview-build-tests: webview-deps
	cd webview && $(SWIFT) build --build-tests

webview-unit-test: $(call needs,webview)
	cd webview && $(SWIFT) test $(if $(PHASED),--skip-build)

# The web view's own checks: its unit tests, and the app under Xvfb against tokend and the authorization server.
webview-test: $(call needs,venv build webview-unit-test)
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not long" Tests/integration/test_webview.py Tests/integration/test_webview_gi.py

# kill -9 campaign against the real server: 200 kills with a 5 s grace period
# (must lose nothing) and 200 with none (the loss rate is reported). Its
# crash points exist only in a build made for tests: a release build with
# -DTOKEND_TEST_HOOKS, in a build directory of its own.
HOOKS_BUILD := .build-hooks
test-crash: venv
	$(SWIFT) build -c release -Xswiftc -DTOKEND_TEST_HOOKS --scratch-path $(HOOKS_BUILD)
	TOKEND_BIN=$(HOOKS_BUILD)/release $(PY) Tests/crash/campaign.py --kills 200 --grace 5 --results Tests/crash/results-grace5.json
	TOKEND_BIN=$(HOOKS_BUILD)/release $(PY) Tests/crash/campaign.py --kills 200 --grace 0 --results Tests/crash/results-grace0.json || true

# libFuzzer targets (Tests/Fuzz): Varlink framing/parsing/dispatch, token
# responses, Set-Cookie, redaction of secrets in every encoding. `make fuzz` runs each FUZZ_SECONDS (default 300);
# `make test` runs each for 10 s.
# The targets are built again only when a file they compile changes.
FUZZ_DIR := .build/fuzz
FUZZ_SECONDS ?= 300
FUZZ_SOURCES := Tests/Fuzz/build.sh $(wildcard Tests/Fuzz/*.swift \
	$(foreach m,Varlink Secrets Loopback CookieJar OAuth StateStore,Sources/$(m)/*.swift))
fuzz-build: $(FUZZ_DIR)/.built
$(FUZZ_DIR)/.built: $(FUZZ_SOURCES)
	Tests/Fuzz/build.sh $(FUZZ_DIR)
	touch $@

fuzz: fuzz-build
	Tests/Fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

fuzz-smoke: $(call needs,fuzz-build)
	Tests/Fuzz/run.sh $(FUZZ_DIR) 10

# The benchmark: tokend against a C epoll limit server and oidc-agent, one
# run, one table; written to bench/RESULTS.md (and .json) with date and machine.
BENCH_DIR := .build/bench
bench: venv release
	@for p in gcc oidc-agent-cli systemd; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc oidc-agent-cli systemd >/dev/null; break; }; done
	mkdir -p $(BENCH_DIR)
	gcc -O2 -Wall -o $(BENCH_DIR)/limit_server bench/limit_server.c
	gcc -O2 -Wall -o $(BENCH_DIR)/load bench/load.c -lpthread
	$(PY) bench/bench.py .build/release $(BENCH_DIR)/load $(BENCH_DIR)/limit_server bench/RESULTS.md
	$(PY) bench/hostile.py .build/release --results bench/HOSTILE.md
	@$(if $(BENCH_EXTRA),$(MAKE) --no-print-directory $(BENCH_EXTRA))

# Where tokend's CPU goes under cached GetToken load (perf, software sampling).
bench-profile: venv release
	@dpkg -s linux-perf >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null; }
	mkdir -p $(BENCH_DIR)
	gcc -O2 -Wall -o $(BENCH_DIR)/load bench/load.c -lpthread
	$(PY) bench/profile.py .build/release $(BENCH_DIR)/load

# System calls and user/system CPU per cached call at 16 connections (strace -c).
bench-syscalls: venv release
	@dpkg -s strace >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null; }
	mkdir -p $(BENCH_DIR)
	gcc -O2 -Wall -o $(BENCH_DIR)/load bench/load.c -lpthread
	$(PY) bench/syscalls.py .build/release $(BENCH_DIR)/load

# A well-behaved client's latency with 10,000 idle and 1,000 stalled connections (bench/FLOOD.md).
bench-flood: venv release
	$(PY) bench/flood.py .build/release > $(BENCH_DIR)-flood.txt
	{ echo "# Flood (make bench-flood, $$(date +%F), $$(nproc) cores, release build)"; echo; grep '^|' $(BENCH_DIR)-flood.txt; \
	  echo; echo '```'; grep '^{' $(BENCH_DIR)-flood.txt; echo '```'; } > bench/FLOOD.md

# Startup figures quoted in README (debug build unless BIN_DIR is given).
bench-startup: build
	python3 bench/startup.py $(or $(BIN_DIR),.build/debug) 10

demo: venv build
	$(PY) demo/demo.py

# The ways in: device login and browser login, the user's part played by headless Chromium.
demo-login: venv build
	$(PY) demo/demo_login.py

# One grant shared by three hosts through a real PostgreSQL 15.
demo-fleet: venv build
	$(PY) demo/demo_fleet.py

# End to end under a real systemd in a Debian bookworm container (systemd-nspawn);
# the root filesystem is built once with debootstrap and cached in $(E2E_CACHE).
E2E_CACHE ?= /var/cache/tokend-e2e
test-e2e: $(call needs,venv build) deb
	@for p in systemd-container debootstrap; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container debootstrap >/dev/null; break; }; done
	E2E_CACHE=$(E2E_CACHE) $(PY) -m pytest -q -s Tests/integration/test_e2e_systemd.py

install: release
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 .build/release/tokend .build/release/tokenctl .build/release/tokend-native-host .build/release/tokend-proxy $(DESTDIR)$(PREFIX)/bin/
	# The browser bridge: native messaging host manifests for every user, the extension to load, the page helper.
	for d in $(SYSCONFDIR)/chromium/native-messaging-hosts $(SYSCONFDIR)/opt/chrome/native-messaging-hosts; do \
		install -d $(DESTDIR)$$d; \
		sed 's|@BINDIR@|$(PREFIX)/bin|' web/native-host/io.tokend.bridge.chromium.json > $(DESTDIR)$$d/io.tokend.bridge.json; \
	done
	install -d $(DESTDIR)/usr/lib/mozilla/native-messaging-hosts
	sed 's|@BINDIR@|$(PREFIX)/bin|' web/native-host/io.tokend.bridge.firefox.json > $(DESTDIR)/usr/lib/mozilla/native-messaging-hosts/io.tokend.bridge.json
	install -d $(DESTDIR)$(PREFIX)/share/tokend/extension
	install -m 0644 web/extension/* $(DESTDIR)$(PREFIX)/share/tokend/extension/
	install -m 0644 web/tokend-page.js web/tokend-fetch.js $(DESTDIR)$(PREFIX)/share/tokend/
	# Manuals and shell completion.
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 0644 man/tokenctl.1 man/tokend-native-host.1 man/tokend-proxy.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 man/tokend.toml.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 man/tokend.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	.build/release/tokenctl --generate-completion-script bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/tokenctl
	.build/release/tokenctl --generate-completion-script zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_tokenctl
	.build/release/tokenctl --generate-completion-script fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/tokenctl.fish
	# A fresh state key sealed with systemd-creds (host key or TPM), as the package does; only on this host.
	@if [ -z "$(DESTDIR)" ] && [ ! -e /etc/credstore.encrypted/tokend.state-key ] && command -v systemd-creds >/dev/null; then \
		install -d -m 0700 /etc/credstore.encrypted; \
		.build/release/tokend --generate-state-key | systemd-creds encrypt --name=tokend.state-key - /etc/credstore.encrypted/tokend.state-key; \
		install -d /etc/systemd/system/tokend.service.d; \
		printf '[Service]\nLoadCredentialEncrypted=tokend.state-key\n' > /etc/systemd/system/tokend.service.d/50-state-key.conf; \
		echo "created /etc/credstore.encrypted/tokend.state-key (state files are sealed at rest)"; \
	fi
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(SYSUSERSDIR)
	install -m 0644 systemd/tokend.socket systemd/tokend.service $(DESTDIR)$(UNITDIR)/
	install -m 0644 systemd/user/tokend.socket systemd/user/tokend.service systemd/user/tokend-proxy.socket \
		systemd/user/tokend-proxy.service $(DESTDIR)$(USERUNITDIR)/
	install -m 0644 systemd/tokend.sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/tokend.conf
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/tokend
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/tokend/tokend.toml ]; then \
		echo "keeping existing $(DESTDIR)$(SYSCONFDIR)/tokend/tokend.toml"; \
	else \
		install -m 0644 etc/tokend/tokend.toml $(DESTDIR)$(SYSCONFDIR)/tokend/tokend.toml; \
	fi

# The Debian package: tokend, which is all four programs by the name it runs as,
# linked against the Swift runtime's shared libraries, which the package installs
# once, in /usr/lib/tokend (its run path); it fails over its size bound
# (packaging/deb/build.sh, docs/packaging.md).
# Its own build directory: those flags would otherwise rebuild .build.
DEB_BUILD := .build-deb
# No module may link Foundation or FoundationInternationalization (with ICU's data, 47.7 MB):
# a library that names Foundation by `import struct Foundation.Data` (TOMLKit) asks the linker
# for both though nothing of them is used; here none asks, so a use of either fails the link.
no_autolink = -Xswiftc -Xfrontend -Xswiftc -disable-autolink-library -Xswiftc -Xfrontend -Xswiftc $(1)
# lld with packed relative relocations (DT_RELR, glibc 2.36: bookworm's; dpkg-shlibdeps says so in
# Depends): the table of relocations every start reads is 11 KB, not 1.3 MB (docs/packaging.md).
DEB_SWIFTFLAGS := $(call no_autolink,Foundation) $(call no_autolink,FoundationInternationalization) \
	-Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs
deb:
	@for p in dpkg-dev fakeroot lintian chrpath; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev fakeroot lintian chrpath >/dev/null; break; }; done
	$(SWIFT) build -c release --disable-local-rpath -Xlinker -rpath=/usr/lib/tokend $(DEB_SWIFTFLAGS) --scratch-path $(DEB_BUILD) --product tokend
	@# The release binary carries no test hooks (crash points, hang switches).
	@! grep -l TOKEND_TEST_HOOKS $(DEB_BUILD)/release/tokend || \
		{ echo "test hooks found in a release binary"; exit 1; }
	packaging/deb/build.sh $(DEB_BUILD)/release .build/deb
	lintian --fail-on error .build/deb/tokend_*.deb

# Where the package's bytes go: each program linked shared and static, attributed by the linker's map.
deb-sizes: deb
	python3 packaging/deb/sizes.py $(DEB_BUILD)

# tokend-webview's own package (it needs WebKitGTK; the tokend package does not).
deb-webview: webview-deps
	@for p in dpkg-dev fakeroot lintian; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpkg-dev fakeroot lintian >/dev/null; break; }; done
	cd webview && $(SWIFT) build -c release --static-swift-stdlib --product tokend-webview --scratch-path .build-static
	packaging/deb-webview/build.sh webview/.build-static/release .build/deb
	lintian --fail-on error .build/deb/tokend-webview_*.deb

clean:
	rm -rf .build $(DEB_BUILD) $(VENV) webview/.build webview/.build-static $(CLEAN_EXTRA)
