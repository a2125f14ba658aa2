"""Rows that commit late: `updated_at DEFAULT now()` is the transaction's start, not its commit.

A writer opens a transaction and inserts (its rows are stamped with the transaction's start);
meanwhile another writer commits newer rows and a load runs. When the first transaction finally
commits, its rows sit below the loaded cursor. Each test drives the writers over separate
connections, as production databases see them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from incremental_assets.config.rules import TimeLimits
from incremental_assets.cursor import CursorType
from incremental_assets.sources import open_source
from incremental_assets.sources.base import Cursor, FreezeRequest
from incremental_assets.sources.jdbc import JdbcSource
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.mariadb import Database, MariaDbServer
from incremental_assets_tests.support.postgres import (
    PostgresServer,
    Schema,
    standby_server,
    wait_for,
)
from incremental_assets_tests.support.project import ProjectBuilder

TABLE = (
    "CREATE TABLE events (id bigint PRIMARY KEY, note text, "
    "updated_at timestamptz NOT NULL DEFAULT now())"
)


DB_TABLE = "CREATE TABLE events (id bigint PRIMARY KEY, note {text}, updated_at {tstz_default})"


DEFAULTS = {"name": "events", "mode": "append", "cursor": "updated_at", "primary_key": ["id"]}


def _open_late_writer(db: SourceDb) -> Any:
    """A transaction that inserts now and commits later; its row is stamped with its start."""
    late = db.connect(autocommit=False)
    with closing(late.cursor()) as cursor:
        cursor.execute(f"INSERT INTO {db.qualified('events')} (id, note) VALUES (1000, 'late')")
    time.sleep(0.05)
    return late


def _insert_on_time(db: SourceDb, ids: range) -> None:
    db.execute(
        "INSERT INTO events (id, note) VALUES " + ", ".join(f"({i}, 'on time')" for i in ids)
    )


def _ids(loads: Loads) -> list[int]:
    return [row[0] for row in loads.rows(["id"])]


@pytest.mark.parametrize("cap", [True, False])
def test_the_transaction_cap_keeps_the_cursor_below_open_transactions(
    loads: Loads,
    db: SourceDb,
    cap: bool,
) -> None:
    db.execute(DB_TABLE)
    loads.configure(db, DEFAULTS, transaction_cap=cap)
    late = _open_late_writer(db)
    _insert_on_time(db, range(1, 6))  # committed, newer

    first = loads.run()
    late.commit()
    late.close()
    db.outlast_cap_margin()
    second = loads.run()

    assert first.success and second.success, (first.failure, second.failure)
    if cap:
        assert first.metadata["transaction_cap_applied"] is True
        assert "open since" in first.metadata["transaction_cap"]
        assert (
            first.metadata["rows_written"] == 0
        )  # everything newer than the open transaction waits
        assert _ids(loads) == [1, 2, 3, 4, 5, 1000]
        assert second.metadata["transaction_cap_applied"] is False
    else:
        # The control: without the cap the late row is below the cursor and is never read.
        assert "transaction_cap" not in first.metadata
        assert _ids(loads) == [1, 2, 3, 4, 5]


def test_a_lookback_window_catches_late_rows_and_append_keeps_each_once(
    loads: Loads,
    db: SourceDb,
) -> None:
    db.execute(DB_TABLE)
    loads.configure(db, DEFAULTS, transaction_cap=False, lookback="10m")
    late = _open_late_writer(db)
    _insert_on_time(db, range(1, 6))
    assert loads.run().success
    late.commit()
    late.close()

    second = loads.run()
    third = loads.run()

    assert second.success and third.success
    assert second.metadata["rows_extracted"] == 6  # the lookback re-read the five loaded rows
    assert second.metadata["rows_written"] == 1  # and kept only the late one
    assert third.metadata["rows_written"] == 0
    assert _ids(loads) == [1, 2, 3, 4, 5, 1000]


@contextmanager
def _mysql_reader(my: Database) -> Iterator[dict[str, str]]:
    """A user that may read the database but not see other sessions' transactions (no PROCESS)."""
    user = f"reader_{my.name}"
    my.execute(
        f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'",
        f"GRANT SELECT ON {my.name}.* TO '{user}'@'%'",
    )
    try:
        yield {"user": user, "password": "pw"}
    finally:
        my.execute(f"DROP USER '{user}'@'%'")


@contextmanager
def _read_only(my: Database) -> Iterator[None]:
    """The server read-only, as a replica is."""
    my.execute("SET GLOBAL read_only = 1")
    try:
        yield
    finally:
        my.execute("SET GLOBAL read_only = 0")


@pytest.mark.parametrize("blind_by", ["no_process_privilege", "a_read_only_server"])
def test_a_mysql_source_that_cannot_see_open_transactions_needs_a_lookback(
    loads: Loads,
    my: Database,
    mariadb: MariaDbServer,
    blind_by: str,
) -> None:
    db = SourceDb("mariadb", my, mariadb)
    db.execute(DB_TABLE)
    _insert_on_time(db, range(1, 6))
    with ExitStack() as stack:
        user = (
            stack.enter_context(_mysql_reader(my)) if blind_by == "no_process_privilege" else None
        )
        if blind_by == "a_read_only_server":
            stack.enter_context(_read_only(my))
        loads.configure(db, DEFAULTS, source=user)
        refused = loads.run()
        loads.configure(db, DEFAULTS, source=user, lookback="10m")
        loaded = loads.run()

    expected = "PROCESS privilege" if blind_by == "no_process_privilege" else "read-only"
    assert not refused.success
    failure = refused.failure or ""
    assert "Table 'events'" in failure and expected in failure and "lookback" in failure
    assert "Traceback" not in failure
    assert loaded.success, loaded.failure
    assert expected in loaded.metadata["transaction_cap"]
    assert expected in loaded.metadata["warnings"]
    assert _ids(loads) == [1, 2, 3, 4, 5]


@contextmanager
def _reader_role(pg: Schema) -> Iterator[dict[str, str]]:
    """A role that may read the table but not other roles' sessions in pg_stat_activity."""
    role = f"reader_{pg.name}"
    pg.execute(
        f"CREATE ROLE {role} LOGIN PASSWORD 'pw'",
        f"GRANT USAGE ON SCHEMA {pg.name} TO {role}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg.name} TO {role}",
    )
    try:
        yield {"user": role, "password": "pw"}
    finally:
        pg.execute(f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def test_the_cap_says_when_the_role_cannot_see_other_sessions(
    loads: Loads,
    pg: Schema,
    postgres: PostgresServer,
) -> None:
    pg.execute(TABLE)
    with _reader_role(pg) as reader:
        loads.configure(pg, DEFAULTS, source=reader)
        late = _open_late_writer(
            SourceDb("postgres", pg, postgres)
        )  # a superuser session the reader can't inspect
        run = loads.run()
        late.rollback()
        late.close()

    assert run.success, run.failure
    assert run.metadata["transaction_cap"].startswith("partial (")
    assert "GRANT pg_read_all_stats" in run.metadata["warnings"]


@contextmanager
def _autovacuum_worker(pg: Schema) -> Iterator[int]:
    """An autovacuum worker busy in this database (slowed right down), and its pid."""
    pg.execute(
        "ALTER SYSTEM SET autovacuum_naptime = 1",
        "SELECT pg_reload_conf()",
        "CREATE TABLE dead (id int, pad text) WITH (autovacuum_vacuum_threshold = 0, "
        "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_cost_delay = 100, "
        "autovacuum_vacuum_cost_limit = 1)",
        "INSERT INTO dead SELECT i, repeat('x', 100) FROM generate_series(1, 50000) i",
        "DELETE FROM dead WHERE id % 2 = 0",
    )
    workers = (
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' "
        "AND datname = current_database()"
    )
    try:
        wait_for(lambda: pg.query(workers), timeout=60)
        yield pg.query(workers)[0][0]
    finally:
        pg.execute(
            "ALTER TABLE dead SET (autovacuum_enabled = false)",
            "ALTER SYSTEM RESET autovacuum_naptime",
            "SELECT pg_reload_conf()",
            f"SELECT pg_terminate_backend(pid) FROM ({workers}) AS w",
        )


def test_autovacuum_workers_do_not_count_as_hidden_sessions(loads: Loads, pg: Schema) -> None:
    """Without pg_read_all_stats an autovacuum worker looks like another role's session."""
    pg.execute(TABLE, "INSERT INTO events (id, note) VALUES (1, 'on time')")
    with _reader_role(pg) as reader, _autovacuum_worker(pg) as worker:
        loads.configure(pg, DEFAULTS, source=reader)
        run = loads.run()
        still_there = pg.query(f"SELECT count(*) FROM pg_stat_activity WHERE pid = {worker}")

    assert still_there == [(1,)]  # the worker was there all through the run
    assert run.success, run.failure
    assert run.metadata["transaction_cap"] == "no other transaction open"
    assert "pg_read_all_stats" not in run.metadata.get("warnings", "")


def _begin_writer(
    postgres: PostgresServer, pg: Schema, key: int
) -> tuple[psycopg.Connection, datetime]:
    """An open transaction that has inserted one row, and the start it stamped the row with."""
    writer = postgres.connect(autocommit=False)
    started = writer.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    writer.execute(f"INSERT INTO {pg.name}.events (id, note) VALUES ({key}, 'writer')")
    return writer, started


@pytest.mark.parametrize("between", ["commits", "begins"])
def test_the_cap_holds_for_a_transaction_that_commits_or_begins_between_its_two_reads(
    make_project: ProjectBuilder,
    pg: Schema,
    postgres: PostgresServer,
    spark: SparkSession,
    between: str,
) -> None:
    """Open transactions are read first, the bounds second; a writer acts in between.

    commits: open at the first read, committed before the second. Had both been one statement,
    its snapshot could have missed the rows and its transaction list the writer.
    begins: started after the first read, still open at the second, while a later writer
    commits newer rows; the bound must stay below the clock of the first read.
    """
    pg.execute(
        TABLE,
        "INSERT INTO events (id, note, updated_at) VALUES (1, 'old', now() - INTERVAL '1 hour')",
    )
    source = open_source(spark, make_project(pg, DEFAULTS).table("events"))
    assert isinstance(source, JdbcSource)
    request = FreezeRequest(
        cursor=Cursor("updated_at", CursorType.TIMESTAMPTZ),
        lower=None,
        timezone="UTC",
        limits=TimeLimits(future_tolerance=timedelta(0), transaction_cap=True),
    )
    if between == "commits":
        writer, started = _begin_writer(postgres, pg, 1000)
        open_transactions = source.open_transactions(request)
        writer.commit()
    else:
        open_transactions = source.open_transactions(request)
        writer, started = _begin_writer(postgres, pg, 1000)
    pg.execute("INSERT INTO events (id, note) VALUES (2, 'newer, committed')")

    bounds = source.freeze_below(request, open_transactions)
    writer.commit()
    writer.close()

    assert bounds.upper is not None and bounds.upper < started  # type: ignore[operator]
    assert bounds.rows == 1
    assert bounds.transaction is not None
    assert bounds.transaction.rows_held_back == (2 if between == "commits" else 1)


def test_a_row_dated_in_the_future_is_loaded_under_the_cap_and_the_cursor_stays_below_it(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(
        TABLE,
        "INSERT INTO events VALUES (1, 'past', now() - INTERVAL '1 hour'), "
        "(2, 'future', now() + INTERVAL '10 years')",
    )
    loads.configure(pg, DEFAULTS)

    first = loads.run()
    pg.execute("INSERT INTO events (id, note) VALUES (3, 'later')")
    second = loads.run()

    assert first.success and second.success, (first.failure, second.failure)
    assert first.metadata["rows_written"] == 2
    future = pg.query("SELECT updated_at FROM events WHERE id = 2")[0][0]
    assert datetime.fromisoformat(first.metadata["cursor"]) < future
    assert _ids(loads) == [1, 2, 3]  # the future row was re-read, and kept once


def test_sessions_that_report_no_transactions_hold_the_cursor_below_their_connection(
    loads: Loads,
    pg: Schema,
    postgres: PostgresServer,
) -> None:
    """`track_activities = off` hides a session's transaction from pg_stat_activity."""
    pg.execute(TABLE, "INSERT INTO events (id, note) VALUES (1, 'before')")
    loads.configure(pg, DEFAULTS)
    assert loads.run().success
    late = postgres.connect(autocommit=True)
    late.execute("SET track_activities = off")
    late.autocommit = False
    late.execute(f"INSERT INTO {pg.name}.events (id, note) VALUES (1000, 'late')")
    late.execute("SELECT pg_sleep(0.05)")
    pg.execute("INSERT INTO events (id, note) SELECT i, 'on time' FROM generate_series(2, 5) i")

    first = loads.run()
    late.commit()
    late.close()
    second = loads.run()

    assert first.success and second.success, (first.failure, second.failure)
    assert first.metadata["rows_written"] == 0
    assert first.metadata["transaction_cap_applied"] is True
    assert "track_activities = off" in first.metadata["warnings"]
    assert _ids(loads) == [1, 2, 3, 4, 5, 1000]


@contextmanager
def _prepared(postgres: PostgresServer, pg: Schema) -> Iterator[str]:
    """A prepared (two-phase) transaction that inserted one row; rolled back unless committed."""
    name = f"late_{pg.name}"
    with postgres.connect(autocommit=False) as writer:
        writer.execute(f"INSERT INTO {pg.name}.events (id, note) VALUES (1000, 'prepared')")
        writer.execute(f"PREPARE TRANSACTION '{name}'")
    try:
        yield name
    finally:
        with postgres.connect() as conn:
            if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (name,)).fetchone():
                conn.execute(f"ROLLBACK PREPARED '{name}'")


def test_prepared_transactions_need_a_lookback_and_are_caught_by_it(
    loads: Loads,
    pg: Schema,
    postgres: PostgresServer,
) -> None:
    pg.execute(TABLE)
    with _prepared(postgres, pg) as name:
        pg.execute("INSERT INTO events (id, note) SELECT i, 'on time' FROM generate_series(1, 5) i")
        loads.configure(pg, DEFAULTS)
        refused = loads.run()
        loads.configure(pg, DEFAULTS, lookback="10m")
        with_lookback = loads.run()
        pg.execute(f"COMMIT PREPARED '{name}'")
    after_commit = loads.run()

    assert not refused.success
    assert "Table 'events'" in (refused.failure or "")
    assert "prepared transactions" in (refused.failure or "")
    assert "lookback" in (refused.failure or "")
    assert with_lookback.success and after_commit.success
    assert "prepared transactions" in with_lookback.metadata["warnings"]
    assert _ids(loads) == [1, 2, 3, 4, 5, 1000]


def test_a_hot_standby_needs_a_lookback_because_the_primarys_transactions_are_invisible(
    loads: Loads,
    pg: Schema,
    postgres: PostgresServer,
) -> None:
    pg.execute(TABLE, "INSERT INTO events (id, note) SELECT i, 'x' FROM generate_series(1, 5) i")
    with standby_server(postgres) as standby:
        with standby.connect() as replica:
            wait_for(
                lambda: (
                    replica.execute(f"SELECT count(*) FROM {pg.name}.events").fetchone() == (5,)
                ),
                timeout=30,
            )
        url = {"url": f"jdbc:postgresql://127.0.0.1:{standby.port}/{standby.dbname}"}
        loads.configure(pg, DEFAULTS, source=url)
        refused = loads.run()
        loads.configure(pg, DEFAULTS, source=url, lookback="10m")
        loaded = loads.run()

    assert not refused.success
    assert "hot standby" in (refused.failure or "") and "lookback" in (refused.failure or "")
    assert loaded.success, loaded.failure
    assert "hot standby" in loaded.metadata["transaction_cap"]
    assert "hot standby" in loaded.metadata["warnings"]
    assert _ids(loads) == [1, 2, 3, 4, 5]
