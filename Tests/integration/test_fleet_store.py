"""The fleet's store as an attack surface: TLS to PostgreSQL, and a database writer replaying an old record."""
import os

from conftest import login, wait_for
from fleet import Fleet, Postgres, fleet_of, pg  # noqa: F401 (fixtures)


def test_sslmode_verify_full_require_and_a_wrong_certificate(server, workdir):
    from fleet import make_certificate
    pg = Postgres(os.path.join(workdir, "pg"), tls=True)
    other = os.path.join(workdir, "other.crt")
    make_certificate(other, os.path.join(workdir, "other.key"), "127.0.0.1")
    fleet = Fleet(workdir, server, pg)
    hosts = fleet.hosts
    try:
        for name, query in (("a", f"sslmode=verify-full&sslrootcert={pg.certificate}"), ("b", "sslmode=require"),
                            ("c", f"sslmode=verify-full&sslrootcert={other}")):
            with open(hosts[name].config) as f:
                config = f.read()
            with open(hosts[name].config, "w") as f:
                f.write(config.replace("?sslmode=disable", "?" + query))
        for host in hosts.values():
            host.start()
        login(hosts["a"], server)
        status = lambda name: hosts[name].call("io.tokend.Broker.GetStatus")[1]["parameters"]["status"]
        wait_for(lambda: status("b")["store"] == "connected" and status("b")["state"] == "active", 15, "B over TLS")
        encrypted = pg.sql("SELECT a.application_name, s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                           "WHERE a.application_name LIKE 'tokend%' ORDER BY 1")
        rows = dict(line.split("|") for line in encrypted.splitlines())
        assert rows and all(ssl == "t" for ssl in rows.values()), encrypted
        assert "tokend a" in rows and "tokend b" in rows
        # A certificate from another CA is refused, and said so.
        wait_for(lambda: (status("c")["store"] or "").startswith("unavailable"), 15, "C refuses the certificate")
        assert status("c")["state"] == "loginRequired"
        assert "TLS handshake failed" in status("c")["store"] and "CERTIFICATE_VERIFY_FAILED" in status("c")["store"]
    finally:
        for host in hosts.values():
            host.stop()
        pg.stop("immediate")


def test_a_database_writer_cannot_roll_the_fleet_back(server, fleet_of, pg):
    # The attack: someone with write access to tokend_sessions puts an older
    # sealed record (a spent refresh token) at a newer version. Hosts would
    # adopt it and replay the spent token: the provider revokes the family.
    fleet = fleet_of(server).start()
    login(fleet["a"], server)
    generation = fleet["a"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]["generation"]
    fleet.wait_generation(generation)
    old = pg.sql("SELECT record FROM tokend_shared", database="tokend")
    reply = fleet["a"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]
    assert "error" not in reply, reply
    fleet.wait_generation(generation + 1)
    current = fleet["b"].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]
    escaped = old.replace("'", "''")
    pg.sql(f"UPDATE tokend_shared SET version = version + 1, record = '{escaped}'", database="tokend")
    wait_for(lambda: all("replayed or altered" in fleet[name].logs() for name in "abc"), 20, "every host refusing it")
    for name in "abc":
        token = fleet[name].call("io.tokend.Broker.GetToken")[1]["parameters"]["token"]
        assert token["generation"] == current["generation"] and token["accessToken"] == current["accessToken"]
    assert all(g["status"] == 200 for g in server.grants("refresh_token")), "no spent refresh token was replayed"


def test_doctor_names_the_grant_a_role_lacks(server, fleet_of, pg):
    # The DBA revoked what tokend writes with. tokend asks the store about itself (status's fleet.check) when
    # a statement is refused for privileges, and doctor says which privileges, and the GRANT that restores them.
    fleet = fleet_of(server, hosts=("a",)).start()
    login(fleet["a"], server)
    doctor = lambda: fleet["a"].ctl("doctor", "--config", fleet["a"].config).stdout
    wait_for(lambda: fleet.status("a")["fleet"].get("check"), 20, "tokend's first look at the store")
    check = fleet.status("a")["fleet"]["check"]
    assert check["user"] == "tokend" and check["missing"] == [] and check["pooler"] == "direct", check
    said = doctor()
    assert "tokend may read and write tokend's tables" in said and "no pooler" in said, said
    pg.sql("REVOKE INSERT, UPDATE ON tokend_shared FROM tokend", database="tokend")
    generation = fleet.status("a")["generation"]
    reply = fleet["a"].call("io.tokend.Broker.Refresh", staleGeneration=generation)[1]
    assert "error" in reply, "the refused lease statement fails the refresh"
    wait_for(lambda: fleet.status("a")["fleet"]["check"]["missing"], 20, "the check after the refusal")
    assert fleet.status("a")["fleet"]["check"]["missing"] == [{"table": "tokend_shared", "privileges": ["INSERT", "UPDATE"]}]
    said = doctor()
    assert "SQLSTATE 42501" in said and "tokend_shared (INSERT, UPDATE)" in said, said
    assert "GRANT INSERT, UPDATE ON tokend_shared TO tokend;" in said, said
    assert "the store's role lacks privileges tokend uses" in fleet["a"].logs()
