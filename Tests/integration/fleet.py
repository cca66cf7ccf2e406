"""A fleet for tests: a real PostgreSQL 15 (initdb into a temporary directory,
run by user postgres on a loopback port) and several tokend hosts sharing one
session through it, each with its own socket and state directory."""
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import BIN, Tokend, free_port, wait_for

PG_BIN = "/usr/lib/postgresql/15/bin"
PASSWORD = "fleet-db-password"


class Postgres:
    def __init__(self, directory, port=None, listen="127.0.0.1", hba=(), tls=False, settings=()):
        """`tls`: serve TLS with a certificate for 127.0.0.1 made here (`self.certificate`);
        `settings`: more server settings, "name=value" each (max_connections=20)."""
        self.directory = directory
        self.data = os.path.join(directory, "data")
        self.port = port or free_port()
        os.makedirs(directory, exist_ok=True)
        # postgres must reach its directory: open the way through the test's private parent.
        os.chmod(os.path.dirname(directory), 0o711)
        shutil.chown(directory, "postgres", "postgres")
        pwfile = os.path.join(directory, "pwfile")
        with open(pwfile, "w") as f:
            f.write(PASSWORD + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        self._as_postgres(f"{PG_BIN}/initdb", "-D", self.data, "-U", "postgres", "--auth-local=trust",
                          "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8")
        self.listen = listen
        self.options = "".join(f" -c {setting}" for setting in settings)
        if tls:
            self.certificate, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
            make_certificate(self.certificate, key, "127.0.0.1")
            for path in (self.certificate, key):
                shutil.chown(path, "postgres", "postgres")
            self.options += f" -c ssl=on -c ssl_cert_file={self.certificate} -c ssl_key_file={key}"
        with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
            for network in hba:
                f.write(f"host all all {network} scram-sha-256\n")
        self.start()
        self.sql(f"CREATE ROLE tokend LOGIN PASSWORD '{PASSWORD}'")
        self.sql("CREATE DATABASE tokend OWNER tokend")

    def _as_postgres(self, *command, check=True):
        return subprocess.run(["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True,
                              check=check, timeout=60)

    def url(self, host="127.0.0.1", options="poll=1"):
        """The store's address for a host; the tests poll every second (the default is 10 s)."""
        return f"postgresql://tokend@{host}:{self.port}/tokend?sslmode=disable" + (f"&{options}" if options else "")

    def start(self):
        self._as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", os.path.join(self.directory, "log"), "-w",
                          "-o", f"-p {self.port} -k {self.directory} -c listen_addresses={self.listen}{self.options}", "start")

    def stop(self, mode="fast"):
        self._as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def sql(self, query, database="postgres"):
        result = self._as_postgres("psql", "-h", self.directory, "-p", str(self.port), "-U", "postgres", "-d",
                                   database, "-At", "-v", "ON_ERROR_STOP=1", "-c", query)
        return result.stdout.strip()

    def row(self, session="default"):
        """version|generation|written_by of the shared record."""
        return self.sql(f"SELECT version, generation, written_by FROM tokend_shared WHERE session = '{session}'",
                        database="tokend")

    def backends(self, user="tokend"):
        """How many server processes `user` has now (pg_stat_activity)."""
        return int(self.sql(f"SELECT count(*) FROM pg_stat_activity WHERE usename = '{user}'"))


class PgBouncer:
    """PgBouncer 1.18 in front of `pg`, run by user postgres (it refuses root) in `directory`:
    transaction mode, a pool of `pool` server connections, no startup parameter ignored."""

    def __init__(self, directory, pg, pool=5, mode="transaction"):
        self.directory = directory
        self.pg = pg
        self.port = free_port()
        os.makedirs(directory, exist_ok=True)
        os.chmod(os.path.dirname(directory), 0o711)
        self.config = os.path.join(directory, "pgbouncer.ini")
        with open(os.path.join(directory, "userlist.txt"), "w") as f:
            f.write(f'"tokend" "{PASSWORD}"\n')
        with open(self.config, "w") as f:
            f.write(f"""[databases]
tokend = host=127.0.0.1 port={pg.port} dbname=tokend
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir = {directory}
auth_type = scram-sha-256
auth_file = {directory}/userlist.txt
admin_users = tokend
pool_mode = {mode}
default_pool_size = {pool}
max_client_conn = 2000
logfile = {directory}/log
""")
        for name in os.listdir(directory):
            shutil.chown(os.path.join(directory, name), "postgres", "postgres")
        shutil.chown(directory, "postgres", "postgres")
        self.process = None
        self.start()

    def start(self):
        self.process = subprocess.Popen(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                                         "/usr/sbin/pgbouncer", self.config], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        wait_for(lambda: self.process.poll() is not None or self._answers(), 20, "PgBouncer listening")
        assert self.process.poll() is None, self.log()

    def _answers(self):
        try:
            self.show("VERSION")
            return True
        except subprocess.CalledProcessError:
            return False

    def url(self, host="127.0.0.1", options="poll=1"):
        return f"postgresql://tokend@{host}:{self.port}/tokend?sslmode=disable" + (f"&{options}" if options else "")

    def show(self, what):
        """The admin console's SHOW `what`, as a list of dicts."""
        result = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tokend", "-d", "pgbouncer",
                                 "-A", "-F", "\t", "-c", f"SHOW {what}"], capture_output=True, text=True, check=True,
                                timeout=20, env=dict(os.environ, PGPASSWORD=PASSWORD))
        lines = [line for line in result.stdout.splitlines() if line and not line.startswith("(")]
        header = lines[0].split("\t")
        return [dict(zip(header, line.split("\t"))) for line in lines[1:]]

    def pool(self):
        """The tokend database's pool: cl_active, sv_active, sv_idle... as ints."""
        row = next(r for r in self.show("POOLS") if r["database"] == "tokend")
        return {k: int(v) for k, v in row.items() if v.isdigit()}

    def log(self):
        with open(os.path.join(self.directory, "log")) as f:
            return f.read()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)


def make_certificate(certificate, key, address):
    """A self-signed certificate (its own CA) for an IP address."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={address}",
                    "-addext", f"subjectAltName=IP:{address}", "-keyout", key, "-out", certificate],
                   check=True, capture_output=True)
    os.chmod(key, 0o600)


def generate_key(path):
    key = subprocess.run([os.path.join(BIN, "tokend"), "--generate-state-key"], capture_output=True, text=True,
                         check=True).stdout
    with open(path, "w") as f:
        f.write(key)
    os.chmod(path, 0o600)


def descendants(pid):
    """The processes under `pid`, deepest first (/proc's children lists)."""
    found = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(child) for child in f.read().split()]
    except OSError:
        return found
    for child in children:
        found += descendants(child) + [child]
    return found


class Fleet:
    """Hosts a, b, c, ...: one tokend each, sharing session "default" through `pg`."""

    def __init__(self, workdir, server, pg, hosts=("a", "b", "c"), store_hosts=None, servers=None, **session):
        """`store_hosts`: the address each host reaches PostgreSQL at (default 127.0.0.1);
        `servers`: a token endpoint of its own for some hosts (default `server`)."""
        self.key = os.path.join(workdir, "fleet.key")
        generate_key(self.key)
        self.password = os.path.join(workdir, "db-password")
        with open(os.open(self.password, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(PASSWORD + "\n")
        self.hosts = {}
        for name in hosts:
            directory = os.path.join(workdir, name)
            os.makedirs(directory, exist_ok=True)
            store = (store_hosts or {}).get(name, "127.0.0.1")
            options = {"shared-store": f'"{pg.url(store)}"', "shared-store-password-file": f'"{self.password}"'}
            options.update(session)
            # The tests refresh back to back with the current generation, which
            # counts as a forced refresh: allow them the most the limit allows.
            self.hosts[name] = Tokend(directory, (servers or {}).get(name, server),
                                      daemon={"host-id": f'"{name}"', "state-key-file": f'"{self.key}"',
                                              "forced-refreshes-per-minute": 600}, **options)

    def __getitem__(self, name):
        return self.hosts[name]

    def start(self, env=None):
        for host in self.hosts.values():
            host.start(env=env)
        return self

    def stop(self):
        for host in self.hosts.values():
            if host.process is not None and host.process.poll() is None:
                # A host started under a wrapper (faketime forks tokend and waits): its tokend first.
                for pid in descendants(host.process.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                host.process.send_signal(signal.SIGKILL)
                host.process.wait(10)

    def status(self, name):
        raw, reply = self.hosts[name].call("io.tokend.Broker.GetStatus")
        return reply["parameters"]["status"]

    def wait_generation(self, generation, timeout=20, hosts=None):
        for name in hosts or self.hosts:
            wait_for(lambda: self.status(name)["generation"] >= generation, timeout,
                     f"host {name} at generation {generation}")


class NetworkNamespace:
    """A network namespace joined to this one by two veth pairs: one to reach
    PostgreSQL (which `cut()` takes down), one to reach the authorization
    server (through relays, since it listens on 127.0.0.1)."""

    def __init__(self, name=None, subnet=None):
        """`subnet`: the namespace's addresses are 10.SUBNET.0.0/30 and 10.SUBNET.1.0/30. By default
        the first subnet no other namespace here holds (runs side by side, other people's runs too),
        held by a lock on a file until `delete()` or this process's end; the name follows from it."""
        self.claim = None
        if subnet is None:
            for subnet in range(160, 230):
                claim = open(f"/tmp/tokend-test-netns-{subnet}.lock", "a")
                try:
                    fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    claim.close()
                    continue
                self.claim = claim
                break
            else:
                raise AssertionError("every test network namespace subnet is taken")
        name = name or f"tkns{subnet}"
        self.name = name
        self.db_address = f"10.{subnet}.0.1"
        self.auth_address = f"10.{subnet}.1.1"
        self.db_link = f"{name}db0"
        self.relays = []
        self.relay_processes = []
        self._remove()  # one left by a run that died holding this subnet
        run = lambda *c: subprocess.run(c, check=True, capture_output=True)
        inside = lambda *c: run("ip", "netns", "exec", name, *c)
        run("ip", "netns", "add", name)
        for link, index in ((self.db_link, 0), (f"{name}au0", 1)):
            peer = link[:-1] + "1"
            run("ip", "link", "add", link, "type", "veth", "peer", "name", peer)
            run("ip", "link", "set", peer, "netns", name)
            run("ip", "addr", "add", f"10.{subnet}.{index}.1/30", "dev", link)
            run("ip", "link", "set", link, "up")
            inside("ip", "addr", "add", f"10.{subnet}.{index}.2/30", "dev", peer)
            inside("ip", "link", "set", peer, "up")
        inside("ip", "link", "set", "lo", "up")

    @property
    def prefix(self):
        return ("ip", "netns", "exec", self.name)

    def forward_loopback_port(self, port):
        """127.0.0.1:port inside the namespace reaches 127.0.0.1:port here."""
        from relay import Relay
        self.relays.append(Relay(self.auth_address, port, "127.0.0.1", port))
        here = os.path.dirname(os.path.abspath(__file__))
        self.relay_processes.append(subprocess.Popen(
            [*self.prefix, sys.executable, os.path.join(here, "relay.py"), "127.0.0.1", str(port),
             self.auth_address, str(port)]))
        wait_for(lambda: subprocess.run([*self.prefix, sys.executable, "-c",
                                         f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                                        capture_output=True).returncode == 0, 10, "relay into the namespace")

    def cut(self):
        subprocess.run(["ip", "link", "set", self.db_link, "down"], check=True)

    def restore(self):
        subprocess.run(["ip", "link", "set", self.db_link, "up"], check=True)

    def delete(self):
        for process in self.relay_processes:
            process.kill()
        for relay in self.relays:
            relay.close()
        self._remove()
        if self.claim is not None:
            self.claim.close()
            self.claim = None

    def _remove(self):
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)
        for link in (f"{self.name}db0", f"{self.name}au0"):
            subprocess.run(["ip", "link", "delete", link], capture_output=True)


@pytest.fixture
def pg(workdir):
    instance = Postgres(os.path.join(workdir, "pg"))
    yield instance
    instance.stop("immediate")


@pytest.fixture
def fleet_of(workdir, pg):
    made = []

    def make(server, **session):
        fleet = Fleet(workdir, server, pg, **session)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.stop()
