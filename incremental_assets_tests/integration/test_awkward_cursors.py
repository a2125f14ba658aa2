"""NULL cursors, text cursors in the database's collation, and rows dated in the future."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta

import pytest

from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.mariadb import Database
from incremental_assets_tests.support.postgres import Schema

DEFAULTS = {"name": "items", "mode": "append", "primary_key": ["id"], "transaction_cap": False}


def _ids(loads: Loads) -> list[int]:
    return [row[0] for row in loads.rows(["id"])]


@pytest.fixture
def with_nulls(db: SourceDb) -> SourceDb:
    db.execute("CREATE TABLE items (id int PRIMARY KEY, seq bigint)")
    db.execute("INSERT INTO items VALUES (1, 10), (2, 20), (3, NULL), (4, NULL), (5, NULL)")
    return db


def test_null_cursors_are_an_error_by_default_naming_the_count(
    loads: Loads,
    with_nulls: SourceDb,
) -> None:
    loads.configure(with_nulls, DEFAULTS, cursor="seq")
    run = loads.run()

    assert not run.success
    assert "Table 'items': 3 rows have a NULL cursor (seq)" in (run.failure or "")
    assert "null_cursor: include" in (run.failure or "")
    assert not (loads.lake_dir / "items").exists() or not list(
        (loads.lake_dir / "items").glob("part-*")
    )
    assert loads.metadata() == {}


def test_null_cursors_included_are_read_every_run_and_kept_once(
    loads: Loads,
    with_nulls: SourceDb,
) -> None:
    loads.configure(with_nulls, DEFAULTS, cursor="seq", null_cursor="include")
    first = loads.run()
    with_nulls.execute("INSERT INTO items VALUES (6, NULL), (7, 30)")
    second = loads.run()

    assert first.success and second.success, (first.failure, second.failure)
    quoted = '"seq"' if with_nulls.kind == "postgres" else "`seq`"
    assert first.metadata["extract_filter"] == f"({quoted} <= 20) OR {quoted} IS NULL"
    assert second.metadata["rows_written"] == 2
    assert _ids(loads) == [1, 2, 3, 4, 5, 6, 7]


def test_null_cursors_excluded_are_counted_and_left_out(loads: Loads, with_nulls: SourceDb) -> None:
    loads.configure(with_nulls, DEFAULTS, cursor="seq", null_cursor="exclude")
    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["null_cursor_rows"] == 3
    assert "3 rows with a NULL seq were left out" in run.metadata["warnings"]
    assert _ids(loads) == [1, 2]


def test_text_cursors_follow_the_database_collation(loads: Loads, pg: Schema) -> None:
    # In this ICU collation b < C, while Python (code points) puts 'C' before 'b'.
    pg.execute('CREATE TABLE items (id int PRIMARY KEY, code text COLLATE "en-x-icu" NOT NULL)')
    pg.execute("INSERT INTO items VALUES (1, 'a'), (2, 'b')")
    loads.configure(pg, DEFAULTS, cursor="code")
    assert loads.run().metadata["cursor"] == "b"
    pg.execute("INSERT INTO items VALUES (3, 'C')")

    second = loads.run()
    third = loads.run()

    assert second.metadata["cursor"] == "C"
    assert second.metadata["rows_written"] == 1
    # The row tied with the cursor is unchanged: the run proves it without reading it again.
    assert third.metadata["rows_extracted"] == 0
    assert third.metadata["spark"] == "not started (nothing new)"
    assert _ids(loads) == [1, 2, 3]


@contextmanager
def _backslashes_read_the_other_way(db: SourceDb) -> Iterator[None]:
    """New sessions take a backslash in a string literal the other way from the server's default.

    PostgreSQL's default is standard_conforming_strings (a backslash is itself); MySQL's and
    MariaDB's is an escape, unless the SQL mode has NO_BACKSLASH_ESCAPES.
    """
    if db.kind == "postgres":
        db.execute("ALTER ROLE CURRENT_USER SET standard_conforming_strings = off")
        try:
            yield
        finally:
            db.execute("ALTER ROLE CURRENT_USER RESET standard_conforming_strings")
    else:
        assert isinstance(db.handle, Database)
        with db.handle.sql_mode("NO_BACKSLASH_ESCAPES"):
            yield


@pytest.mark.parametrize("reading", ["default", "the_other_way"])
def test_a_text_cursor_with_backslashes_windows_exactly_however_the_server_reads_them(
    loads: Loads,
    db: SourceDb,
    reading: str,
) -> None:
    """A bound misread past newer rows lost them, in the Spark window and the no-JVM check.

    Escaping, 'a\\z' reads as 'az' (PostgreSQL); not escaping, 'a\\\\!' reads as 'a\\\\!' (MySQL).
    """
    binary = {"postgres": 'text COLLATE "C"', "mariadb": "varchar(20) COLLATE utf8mb4_bin"}
    db.execute(f"CREATE TABLE items (id int PRIMARY KEY, code {binary[db.kind]} NOT NULL)")
    loads.configure(db, DEFAULTS, cursor="code")
    # Each value is past the bound before it, and below it as the other reading would take it.
    codes = ["a\\!", 'a\\"', "a\\z", "a]"]
    runs = []
    with _backslashes_read_the_other_way(db) if reading == "the_other_way" else nullcontext():
        for id_, code in enumerate(codes, start=1):
            db.insert("items", [(id_, code)])
            runs.append(loads.run())

    for run in runs:
        assert run.success, run.failure
    lake = loads.rows(["id", "code"])
    assert lake == list(enumerate(codes, start=1))


@pytest.mark.parametrize("tolerance", ["0s", "36500d"])
def test_a_row_dated_far_in_the_future_does_not_hide_rows_written_later(
    loads: Loads,
    db: SourceDb,
    tolerance: str,
) -> None:
    now = datetime.now(UTC)
    db.execute("CREATE TABLE items (id int PRIMARY KEY, at {tstz})")
    future = now.replace(year=now.year + 10)
    db.execute(
        f"INSERT INTO items VALUES (1, {db.utc(now - timedelta(hours=1))}), (2, {db.utc(future)})"
    )
    loads.configure(db, DEFAULTS, cursor="at", future_tolerance=tolerance)
    first = loads.run()
    db.execute(f"INSERT INTO items VALUES (3, {db.utc(datetime.now(UTC))})")

    second = loads.run()

    assert first.success and second.success
    if tolerance == "36500d":
        assert _ids(loads) == [1, 2]  # the control: the cursor jumped ten years and hid row 3
        return
    assert "cursor_capped_at" in first.metadata
    assert first.metadata["cursor"] == first.metadata["cursor_capped_at"]
    assert _ids(loads) == [1, 2, 3]  # and the future row, re-read each run, is kept once
