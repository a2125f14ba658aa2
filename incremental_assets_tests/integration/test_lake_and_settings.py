"""A run checks that its lake and its settings are the ones its stored cursor describes.

The lake table has an identity and a head (its last commit); every materialization records both
and the settings that decide what the lake holds. A run, with Spark or without it, refuses a lake
that isn't that table at that commit, and a settings change goes through the run with Spark.

A lake that isn't the table, and what a new delete column removes, are checked on both lake
formats; the rest on plain Parquet only, for the suite's time: changed settings and skipped
checks are decided from the settings and the data files' names, which both formats share.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from incremental_assets.checks import NOTHING_WRITTEN_WHY
from incremental_assets.definitions import build_definitions
from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.loads import ORDERS_APPEND, ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import read_lake

ORDERS = (
    "CREATE TABLE orders (id bigint PRIMARY KEY, note text, deleted boolean NOT NULL DEFAULT "
    "false, updated_at timestamptz NOT NULL)"
)
ROWS = (
    "INSERT INTO orders (id, note, updated_at) SELECT i, 'old', "
    "TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 minute' FROM generate_series(1, {n}) i"
)
NEW_ROW = "INSERT INTO orders (id, note, updated_at) VALUES (1001, 'new', '2025-02-01 00:00:00+00')"


def _count(pg: Schema) -> int:
    return int(pg.query("SELECT count(*) FROM orders")[0][0])


def _refused_cleanly(loads: Loads, before: dict[str, object], failure: str | None) -> None:
    assert loads.metadata() == before  # nothing recorded
    text = failure or ""
    assert "Table 'orders'" in text and "the stored cursor" in text
    assert "incremental-assets run orders --full" in text
    assert "\n\n" not in text.strip()


@pytest.mark.parametrize("new_row", [False, True], ids=["nothing new", "a new row"])
@pytest.mark.parametrize("event", ["deleted", "moved", "restored"])
def test_a_lake_that_is_not_the_stored_cursors_table_is_refused_on_both_paths(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    lake_format: LakeFormat,
    event: str,
    new_row: bool,
) -> None:
    """Deleted: the folder is gone. Moved: `lake.path` now names another place. Restored: the
    folder is an older copy. Each used to be refilled with the delta only (0 or 2 of 201 rows),
    with nothing new by the run without Spark, with a new row by the run with it."""
    pg.execute(ORDERS, ROWS.format(n=200))
    loads.configure(pg, ORDERS_MERGE)
    lake_dir = loads.lake_dir / "orders"
    assert loads.run().success
    copy = tmp_path / "older"
    shutil.copytree(lake_dir, copy)
    pg.execute("UPDATE orders SET note = 'second', updated_at = '2025-01-20' WHERE id = 7")
    assert loads.run().success
    before = loads.metadata()
    if event == "deleted":
        shutil.rmtree(lake_dir)
    elif event == "moved":
        loads.configure(pg, ORDERS_MERGE, lake={"path": str(tmp_path / "elsewhere")})
    else:
        shutil.rmtree(lake_dir)
        shutil.copytree(copy, lake_dir)
    if new_row:
        pg.execute(NEW_ROW)

    refused = loads.run()

    assert not refused.success
    _refused_cleanly(loads, before, refused.failure)
    assert str(before["cursor"]) in (refused.failure or "")
    rebuilt = loads.run(full_refresh=True)
    assert rebuilt.success, rebuilt.failure
    lake = tmp_path / ("elsewhere" if event == "moved" else "lake")
    assert len(read_lake(lake, "orders")) == _count(pg)


def test_data_files_removed_behind_the_lakes_back_are_refused(
    loads: Loads,
    pg: Schema,
) -> None:
    """A storage rule deleting one bucket's file: the head names the files its commit left.

    Plain Parquet only: an Iceberg table's files are those its manifests name, and a run doesn't
    look for them on disk (docs/semantics.md)."""
    pg.execute(ORDERS, ROWS.format(n=200))
    loads.configure(pg, ORDERS_MERGE, buckets=4, bucket_rows=50)
    assert loads.run().success
    before = loads.metadata()
    next((loads.lake_dir / "orders").glob("part-*.parquet")).unlink()

    refused = loads.run()

    assert not refused.success
    _refused_cleanly(loads, before, refused.failure)
    assert "data files" in (refused.failure or "")


@pytest.mark.parametrize("new_row", [False, True], ids=["nothing new", "a new row"])
def test_append_turned_merge_is_refused_whether_or_not_a_row_is_new(
    loads: Loads,
    pg: Schema,
    new_row: bool,
) -> None:
    """55 versions of 50 keys in an append lake: the run without Spark used to record a success
    in merge mode, and `primary_key_unique` to pass over no file."""
    pg.execute(ORDERS, ROWS.format(n=50))
    loads.configure(pg, ORDERS_APPEND)
    assert loads.run().success
    pg.execute("UPDATE orders SET note = 'v2', updated_at = '2025-01-10' WHERE id <= 5")
    assert loads.run().success
    assert len(loads.lake()) == 55
    before = loads.metadata()
    loads.configure(pg, ORDERS_MERGE)
    if new_row:
        pg.execute(NEW_ROW)

    refused = loads.run()

    assert not refused.success
    assert loads.metadata() == before
    assert "field 'mode'" in (refused.failure or "") and "--full" in (refused.failure or "")


def test_a_run_that_wrote_nothing_leaves_the_key_check_unrun_and_says_so(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(ORDERS, ROWS.format(n=20))
    loads.configure(pg, ORDERS_MERGE)
    first = loads.run()
    assert first.success

    second = loads.run()

    assert second.success and second.metadata["spark"] == "not started (nothing new)"
    assert "primary_key_unique: this run wrote no file" in second.metadata["checks_not_run"]
    evaluations = [
        e.asset_check_evaluation_data.check_name
        for e in _run_events(loads.instance, second.run_id)
        if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ]
    assert evaluations == ["cursor_not_backwards"]
    # Dagster shows the check skipped; its page says why (the check's description).
    key = dg.AssetCheckKey(dg.AssetKey("orders"), "primary_key_unique")
    record = loads.instance.get_latest_asset_check_evaluation_record(key)
    assert record is not None and record.run_id == second.run_id
    assert record.status.value == "PLANNED"  # never evaluated in a run that succeeded
    checked = build_definitions(loads.project).resolve_assets_def(key.asset_key)
    (spec,) = [spec for spec in checked.check_specs if spec.key == key]
    assert NOTHING_WRITTEN_WHY in (spec.description or "")


def _run_events(instance: dg.DagsterInstance, run_id: str) -> list[dg.DagsterEvent]:
    return [
        entry.dagster_event
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is not None
    ]


def test_a_new_delete_column_removes_the_rows_it_flags_by_reading_the_table_whole(
    loads: Loads,
    pg: Schema,
    lake_format: LakeFormat,
) -> None:
    """Rows flagged before `delete_column` was set were kept as live rows; with it set, the lake
    must not hold them, whether or not they change again."""
    pg.execute(ORDERS, ROWS.format(n=20))
    pg.execute("UPDATE orders SET deleted = true WHERE id <= 3")
    loads.configure(pg, ORDERS_MERGE)
    assert loads.run().success
    assert len(loads.lake()) == 20

    loads.configure(pg, ORDERS_MERGE, delete_column="deleted")
    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["full_refresh"] is True
    assert "delete_column" in run.metadata["settings_changed"]
    assert "delete_column changed" in run.metadata["warnings"]
    ids = [r[0] for r in loads.rows(["id"])]
    assert ids == list(range(4, 21))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"source": {"properties": {"ApplicationName": "mine"}}}, "sets ApplicationName"),
        ({"cursor": {"column": "updated_at", "type": "integer"}}, "field 'cursor.type'"),
    ],
    ids=["a pinned session setting", "a declared cursor type the column doesn't have"],
)
def test_what_a_run_with_spark_refuses_a_run_with_nothing_new_refuses_too(
    loads: Loads,
    pg: Schema,
    change: dict[str, object],
    reason: str,
) -> None:
    """Nothing is new, so the run would otherwise succeed without Spark and record a success."""
    pg.execute(ORDERS, ROWS.format(n=20))
    loads.configure(pg, ORDERS_MERGE)
    assert loads.run().success
    assert loads.run().metadata["spark"] == "not started (nothing new)"
    before = loads.metadata()
    loads.configure(pg, ORDERS_MERGE, **change)  # type: ignore[arg-type]

    refused = loads.run()

    assert not refused.success
    assert reason in (refused.failure or "")
    assert loads.metadata() == before
