"""Per-table options against real PostgreSQL: lag, soft deletes, queries, no cursor, bad columns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import ITEMS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema


def test_safety_lag_leaves_recent_rows_for_the_next_run(loads: Loads, db: SourceDb) -> None:
    now = datetime.now(UTC)
    ages = [timedelta(hours=2), timedelta(minutes=10), timedelta(0)]
    db.execute("CREATE TABLE items (id int PRIMARY KEY, at {tstz})")
    db.execute(
        "INSERT INTO items VALUES "
        + ", ".join(f"({i}, {db.utc(now - age)})" for i, age in enumerate(ages, 1))
    )
    loads.configure(db, "items", mode="append", cursor="at", safety_lag="30m")

    run = loads.run()

    assert run.success, run.failure
    assert loads.rows(["id"]) == [(1,)]
    assert run.metadata["cursor"] == (now - ages[0]).isoformat(timespec="microseconds")


def test_merge_removes_rows_whose_delete_column_is_set(loads: Loads, pg: Schema) -> None:
    pg.execute(
        "CREATE TABLE items (id int PRIMARY KEY, v text, at int NOT NULL, deleted_at timestamptz)"
    )
    pg.execute("INSERT INTO items SELECT i, 'v', i, NULL FROM generate_series(1, 10) i")
    loads.configure(pg, ITEMS_MERGE, delete_column="deleted_at")
    assert loads.run().success
    pg.execute("UPDATE items SET deleted_at = now(), at = 20 WHERE id IN (2, 3)")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["rows_deleted"] == 2
    assert [r[0] for r in loads.rows(["id"])] == [
        1,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
    ]
    assert run.metadata["dagster/row_count"] == 8


def test_a_query_source_is_windowed_on_its_output_columns(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, price numeric(10, 2), at bigint NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i, i FROM generate_series(1, 10) i")
    query = f"SELECT id, price * 2 AS doubled, at AS seq FROM {pg.name}.items WHERE id % 2 = 0"
    loads.configure(pg, "items", query=query, mode="append", cursor="seq", primary_key=["id"])
    assert loads.run().success
    pg.execute("INSERT INTO items VALUES (12, 6, 12), (13, 6, 13)")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["extract_filter"] == '"seq" >= 10 AND "seq" <= 12'
    assert run.metadata["rows_written"] == 1
    assert loads.rows(["id"])[-1] == (12,)


def test_a_table_without_a_cursor_is_fully_refreshed_every_run(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE items (code text PRIMARY KEY, label text)")
    pg.execute("INSERT INTO items VALUES ('fr', 'France'), ('de', 'Germany')")
    loads.configure(pg, "items", mode="full_refresh")
    assert loads.run().success
    pg.execute("DELETE FROM items WHERE code = 'de'")
    pg.execute("INSERT INTO items VALUES ('it', 'Italy')")

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["full_refresh"] is True
    assert run.metadata["cursor"] is None
    assert loads.rows(["code"]) == [("fr",), ("it",)]


def test_a_column_that_cannot_be_a_cursor_is_a_configuration_error(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, score double precision)")
    loads.configure(pg, "items", mode="append", cursor="score")

    run = loads.run()

    assert not run.success
    assert run.failure is not None
    assert "Table 'items', field 'cursor': column 'score' is double" in run.failure
    assert "can't serve as an exact cursor" in run.failure


def test_a_missing_column_names_the_table_the_field_and_the_columns_there_are(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, at int)")
    loads.configure(pg, ITEMS_MERGE, primary_key=["item_id"])

    run = loads.run()

    assert not run.success
    assert (
        "Table 'items', field 'primary_key': column 'item_id' is not in "
        f"{pg.name}.items (columns: id, at)" in (run.failure or "")
    )


@pytest.mark.parametrize(
    ("column_type", "step"), [("timestamptz", "INTERVAL '1 minute'"), ("date", "1")]
)
def test_without_an_integer_key_the_read_is_split_on_the_cursor(
    loads: Loads,
    pg: Schema,
    postgres: Any,
    column_type: str,
    step: str,
) -> None:
    pg.execute(
        "CREATE TABLE items (code uuid PRIMARY KEY DEFAULT gen_random_uuid(), "
        f"at {column_type} NOT NULL)"
    )
    start = (
        "TIMESTAMPTZ '2025-01-01 00:00:00+00'"
        if column_type == "timestamptz"
        else "DATE '2020-01-01'"
    )
    pg.execute(f"INSERT INTO items (at) SELECT {start} + i * {step} FROM generate_series(1, 400) i")
    loads.configure(
        pg,
        ITEMS_MERGE,
        source={"rows_per_partition": 100, "max_partitions": 4},
        primary_key=["code"],
        transaction_cap=False,
    )
    run = loads.run()

    assert run.success, run.failure
    reads = [
        line
        for line in postgres.log_text().splitlines()
        if f"FROM {pg.name}.items WHERE" in line and "AS src" in line and "1=0" not in line
    ]
    assert len(reads) == 4
    lake = loads.rows(["code", "at"])
    assert lake == sorted(pg.query("SELECT code::text, at FROM items"))


def test_each_run_logs_its_window_counts_and_durations(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i FROM generate_series(1, 30) i")
    loads.configure(pg, "items", mode="append", cursor="at")
    run = loads.run()

    messages = [
        entry.user_message for entry in loads.instance.all_logs(run.run_id) if entry.user_message
    ]
    assert any(
        'items: window "at" <= 30; 30 rows up to the frozen bound, 1 on the bound itself' in m
        for m in messages
    )
    assert any(
        "items: 30 rows read, 30 written, 30 in the lake; extract " in m and "s, write " in m
        for m in messages
    )
