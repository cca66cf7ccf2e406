# Metrics (issue 31): Prometheus, node_exporter and promtool for the integration
# test (Tests/integration/test_metrics.py, run by `make test` with the others),
# prometheus_client's strict OpenMetrics parser, Chromium for the screenshot.
DEPS_EXTRA += prometheus prometheus-node-exporter python3-prometheus-client
BENCH_EXTRA += bench-metrics
CLEAN_EXTRA += .build/metrics-bench

# What counting costs per cached GetToken, against the limit server's CPU per
# call from the same `make bench` run (bench/RESULTS.json): bench/METRICS.md.
METRICS_BENCH := .build/metrics-bench
bench-metrics:
	mkdir -p $(METRICS_BENCH)
	cd $(METRICS_BENCH) && $(SWIFT)c -O -wmo -parse-as-library -emit-library -emit-module -module-name TokendMetrics \
		$(addprefix $(CURDIR)/,$(wildcard Sources/TokendMetrics/*.swift)) -o libTokendMetrics.so
	$(SWIFT)c -O -parse-as-library -I $(METRICS_BENCH) -L $(METRICS_BENCH) -lTokendMetrics \
		-Xlinker -rpath -Xlinker $(CURDIR)/$(METRICS_BENCH) bench/metrics_bench.swift -o $(METRICS_BENCH)/metrics_bench
	$(PY) bench/metrics_bench.py $(METRICS_BENCH)/metrics_bench bench/RESULTS.json bench/METRICS.md

# A Prometheus graph of tokend's refreshes (docs/prometheus-refreshes.png): a
# real Prometheus scraping a real tokend through a few stampedes, its /graph
# page shot by headless Chromium.
metrics-screenshot: venv build
	$(PY) Tests/integration/metrics_screenshot.py docs/prometheus-refreshes.png

.PHONY: bench-metrics metrics-screenshot
