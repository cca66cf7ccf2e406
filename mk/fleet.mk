# Fleet at thousands of hosts (issue 52): 1,000, 5,000 and 10,000 simulated hosts
# issuing tokend's own store statements (bench/fleet_host.py, sent as tokend
# (PostgresWire) sends them, by bench/pgwire.py) through PgBouncer 1.18 (transaction mode, pool 5)
# to PostgreSQL 15 (max_connections = 20), beside today's held-connection design,
# spread over worker processes; the run goes into bench/README.md's section. No
# Python package beyond the standard library.
BENCH_EXTRA += bench-fleet
.PHONY: bench-fleet

bench-fleet: venv
	$(PY) bench/fleet_sim.py --hosts 1000 5000 10000 --procs 2 --results bench/README.md
