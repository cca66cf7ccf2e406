"""A fleet for tests: a real PostgreSQL 15 (initdb into a temporary directory,
run by user postgres on a loopback port) and several tokend hosts sharing one
session through it, each with its own socket and state directory."""
import os
import shutil
import signal
import subprocess
import time

from conftest import BIN, Tokend, free_port, wait_for

PG_BIN = "/usr/lib/postgresql/15/bin"
PASSWORD = "fleet-db-password"


class Postgres:
    def __init__(self, directory, port=None):
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
        self.start()
        self.sql(f"CREATE ROLE tokend LOGIN PASSWORD '{PASSWORD}'")
        self.sql("CREATE DATABASE tokend OWNER tokend")

    def _as_postgres(self, *command, check=True):
        return subprocess.run(["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True,
                              check=check, timeout=60)

    @property
    def url(self):
        return f"postgresql://tokend@127.0.0.1:{self.port}/tokend?sslmode=disable"

    def start(self):
        self._as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", os.path.join(self.directory, "log"), "-w",
                          "-o", f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1", "start")

    def stop(self, mode="fast"):
        self._as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", mode, "-w", "stop", check=False)

    def sql(self, query, database="postgres"):
        result = self._as_postgres("psql", "-h", self.directory, "-p", str(self.port), "-U", "postgres", "-d",
                                   database, "-At", "-v", "ON_ERROR_STOP=1", "-c", query)
        return result.stdout.strip()

    def row(self, session="default"):
        """version|generation|written_by of the shared record."""
        return self.sql(f"SELECT version, generation, written_by FROM tokend_sessions WHERE session = '{session}'",
                        database="tokend")


def generate_key(path):
    key = subprocess.run([os.path.join(BIN, "tokend"), "--generate-state-key"], capture_output=True, text=True,
                         check=True).stdout
    with open(path, "w") as f:
        f.write(key)
    os.chmod(path, 0o600)


class Fleet:
    """Hosts a, b, c, ...: one tokend each, sharing session "default" through `pg`."""

    def __init__(self, workdir, server, pg, hosts=("a", "b", "c"), **session):
        self.key = os.path.join(workdir, "fleet.key")
        generate_key(self.key)
        self.password = os.path.join(workdir, "db-password")
        with open(self.password, "w") as f:
            f.write(PASSWORD + "\n")
        self.hosts = {}
        for name in hosts:
            directory = os.path.join(workdir, name)
            os.makedirs(directory, exist_ok=True)
            options = {"shared-store": f'"{pg.url}"', "shared-store-password-file": f'"{self.password}"'}
            options.update(session)
            self.hosts[name] = Tokend(directory, server,
                                      daemon={"host-id": f'"{name}"', "state-key-file": f'"{self.key}"'}, **options)

    def __getitem__(self, name):
        return self.hosts[name]

    def start(self, env=None):
        for host in self.hosts.values():
            host.start(env=env)
        return self

    def stop(self):
        for host in self.hosts.values():
            if host.process is not None and host.process.poll() is None:
                host.process.send_signal(signal.SIGKILL)
                host.process.wait(10)

    def status(self, name):
        raw, reply = self.hosts[name].call("io.tokend.Broker.GetStatus")
        return reply["parameters"]["status"]

    def wait_generation(self, generation, timeout=20, hosts=None):
        for name in hosts or self.hosts:
            wait_for(lambda: self.status(name)["generation"] >= generation, timeout,
                     f"host {name} at generation {generation}")
