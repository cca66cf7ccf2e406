# tokend-proxy against nginx doing the same forwarding (bench/proxy_nginx.py), and
# where tokend-proxy's time goes (bench/proxy_profile.py), and tokend-proxy against a Swift
# forwarder with no framework (bench/proxy_floor.py). nginx and wrk are
# Debian packages; perf comes with linux-perf, strace with strace.
DEPS_EXTRA += nginx wrk linux-perf strace
BENCH_EXTRA += bench-proxy
.PHONY: bench-proxy bench-proxy-profile bench-proxy-floor

# One run, one table: bench/proxy_results.md (and .json), with date and machine.
bench-proxy: venv release
	@for p in nginx wrk; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk >/dev/null; break; }; done
	$(PY) bench/proxy_nginx.py .build/release bench/proxy_results.md

bench-proxy-profile: venv release
	@for p in nginx wrk linux-perf strace; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk linux-perf strace >/dev/null; break; }; done
	$(PY) bench/proxy_profile.py .build/release

bench-proxy-floor: venv release
	@for p in nginx wrk; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk >/dev/null; break; }; done
	$(PY) bench/proxy_floor.py .build/release
