"""A real MariaDB server for the tests.

Started from Debian's mariadb-server binaries (`mariadb-install-db`, `mariadbd`) in a temporary
directory on a free loopback port, in the Asia/Kolkata zone (UTC+05:30, so a value shifted by
the server's zone shows); as root, the server runs as the `mysql` user in a directory it owns.
The tests connect as `test`, a user with every privilege (PROCESS included, so open
transactions are visible), over TCP with a password. Set
INCREMENTAL_ASSETS_TEST_MYSQL=mysql://user:password@host:port to use a running MySQL or MariaDB
instead (the user must be allowed to create databases and users).
"""

from __future__ import annotations

import os
import shutil
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

import pymysql

from incremental_assets import jvm
from incremental_assets_tests.support.postgres import free_port

EXTERNAL_ENV = "INCREMENTAL_ASSETS_TEST_MYSQL"
# MariaDB Connector/J in the jar folder (`incremental-assets jars fetch`).
MARIADB_JAR = str(jvm.jar_path(jvm.MARIADB_JDBC))
USER = "test"
PASSWORD = "test-password"
_SERVER_USER = "mysql"
SERVER_ZONE = "Asia/Kolkata"


@dataclass
class MariaDbServer:
    host: str
    port: int
    user: str
    password: str

    def connect(self, database: str | None = None, **overrides: Any) -> pymysql.Connection:
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": database,
            "autocommit": True,
            **overrides,
        }
        return pymysql.connect(**args)

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:mysql://{self.host}:{self.port}/{database}"


@dataclass
class Database:
    """A fresh database (a schema, in MySQL's terms) for one test."""

    server: MariaDbServer
    name: str

    def execute(self, *statements: str, params: Any = None) -> None:
        with self.server.connect(self.name) as conn, conn.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
            for statement in statements:
                cursor.execute(statement, params)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        with self.server.connect(self.name) as conn, conn.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")
            cursor.execute(sql)
            return list(cursor.fetchall())

    @contextmanager
    def sql_mode(self, mode: str) -> Iterator[None]:
        """New sessions on the server start in this extra SQL mode while the block is open."""
        ((saved,),) = self.query("SELECT @@GLOBAL.sql_mode")
        self.execute(f"SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',{mode}')")
        try:
            yield
        finally:
            self.execute(f"SET GLOBAL sql_mode = '{saved}'")

    def source(self, **extra: Any) -> dict[str, Any]:
        return {
            "type": "jdbc",
            "url": self.server.jdbc_url(self.name),
            "user": self.server.user,
            "password": self.server.password,
            **extra,
        }


@contextmanager
def fresh_database(server: MariaDbServer) -> Iterator[Database]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield Database(server, name)
    finally:
        with server.connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE {name}")


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if Path(p).exists()), None
    )
    if found is None:
        raise RuntimeError(
            f"The tests start their own MariaDB, but `{name}` is not installed. Run `make system` "
            f"as root (apt-get install mariadb-server libmariadb-java), or set "
            f"{EXTERNAL_ENV}=mysql://user:password@host:3306 to use a running server."
        )
    return found


@contextmanager
def mariadb_server() -> Iterator[MariaDbServer]:
    external = os.environ.get(EXTERNAL_ENV)
    if external:
        url = urlparse(external)
        yield MariaDbServer(
            url.hostname or "127.0.0.1",
            url.port or 3306,
            url.username or "root",
            url.password or "",
        )
        return
    root = Path(tempfile.mkdtemp(prefix="ia-mariadb-"))
    data, socket = root / "data", root / "mariadb.sock"
    as_root = os.geteuid() == 0
    if as_root:
        shutil.chown(root, _SERVER_USER, _SERVER_USER)
    user = [f"--user={_SERVER_USER}"] if as_root else []
    port = free_port()
    process = None
    try:
        installed = subprocess.run(
            [
                _binary("mariadb-install-db"),
                # The system's my.cnf names its own socket, pid and log files, not this server's.
                "--no-defaults",
                *user,
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
        )
        if installed.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed:\n{installed.stdout}{installed.stderr}")
        process = subprocess.Popen(
            [
                _binary("mariadbd"),
                "--no-defaults",
                *user,
                f"--datadir={data}",
                f"--socket={socket}",
                f"--port={port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={root / 'mariadb.pid'}",
                f"--log-error={root / 'error.log'}",
                # The binary log as `capture: log` tables read it (row events, whole rows, with
                # their column names)
                "--log-bin=mariadb-bin",
                "--server-id=1",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--binlog-row-metadata=FULL",
                "--sync-binlog=0",
                "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=0",
                "--max-connections=300",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Not UTC, with an odd offset: a value shifted by the server's zone shows.
            env={**os.environ, "TZ": SERVER_ZONE},
        )
        _wait_for_root(socket, process, root)
        admin = pymysql.connect(unix_socket=str(socket), user="root", autocommit=True)
        with admin, admin.cursor() as cursor:
            cursor.execute(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
            cursor.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION")
        yield MariaDbServer("127.0.0.1", port, USER, PASSWORD)
    finally:
        if process is not None:
            process.kill()
            process.wait()
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_root(socket: Path, process: subprocess.Popen[bytes], root: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (root / "error.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"mariadbd exited ({process.returncode}):\n{log}")
        try:
            pymysql.connect(unix_socket=str(socket), user="root").close()
            return
        except pymysql.Error:
            time.sleep(0.2)
    raise TimeoutError("mariadbd did not accept connections within 60 s")
