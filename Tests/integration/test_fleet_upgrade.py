"""A rolling upgrade from the lock protocol (schema 1: a session advisory
lock held across the upstream call, writes to tokend_sessions) to the lease
protocol (schema 2). The old host is played by psql sending the statements
tokend 1 sends (Sources/Fleet before issue 52), on a session of its own."""
import os
import subprocess

from conftest import login, wait_for
from fleet import Fleet, Postgres

CLASS_ID = 0x746F6B6E  # FleetLock.classID
V1_SCHEMA = """
CREATE TABLE tokend_schema (version integer NOT NULL);
INSERT INTO tokend_schema VALUES (1);
CREATE TABLE tokend_sessions (session text PRIMARY KEY, version bigint NOT NULL, generation bigint NOT NULL,
    record text NOT NULL, written_by text NOT NULL, written_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE tokend_schema OWNER TO tokend; ALTER TABLE tokend_sessions OWNER TO tokend;
"""


class OldHost:
    """A psql session holding what a tokend 1 host holds: its connection, and the session's advisory lock."""

    def __init__(self, pg):
        self.pg = pg
        self.process = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "psql", "-h", pg.directory, "-p",
             str(pg.port), "-U", "postgres", "-d", "tokend", "-At", "-v", "ON_ERROR_STOP=0"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)

    def send(self, sql):
        self.process.stdin.write(sql + "\n")
        self.process.stdin.flush()

    def close(self):
        self.process.stdin.close()
        self.process.wait(20)


def as_tokend_1(pg, statement):
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", "psql", "-h", pg.directory, "-p", str(pg.port), "-U", "postgres", "-d",
         "tokend", "-At", "-c", statement], capture_output=True, text=True, timeout=30)


def write_as_tokend_1(pg, version):
    """tokend 1's fenced write of the shared record (`git show 2fc0be4:Sources/Fleet/PostgresStore.swift`,
    PostgresLease.write with a version read), its bound values written out."""
    return as_tokend_1(
        pg, f"WITH w AS (UPDATE tokend_sessions SET version = version + 1, generation = 4, "
            f"record = 'sealed by tokend 1', written_by = 'old', written_at = now() "
            f"WHERE session = 'default' AND version = {version} RETURNING version) "
            f"SELECT version, pg_notify('tokend', version::text || ' ' || 'default')::text FROM w")


def first_write_as_tokend_1(pg, session):
    """tokend 1's first write of a session the store does not have yet (the same, with no version read)."""
    return as_tokend_1(
        pg, f"WITH w AS (INSERT INTO tokend_sessions (session, version, generation, record, written_by) "
            f"VALUES ('{session}', 1, 1, 'sealed by tokend 1', 'old') ON CONFLICT (session) DO NOTHING "
            f"RETURNING version) SELECT version, pg_notify('tokend', version::text || ' ' || '{session}')::text FROM w")


def test_an_upgraded_host_waits_for_an_old_hosts_refresh_then_old_hosts_can_only_read(server, workdir):
    pg = Postgres(os.path.join(workdir, "pg"))
    old = None
    fleet = Fleet(workdir, server, pg, hosts=("a",))
    try:
        pg.sql(V1_SCHEMA, database="tokend")
        pg.sql("INSERT INTO tokend_sessions VALUES ('default', 7, 3, 'sealed by tokend 1', 'old')", database="tokend")
        # An old host is refreshing: it holds the session's advisory lock across its upstream call.
        old = OldHost(pg)
        old.send(f"SELECT pg_advisory_lock({CLASS_ID}, hashtext('default'));")
        locked = f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = hashtext('default')::oid"
        wait_for(lambda: pg.sql(locked, database="tokend") == "1", 20, "the old host holding its lock")
        fleet["a"].start()
        # The upgraded host's migration waits for the old host's refresh to end, changing nothing meanwhile.
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tokend a' "
                   "AND wait_event_type = 'Lock' AND wait_event = 'advisory'")
        wait_for(lambda: pg.sql(waiting) == "1", 20, "the migration waiting for the old host's lock")
        assert pg.sql("SELECT max(version) FROM tokend_schema", database="tokend") == "1"
        # The old host writes its result and lets go; the migration goes on and keeps the row.
        assert write_as_tokend_1(pg, 7).stdout.startswith("8|")
        old.send(f"SELECT pg_advisory_unlock({CLASS_ID}, hashtext('default'));")
        wait_for(lambda: pg.sql("SELECT max(version) FROM tokend_schema", database="tokend") == "2", 20,
                 "the migration done")
        assert pg.sql("SELECT version, written_by FROM tokend_shared", database="tokend") == "8|old"
        # From now on an old host can follow the fleet (its SELECT works) but never write, so it never refreshes:
        # tokend writes its marker before it calls the token endpoint.
        assert pg.sql("SELECT version FROM tokend_sessions WHERE session = 'default'", database="tokend") == "8"
        refused = write_as_tokend_1(pg, 8)
        assert refused.returncode != 0 and "upgrade tokend on this host" in refused.stderr, refused.stderr
        # Its first write of a session the fleet does not have is refused before any trigger runs: PostgreSQL
        # cannot apply ON CONFLICT to a view (the old host says its store is unavailable, with this message).
        inserted = first_write_as_tokend_1(pg, "other")
        assert inserted.returncode != 0 and "no unique or exclusion constraint matching the ON CONFLICT" \
            in inserted.stderr, inserted.stderr
        assert pg.sql("SELECT count(*) FROM tokend_shared WHERE session = 'other'", database="tokend") == "0"
        assert pg.sql("SELECT version FROM tokend_shared WHERE session = 'default'", database="tokend") == "8"
        # The upgraded host works on the migrated store. (This test's old record is not a sealed one: gone first.)
        pg.sql("DELETE FROM tokend_shared", database="tokend")
        login(fleet["a"], server)
        assert pg.row().split("|")[2] == "a"
        # Its last poll may have found the unsealed row; the next one finds A's.
        wait_for(lambda: fleet.status("a")["store"] == "connected", 20, "A's store connected")
    finally:
        if old:
            old.close()
        fleet.stop()
        pg.stop("immediate")
