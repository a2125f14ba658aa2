"""End to end against real PostgreSQL, real Spark and a Dagster instance on disk."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow.compute as pc
import pytest

from incremental_assets.lake import open_lake
from incremental_assets_tests.support.loads import ORDERS_APPEND, ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import rows_by

ORDERS = """
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL,
    updated_at timestamptz NOT NULL
)
"""


def _seed(pg: Schema, ids: range, at: str = "2025-01-01 00:00:00+00") -> None:
    pg.execute(
        f"INSERT INTO orders SELECT i, i * 1.25, 'placed', "
        f"TIMESTAMPTZ '{at}' + i * INTERVAL '1 second' "
        f"FROM generate_series({ids.start}, {ids.stop - 1}) AS i"
    )


def _source_rows(pg: Schema) -> list[tuple[Any, ...]]:
    return sorted(pg.query("SELECT id, amount, status, updated_at FROM orders"))


def test_first_run_extracts_every_row_and_second_run_only_the_delta(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 101))
    loads.configure(pg, ORDERS_MERGE)

    first = loads.run()
    assert first.success, first.failure
    assert first.metadata["rows_extracted"] == 100
    assert first.metadata["previous_cursor"] is None
    assert first.metadata["cursor"] == "2025-01-01T00:01:40.000000+00:00"

    _seed(pg, range(101, 111), at="2025-01-02 00:00:00+00")
    pg.execute(
        "UPDATE orders SET status = 'paid', updated_at = TIMESTAMPTZ '2025-01-03 00:00:00+00' "
        "WHERE id <= 5"
    )
    second = loads.run()

    assert second.success, second.failure
    assert second.metadata["previous_cursor"] == first.metadata["cursor"]
    assert second.metadata["cursor"] == "2025-01-03T00:00:00.000000+00:00"
    # 10 inserted, 5 updated, and the one row tied with the previous cursor read again.
    assert second.metadata["rows_extracted"] == 16
    assert (second.metadata["rows_inserted"], second.metadata["rows_updated"]) == (10, 5)
    lake = loads.lake()
    assert rows_by(lake, ["id", "amount", "status", "updated_at"]) == _source_rows(pg)
    assert second.metadata["dagster/row_count"] == 110


def test_append_keeps_every_version_exactly_once(loads: Loads, pg: Schema) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 51))
    loads.configure(pg, ORDERS_APPEND)
    assert loads.run().success
    pg.execute(
        "UPDATE orders SET status = 'paid', updated_at = TIMESTAMPTZ '2025-02-01 00:00:00+00' "
        "WHERE id <= 10"
    )
    _seed(pg, range(51, 56), at="2025-02-01 00:00:00+00")

    second = loads.run()

    assert second.success, second.failure
    assert second.metadata["rows_written"] == 15
    lake = loads.lake()
    versions = rows_by(lake, ["id", "updated_at"])
    assert len(versions) == len(set(versions)) == 65  # 50 originals + 10 new versions + 5 new rows
    latest = {row[0]: row[1] for row in versions}
    assert sorted(latest.items()) == sorted(pg.query("SELECT id, updated_at FROM orders"))
    assert sorted(set(pc.unique(lake["_batch"]).to_pylist())) == [1, 2]


def test_the_window_predicate_is_what_reaches_the_server(
    loads: Loads,
    pg: Schema,
    postgres: Any,
) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 2001))
    loads.configure(
        pg,
        ORDERS_MERGE,
        source={"rows_per_partition": 500, "max_partitions": 4},
        start="2025-01-01T00:00:10Z",
    )
    run = loads.run()
    assert run.success, run.failure

    window = run.metadata["extract_filter"]
    assert window == (
        "\"updated_at\" >= TIMESTAMPTZ '2025-01-01 00:00:10.000000+00:00' AND "
        "\"updated_at\" <= TIMESTAMPTZ '2025-01-01 00:33:20.000000+00:00'"
    )
    log = postgres.log_text().splitlines()
    reads = [
        line
        for line in log
        if f"FROM {pg.name}.orders WHERE {window}) AS src" in line and "1=0" not in line
    ]
    # Four parallel partitions of the key, every one with the same window, pushed down verbatim.
    assert len(reads) == 4, "\n".join(line for line in log if pg.name in line)
    assert sum('"id" IS NULL' in line for line in reads) == 1
    bounds = [
        line
        for line in log
        if pg.name in line and 'max("updated_at")' in line and "1=0" not in line
    ]
    assert (
        len(bounds) == 1
        and "\"updated_at\" >= TIMESTAMPTZ '2025-01-01 00:00:10.000000+00:00'" in bounds[0]
    )
    assert run.metadata["rows_extracted"] == 1991


@pytest.mark.parametrize(
    ("column_type", "values", "cursors", "literals"),
    [
        (
            "bigint",
            ["9007199254740993", "9007199254740995"],
            ["9007199254740993", "9007199254740995"],
            ["9007199254740993", "9007199254740995"],
        ),
        (
            "numeric(30, 10)",
            ["12345678901234567890.0000000001", "12345678901234567890.0000000003"],
            ["12345678901234567890.0000000001", "12345678901234567890.0000000003"],
            ["12345678901234567890.0000000001", "12345678901234567890.0000000003"],
        ),
        (
            "date",
            ["DATE '0001-01-01'", "DATE '2024-02-29'"],
            ["0001-01-01", "2024-02-29"],
            ["DATE '0001-01-01'", "DATE '2024-02-29'"],
        ),
        (
            "timestamp",
            ["TIMESTAMP '2025-03-30 02:30:00.000001'", "TIMESTAMP '2025-10-26 02:59:59.999999'"],
            ["2025-03-30T02:30:00.000001", "2025-10-26T02:59:59.999999"],
            ["TIMESTAMP '2025-03-30 02:30:00.000001'", "TIMESTAMP '2025-10-26 02:59:59.999999'"],
        ),
        (
            "timestamptz",
            [
                "TIMESTAMPTZ '2025-01-01 00:00:00.000001+05:30'",
                "TIMESTAMPTZ '2025-06-30 23:59:59.999999-07'",
            ],
            ["2024-12-31T18:30:00.000001+00:00", "2025-07-01T06:59:59.999999+00:00"],
            [
                "TIMESTAMPTZ '2024-12-31 18:30:00.000001+00:00'",
                "TIMESTAMPTZ '2025-07-01 06:59:59.999999+00:00'",
            ],
        ),
    ],
)
def test_every_cursor_type_round_trips_exactly(
    loads: Loads,
    pg: Schema,
    column_type: str,
    values: list[str],
    cursors: list[str],
    literals: list[str],
) -> None:
    pg.execute(f"CREATE TABLE orders (id int PRIMARY KEY, c {column_type})")
    pg.execute(f"INSERT INTO orders VALUES (1, {values[0]})")
    loads.configure(pg, ORDERS_APPEND, cursor="c")
    first = loads.run()
    assert first.success, first.failure
    assert first.metadata["cursor"] == cursors[0]
    pg.execute(f"INSERT INTO orders VALUES (2, {values[1]})")

    run = loads.run()

    assert run.success, run.failure
    # The stored text comes back as the exact lower bound: any drift would show in the SQL.
    assert run.metadata["previous_cursor"] == cursors[0]
    assert run.metadata["extract_filter"] == f'"c" >= {literals[0]} AND "c" <= {literals[1]}'
    assert run.metadata["cursor"] == cursors[1]
    assert (
        run.metadata["rows_extracted"] == 2
    )  # the row on the lower bound, read again, and the new one
    assert run.metadata["rows_written"] == 1
    lake = loads.lake()
    source = dict(pg.query("SELECT id, c FROM orders"))
    in_lake = dict(rows_by(lake, ["id", "c"]))
    if column_type == "timestamp":
        source = {k: v.replace(tzinfo=None) for k, v in source.items()}
        in_lake = {k: v.replace(tzinfo=None) for k, v in in_lake.items()}
    assert in_lake == source


def test_an_empty_delta_records_a_materialization_with_the_cursor_unchanged(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 11))
    loads.configure(pg, "orders", mode="append", cursor="updated_at")
    first = loads.run()
    files = loads.files()

    second = loads.run()

    assert second.success, second.failure
    assert second.metadata["cursor"] == first.metadata["cursor"]
    assert second.metadata["rows_written"] == 0
    assert second.run_id != first.run_id
    assert loads.files() == files


def test_a_failed_write_leaves_the_cursor_and_the_lake_untouched(loads: Loads, pg: Schema) -> None:
    pg.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric, updated_at timestamptz)"
    )
    pg.execute(
        "INSERT INTO orders SELECT i, i, TIMESTAMPTZ '2025-01-01 00:00:00+00' "
        "+ i * INTERVAL '1 minute' FROM generate_series(1, 20) i"
    )
    loads.configure(pg, ORDERS_MERGE)
    first = loads.run()
    assert first.success, first.failure
    before = loads.lake()
    files = loads.files()
    # A value Spark can't hold as decimal(38,18) makes the job fail half way through the write.
    pg.execute("INSERT INTO orders VALUES (21, 1e30, TIMESTAMPTZ '2025-02-01 00:00:00+00')")

    failed = loads.run()

    assert not failed.success
    assert "Table 'orders'" in (failed.failure or "")
    assert loads.metadata()["cursor"] == first.metadata["cursor"]
    assert loads.files() == files
    assert loads.lake().equals(before)
    assert not list((loads.lake_dir / "orders" / "_staging").glob("*"))


def test_full_refresh_on_demand_replaces_the_table_and_the_cursor(loads: Loads, pg: Schema) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 21))
    loads.configure(pg, ORDERS_APPEND)
    assert loads.run().success
    # Rows an incremental run can never see: deleted, and changed without moving the cursor.
    pg.execute("DELETE FROM orders WHERE id > 15")
    pg.execute("UPDATE orders SET status = 'fixed' WHERE id = 1")

    refresh = loads.run(full_refresh=True)

    assert refresh.success, refresh.failure
    assert refresh.metadata["full_refresh"] is True
    assert refresh.metadata["rows_extracted"] == 15
    assert refresh.metadata["cursor"] == "2025-01-01T00:00:15.000000+00:00"
    lake = loads.lake()
    assert rows_by(lake, ["id", "amount", "status", "updated_at"]) == _source_rows(pg)


def test_metadata_carries_every_documented_key(loads: Loads, pg: Schema) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 6))
    loads.configure(pg, ORDERS_MERGE)
    run = loads.run()
    keys = {
        "cursor",
        "previous_cursor",
        "cursor_column",
        "mode",
        "full_refresh",
        "rows_extracted",
        "rows_written",
        "rows_inserted",
        "rows_updated",
        "rows_deleted",
        "dagster/row_count",
        "dagster/column_schema",
        "dagster/uri",
        "extract_filter",
        "extract_seconds",
        "write_seconds",
    }
    assert keys <= set(run.metadata)
    assert run.metadata["cursor_column"] == "updated_at"
    assert run.metadata["mode"] == "merge"
    assert run.metadata["dagster/uri"] == str(loads.lake_dir / "orders")
    columns = [c.name for c in run.metadata["dagster/column_schema"].columns]
    assert columns == ["id", "amount", "status", "updated_at", "_batch"]


def test_a_second_writer_of_the_same_table_fails_clearly_and_moves_nothing(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 11))
    project = loads.configure(
        pg, "orders", lake={"lock_timeout": "1s"}, mode="append", cursor="updated_at"
    )
    table = open_lake(project.lake, "orders")

    with table.lock("orders", "run 1234-other", timedelta(seconds=1)):
        blocked = loads.run()

    assert not blocked.success
    assert "Table 'orders': another run is writing" in (blocked.failure or "")
    assert "run 1234-other" in (blocked.failure or "")
    assert loads.metadata() == {}
    assert loads.run().success


def test_a_full_refresh_table_is_replaced_by_a_new_snapshot_on_every_run(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 21))
    loads.configure(
        pg, "orders", mode="full_refresh", cursor="updated_at", start="2025-01-01T00:00:03Z"
    )
    first = loads.run()
    assert first.success, first.failure
    pg.execute("DELETE FROM orders WHERE id IN (5, 20)")
    pg.execute("UPDATE orders SET status = 'fixed' WHERE id = 6")  # the cursor doesn't move
    _seed(pg, range(21, 23), at="2025-01-02 00:00:00+00")

    second = loads.run()

    assert second.success, second.failure
    assert (second.metadata["full_refresh"], second.metadata["rows_extracted"]) == (True, 18)
    assert second.metadata["previous_cursor"] == first.metadata["cursor"]
    assert second.metadata["cursor"] == "2025-01-02T00:00:22.000000+00:00"
    assert second.metadata["extract_filter"].startswith(
        "\"updated_at\" >= TIMESTAMPTZ '2025-01-01 00:00:03.000000+00:00' AND"
    )
    lake = loads.lake()
    in_window = [row for row in _source_rows(pg) if row[0] >= 3]
    assert rows_by(lake, ["id", "amount", "status", "updated_at"]) == in_window


@pytest.mark.parametrize(("before", "after"), [("append", "merge"), ("merge", "append")])
def test_changing_the_mode_needs_a_full_refresh(
    loads: Loads,
    pg: Schema,
    before: str,
    after: str,
) -> None:
    pg.execute(ORDERS)
    _seed(pg, range(1, 11))
    options: dict[str, Any] = {"cursor": "updated_at", "primary_key": ["id"]}
    loads.configure(pg, "orders", mode=before, **options)
    first = loads.run()
    assert first.success, first.failure
    pg.execute(
        "UPDATE orders SET status = 'paid', updated_at = TIMESTAMPTZ '2025-02-01 00:00:00+00' "
        "WHERE id <= 3"
    )
    loads.configure(pg, "orders", mode=after, **options)

    refused = loads.run()

    assert not refused.success
    written = "merge" if before == "merge" else "append (or full_refresh)"
    assert (
        f"Table 'orders', field 'mode': the lake table {loads.lake_dir / 'orders'} was written "
        f"in {written} mode"
    ) in (refused.failure or "")
    assert f"but the table is now mode {after}" in (refused.failure or "")
    assert "run a full refresh once (asset config full_refresh: true" in (refused.failure or "")
    assert loads.metadata()["cursor"] == first.metadata["cursor"]
    rebuilt = loads.run(full_refresh=True)
    assert rebuilt.success, rebuilt.failure
    pg.execute(
        "UPDATE orders SET status = 'shipped', updated_at = TIMESTAMPTZ '2025-03-01 00:00:00+00' "
        "WHERE id = 1"
    )
    assert loads.run().success
    versions = loads.rows(["id", "status"])
    if after == "merge":
        assert versions == [(r[0], r[2]) for r in _source_rows(pg)]
    else:  # the snapshot, then the new version of order 1
        assert versions == sorted([(r[0], r[2]) for r in _source_rows(pg)] + [(1, "paid")])


def test_a_text_cursor_in_the_databases_collation_keeps_the_later_update(
    loads: Loads,
    pg: Schema,
) -> None:
    # ICU's English order puts 'C' after 'b'; Spark compares bytes, where 'C' < 'b'.
    pg.execute('CREATE TABLE orders (id int PRIMARY KEY, c text COLLATE "en-x-icu", v text)')
    pg.execute("INSERT INTO orders VALUES (1, 'a', 'one'), (2, 'b', 'two')")
    loads.configure(pg, ORDERS_MERGE, cursor="c")
    first = loads.run()
    assert first.success, first.failure
    pg.execute("UPDATE orders SET c = 'C', v = 'two, updated' WHERE id = 2")

    second = loads.run()

    assert second.success, second.failure
    assert (second.metadata["previous_cursor"], second.metadata["cursor"]) == ("b", "C")
    assert (second.metadata["rows_updated"], second.metadata["rows_inserted"]) == (1, 0)
    lake = loads.lake()
    assert rows_by(lake, ["id", "c", "v"]) == sorted(pg.query("SELECT id, c, v FROM orders"))


def test_a_merge_run_that_changes_nothing_rewrites_nothing(loads: Loads, pg: Schema) -> None:
    # The last three rows share the newest cursor value: every run reads them again.
    _merged_in_buckets_of_25(loads, pg, "least(i, 97)")
    files = loads.files()

    idle = loads.run()

    assert idle.success, idle.failure
    counts = ("rows_extracted", "rows_written", "files_written", "rows_rewritten", "rows_updated")
    # Nothing past the cursor and the tied rows unchanged: proven without Spark, nothing read.
    assert [idle.metadata[key] for key in counts] == [0, 0, 0, 0, 0]
    assert idle.metadata["spark"] == "not started (nothing new)"
    assert idle.metadata["dagster/row_count"] == 99
    assert loads.files() == files
    # A real change after that lands, and rewrites only its own bucket (keys 75 to 99).
    pg.execute(
        "UPDATE orders SET v = 'v2', updated_at = TIMESTAMPTZ '2025-02-01 00:00:00+00' "
        "WHERE id = 99"
    )

    changed = loads.run()

    assert changed.success, changed.failure
    assert [changed.metadata[key] for key in counts] == [3, 1, 1, 25, 1]
    lake = loads.lake()
    assert rows_by(lake, ["id", "v", "updated_at"]) == sorted(
        pg.query("SELECT id, v, updated_at FROM orders")
    )
    assert len(set(loads.files()) - set(files)) == 1


def test_rows_read_again_only_touch_their_bucket_when_they_changed(
    loads: Loads,
    pg: Schema,
) -> None:
    # Keys 1 and 2 (bucket 0-24) and 99 (bucket 75-99) share the newest cursor value.
    _merged_in_buckets_of_25(loads, pg, "CASE WHEN i <= 2 THEN 99 ELSE i END")
    before = set(loads.files())
    later = "TIMESTAMPTZ '2025-01-01 00:10:00+00'"
    pg.execute(
        f"INSERT INTO orders VALUES (100, 'v1', {later})",
        f"UPDATE orders SET v = 'v2', updated_at = {later} WHERE id = 60",
    )

    run = loads.run()

    assert run.success, run.failure
    # Read: the three tied rows again, 60 and 100. Rewritten: bucket 50-74 (25 rows) and the new
    # bucket 100-124 (1 row); the tied rows' buckets are left alone.
    counts = ("rows_extracted", "rows_inserted", "rows_updated", "rows_rewritten")
    assert [run.metadata[key] for key in counts] == [5, 1, 1, 26]
    assert len(before - set(loads.files())) == 1
    # A re-read row that did change (its cursor kept) still lands, in its own bucket.
    pg.execute("UPDATE orders SET v = 'v3' WHERE id = 60")
    pg.execute(f"UPDATE orders SET updated_at = {later} WHERE id = 1")

    again = loads.run()

    assert again.success, again.failure
    assert [again.metadata[key] for key in counts] == [3, 0, 2, 49]
    lake = loads.lake()
    assert rows_by(lake, ["id", "v", "updated_at"]) == sorted(
        pg.query("SELECT id, v, updated_at FROM orders")
    )


def _merged_in_buckets_of_25(loads: Loads, pg: Schema, seconds: str) -> None:
    """Keys 1 to 99 loaded in merge mode into range buckets of 25 keys; `seconds` of `i` dates
    them."""
    pg.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, v text, updated_at timestamptz)",
        "INSERT INTO orders SELECT i, 'v1', TIMESTAMPTZ '2025-01-01 00:00:00+00' + "
        f"({seconds}) * INTERVAL '1 s' FROM generate_series(1, 99) i",
    )
    loads.configure(pg, ORDERS_MERGE, bucket_rows=25)
    assert loads.run().success
