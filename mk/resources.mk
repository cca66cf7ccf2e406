# Cached GetToken naming a resource (RFC 8707) against one naming none and the
# C limit server, one run (bench/RESOURCES.md).
BENCH_EXTRA += bench-resources
.PHONY: bench-resources
bench-resources: venv release
	mkdir -p $(BENCH_DIR)
	gcc -O2 -Wall -o $(BENCH_DIR)/limit_server bench/limit_server.c
	gcc -O2 -Wall -o $(BENCH_DIR)/load bench/load.c -lpthread
	$(PY) bench/resource_bench.py .build/release $(BENCH_DIR)/load $(BENCH_DIR)/limit_server bench/RESOURCES.md
