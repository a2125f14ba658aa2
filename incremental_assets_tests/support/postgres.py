"""A real PostgreSQL server for the tests, and a fresh schema on it per test.

Started from the binaries on PATH (initdb, pg_ctl) in a temporary directory on a free loopback
port, with password authentication over TCP and every statement logged, so tests can check the
SQL that reached the server. PostgreSQL refuses to run as root; then the server runs as the
`postgres` user. Set INCREMENTAL_ASSETS_TEST_PG=postgresql://user:password@host:port/db to use an
existing server instead (the role must be allowed to create schemas and roles).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg

EXTERNAL_ENV = "INCREMENTAL_ASSETS_TEST_PG"
SUPERUSER = "postgres"
PASSWORD = "test-password"
MAX_CONNECTIONS = 200
MAX_PREPARED = 20  # prepared transactions are allowed, so tests can leave some open
MAX_SENDERS = 20  # a standby needs at least the primary's


@dataclass
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    dbname: str
    log_path: Path | None = None

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}"

    @property
    def conninfo(self) -> str:
        return (
            f"host={self.host} port={self.port} user={self.user} password={self.password} "
            f"dbname={self.dbname}"
        )

    def connect(self, autocommit: bool = True, **overrides: object) -> psycopg.Connection:
        params: dict[str, object] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "dbname": self.dbname,
            **overrides,
        }
        return psycopg.connect(autocommit=autocommit, **params)  # type: ignore[arg-type]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


@dataclass
class Schema:
    """A fresh PostgreSQL schema for one test."""

    server: PostgresServer
    name: str

    def execute(self, *statements: str, params: Any = None) -> None:
        with self.server.connect() as conn:
            conn.execute(f"SET search_path TO {self.name}")
            for statement in statements:
                conn.execute(statement, params)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with self.server.connect() as conn:
            conn.execute(f"SET search_path TO {self.name}")
            return conn.execute(sql).fetchall()

    def source(self, **extra: Any) -> dict[str, Any]:
        return {
            "type": "jdbc",
            "url": self.server.jdbc_url,
            "user": self.server.user,
            "password": self.server.password,
            **extra,
        }


@contextmanager
def fresh_schema(server: PostgresServer) -> Iterator[Schema]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    try:
        yield Schema(server, name)
    finally:
        with server.connect() as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


@contextmanager
def catalog_database(server: PostgresServer) -> Iterator[str]:
    """A database and a role of their own for an Iceberg catalog: its SQLAlchemy URI. The
    catalog's clients (PyIceberg's engine, Spark's JDBC pool) keep connections open for the
    process's life; they are ended with the role, so that no other test sees them among the
    server's sessions (the transaction cap counts other roles' sessions)."""
    name = f"cat_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE DATABASE {name} OWNER {name}")
    try:
        yield f"postgresql+psycopg2://{name}:{PASSWORD}@{server.host}:{server.port}/{name}"
    finally:
        with server.connect() as conn:
            conn.execute(
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'"
            )
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {name}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    """A PostgreSQL program from PATH, or from Debian's versioned directory (not on PATH there)."""
    found = shutil.which(name) or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)),
        None,
    )
    if found is None:
        raise RuntimeError(
            f"The tests start their own PostgreSQL, but `{name}` is neither on PATH nor in "
            "/usr/lib/postgresql/*/bin. Install PostgreSQL (apt-get install postgresql), or set "
            f"{EXTERNAL_ENV}=postgresql://user:password@host:5432/db to use a running server."
        )
    return found


def _as_postgres(command: list[str]) -> list[str]:
    command = [_binary(command[0]), *command[1:]]
    return ["runuser", "-u", SUPERUSER, "--", *command] if os.geteuid() == 0 else command


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    external = os.environ.get(EXTERNAL_ENV)
    if external:
        url = urlparse(external)
        yield PostgresServer(
            host=url.hostname or "127.0.0.1",
            port=url.port or 5432,
            user=url.username or SUPERUSER,
            password=url.password or "",
            dbname=(url.path or "/postgres").lstrip("/") or "postgres",
        )
        return
    root = Path(tempfile.mkdtemp(prefix="ia-pg-"))
    data, log, pwfile = root / "data", root / "server.log", root / "pw"
    pwfile.write_text(PASSWORD)
    if os.geteuid() == 0:
        shutil.chown(root, SUPERUSER)
        shutil.chown(pwfile, SUPERUSER)
    port = free_port()
    try:
        subprocess.run(
            _as_postgres(
                [
                    "initdb",
                    "-D",
                    str(data),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            check=True,
            capture_output=True,
        )
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c log_statement=all "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            f"-c max_connections={MAX_CONNECTIONS} -c max_prepared_transactions={MAX_PREPARED} "
            # Log capture reads the log through replication slots.
            f"-c wal_level=logical -c max_replication_slots=20 -c max_wal_senders={MAX_SENDERS}"
        )
        _pg_ctl(data, "start", "-o", options, "-l", str(log), "-t", "60")
        yield PostgresServer("127.0.0.1", port, SUPERUSER, PASSWORD, "postgres", log)
    finally:
        _pg_ctl(data, "stop", "-m", "immediate", check=False)
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def standby_server(primary: PostgresServer) -> Iterator[PostgresServer]:
    """A hot standby streaming from the suite's own `primary`: pg_is_in_recovery() is true there."""
    if primary.log_path is None:
        raise RuntimeError(f"a standby needs the suite's own server, not {EXTERNAL_ENV}")
    root = Path(tempfile.mkdtemp(prefix="ia-standby-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, SUPERUSER)
    port = free_port()
    primary_dsn = (
        f"host={primary.host} port={primary.port} user={primary.user} password={primary.password}"
    )
    try:
        subprocess.run(
            _as_postgres(
                ["pg_basebackup", "-d", primary_dsn, "-D", str(data), "-R", "-X", "stream"]
            ),
            check=True,
            capture_output=True,
        )
        # A standby needs at least the primary's limits.
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c hot_standby=on "
            f"-c max_connections={MAX_CONNECTIONS} -c max_prepared_transactions={MAX_PREPARED} "
            f"-c max_wal_senders={MAX_SENDERS}"
        )
        _pg_ctl(data, "start", "-o", options, "-l", str(root / "server.log"), "-t", "60")
        yield PostgresServer("127.0.0.1", port, primary.user, primary.password, primary.dbname)
    finally:
        _pg_ctl(data, "stop", "-m", "immediate", check=False)
        shutil.rmtree(root, ignore_errors=True)


def _pg_ctl(data: Path, action: str, *options: str, check: bool = True) -> None:
    """`pg_ctl <action>` on the cluster in `data`, waiting for it to finish."""
    subprocess.run(
        _as_postgres(["pg_ctl", "-D", str(data), *options, "-w", action]),
        check=check,
        capture_output=True,
    )


def wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise TimeoutError("condition not met in time")
