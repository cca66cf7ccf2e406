# Cached GetToken naming a resource (RFC 8707) against one naming none and the
# C limit server, one run (bench/RESOURCES.md).
BENCH_EXTRA += bench-resources
.PHONY: bench-resources
bench-resources: venv release
	mkdir -p $(BENCH_DIR)
	gcc -O2 -Wall -o $(BENCH_DIR)/limit_server bench/limit_server.c
	gcc -O2 -Wall -o $(BENCH_DIR)/load bench/load.c -lpthread
	$(PY) bench/resource_bench.py .build/release $(BENCH_DIR)/load $(BENCH_DIR)/limit_server bench/RESOURCES.md

# Cached GetToken in two builds, one run (bench/AB.md): BEFORE names the other
# build's directory, e.g. a worktree of the commit before a change:
#   git worktree add /tmp/before COMMIT && (cd /tmp/before && swift build -c release)
#   make bench-ab BEFORE=/tmp/before/.build/release
.PHONY: bench-ab
bench-ab: venv release
	@test -n "$(BEFORE)" || { echo "make bench-ab BEFORE=DIR (a build's directory with tokend and tokenctl)"; exit 64; }
	mkdir -p $(BENCH_DIR)
	gcc -O2 -Wall -o $(BENCH_DIR)/load bench/load.c -lpthread
	$(PY) bench/ab_bench.py $(BEFORE) .build/release $(BENCH_DIR)/load bench/AB.md
