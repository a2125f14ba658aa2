"""The MySQL phase: S1 and S0 against a MariaDB server, ours beside ConnectorX and dlt.

The same `orders` table as PostgreSQL's (bench/data.py), in a database `bench` on a MariaDB
server the harness starts (incremental_assets_tests/support/mariadb.py: Debian's mariadb-server on a
free loopback port), or INCREMENTAL_ASSETS_TEST_MYSQL names one. Ours reads it over JDBC (MariaDB
Connector/J from the jar folder, a `jdbc:mysql://` URL); ConnectorX reads it into Arrow with two
partitions on the id for a full load and writes one zstd Parquet file; dlt runs `sql_table` over
PyMySQL. Each engine runs in a worker process of its own (bench/worker.py), timed from its side,
with the MariaDB server's CPU counted as PostgreSQL's is.

  S1  a full load (after one first load per engine, reported apart as "S1 first")
  S0  an incremental run with nothing new
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.data import SCHEMA

ENGINES = ("ours", "connectorx", "dlt")

CREATE = f"""
CREATE TABLE {SCHEMA}.orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL,
    amount decimal(12, 2) NOT NULL,
    status varchar(16) NOT NULL,
    note varchar(32),
    created_at datetime(6) NOT NULL,
    updated_at datetime(6) NOT NULL
)
"""


def create_orders(conn: Any, rows: int) -> None:
    """The same rows as bench/data.py's, from MariaDB's sequence engine, in batches."""
    with conn.cursor() as cursor:
        # The test server starts with a 64 MB buffer pool; the table should stay in memory.
        cursor.execute("SET GLOBAL innodb_buffer_pool_size = 2147483648")
        cursor.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cursor.execute(f"CREATE DATABASE {SCHEMA}")
        cursor.execute(f"USE {SCHEMA}")  # the sequence engine's tables are in the current one
        cursor.execute(CREATE)
        stamp = "TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq * 10000 MICROSECOND"
        batch = 500_000
        for first in range(1, rows + 1, batch):
            last = min(rows, first + batch - 1)
            cursor.execute(
                f"INSERT INTO {SCHEMA}.orders SELECT seq, (seq * 7919) % 100000, "
                f"((seq * 37) % 1000000) / 100.0, ELT(1 + seq % 4, 'placed', 'paid', 'shipped', "
                f"'delivered'), MD5(seq), {stamp}, {stamp} FROM seq_{first}_to_{last}"
            )
        cursor.execute(f"CREATE INDEX orders_updated_at ON {SCHEMA}.orders (updated_at)")
        cursor.execute(f"ANALYZE TABLE {SCHEMA}.orders")
        cursor.fetchall()


def newest(conn: Any) -> str:
    """The newest updated_at as text, the lower bound a peer's incremental read starts after."""
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT DATE_FORMAT(MAX(updated_at), '%Y-%m-%d %H:%i:%s.%f') FROM {SCHEMA}.orders"
        )
        (value,) = cursor.fetchone()
    return str(value)


def server_pid(conn: Any) -> int:
    """mariadbd's pid (one process, many threads), or 0 when it isn't readable here."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT @@pid_file")
        (pid_file,) = cursor.fetchone()
    try:
        pid = int(Path(pid_file).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return pid if Path(f"/proc/{pid}").exists() else 0


def connectorx_available() -> str | None:
    """Why ConnectorX can't run here, or None when it can."""
    if importlib.util.find_spec("connectorx") is None:
        return "connectorx is not installed (`pip install connectorx`)"
    return None


def run_mysql(
    rows: int,
    repeats: int,
    workdir: Path,
    worker: Callable[..., Any],
    engines: list[str],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Start MariaDB, load `rows`, run S1 first, S1 and S0 for every engine; results and facts."""
    from incremental_assets_tests.support.mariadb import mariadb_server

    missing = connectorx_available()
    engines = [e for e in ENGINES if e in engines or e == "connectorx"]
    if missing:
        engines = [e for e in engines if e != "connectorx"]
    results: list[dict[str, Any]] = []
    with mariadb_server() as server, ExitStack() as stack:
        conn = server.connect()
        stack.callback(conn.close)
        print(f"mysql: generating {rows:,} rows ...", flush=True)
        create_orders(conn, rows)
        with conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            (version,) = cursor.fetchone()
        url = f"mysql://{server.user}:{server.password}@{server.host}:{server.port}/{SCHEMA}"
        jdbc = {"url": server.jdbc_url(SCHEMA), "user": server.user, "password": server.password}
        pid = server_pid(conn)
        workers = {}
        for name in engines:  # ours: the jdbc:mysql source gives the sessions MariaDB's driver
            workers[name] = worker(name, workdir, url, pid, jdbc, None)
            stack.callback(workers[name].close)

        def step(scenario: str, op: str, since: str) -> None:
            for name, w in workers.items():
                outcome = w.run(op, since)
                outcome.update(scenario=scenario, engine=name)
                results.append(outcome)
                print(
                    f"  mysql {scenario} {name}: {outcome['wall']:.2f}s, {outcome['rows']} rows",
                    flush=True,
                )

        step("S1 first", "full", "")
        for _ in range(repeats):
            step("S1", "full", "")
        if "dlt" in workers:  # dlt's incremental pipeline needs its own first load
            workers["dlt"].run("incremental", "")
        since = newest(conn)
        for _ in range(repeats):
            step("S0", "incremental", since)
    facts = {"rows": rows, "server": f"MariaDB {version}", "connectorx": missing}
    return results, facts
