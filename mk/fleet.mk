# Fleet at a thousand hosts (issue 52): 1,000 and 10,000 simulated hosts issuing
# tokend's own store statements through PgBouncer 1.18 (transaction mode, pool 5)
# to PostgreSQL 15 (max_connections = 20), beside today's held-connection design;
# the run goes into bench/README.md's section. asyncpg is the bench's own
# requirement (bench/requirements-fleet.txt), installed here, never by `make test`.
BENCH_EXTRA += bench-fleet
.PHONY: bench-fleet

bench-fleet: venv bench/requirements-fleet.txt
	$(VENV)/bin/pip install -q -r bench/requirements-fleet.txt
	$(PY) bench/fleet_sim.py --hosts 1000 10000 --results bench/README.md
