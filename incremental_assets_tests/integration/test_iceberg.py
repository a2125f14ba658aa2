"""The Iceberg lake: one snapshot per materialization, written by Spark.

Readers that scan while runs commit see whole snapshots only; each materialization names the
snapshot any engine can read the table as of; the catalog can be the suite's PostgreSQL; a plain
Parquet table converts in place. (Two writers, expiry and the rest of the commit's guarantees:
test_iceberg_commits.py.)
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from incremental_assets import cli
from incremental_assets.cli import lake as lake_cli
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.orders import (
    ICEBERG,
    change_orders,
    create_orders,
    orders_held,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import rows_by


def test_readers_see_only_whole_snapshots_while_runs_commit(loads: Loads, pg: Schema) -> None:
    """PyIceberg and Polars scan in a loop while merges rewrite buckets: a half-seen commit would
    show a bucket's old and new rows together (more rows than any snapshot held)."""
    create_orders(pg, 300)
    loads.configure(pg, ORDERS_MERGE, lake=ICEBERG, buckets=4, bucket_rows=50)
    assert loads.run().success
    table = loads.iceberg_table()
    committed = {len(orders_held(pg))}
    seen: list[tuple[str, int]] = []
    done = threading.Event()

    def read(how: str) -> None:
        while not done.is_set():
            table.refresh()
            if how == "pyiceberg":
                seen.append((how, table.scan().to_arrow().num_rows))
            else:
                seen.append((how, pl.scan_iceberg(table).select(pl.len()).collect().item()))
            # A breath between scans: back to back, the readers held the GIL the runs (in this
            # process) need, and each run took three times as long; still about ten scans a
            # second each, hundreds while the runs commit.
            done.wait(0.05)

    readers = [threading.Thread(target=read, args=(how,)) for how in ("pyiceberg", "polars")]
    for reader in readers:
        reader.start()
    try:
        for run in range(1, 5):
            change_orders(pg, run)
            result = loads.run()
            assert result.success, result.failure
            committed.add(result.metadata["dagster/row_count"])
    finally:
        done.set()
        for reader in readers:
            reader.join()

    assert {how for how, _ in seen} == {"pyiceberg", "polars"}
    assert {count for _, count in seen} <= committed, (sorted(committed), seen)
    assert loads.rows(["id", "note"]) == orders_held(pg)


def test_each_materialization_names_the_snapshot_that_reads_as_its_table(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_orders(pg, 50)
    project = loads.configure(pg, ORDERS_MERGE, lake=ICEBERG)
    expected: dict[int, list[tuple[Any, ...]]] = {}
    for run in range(3):
        if run:
            change_orders(pg, run)
        result = loads.run()
        assert result.success, result.failure
        assert result.metadata["dagster/table_name"] == "incremental_assets.orders"
        assert result.metadata["dagster/uri"] == str(tmp_path / "lake" / "orders")
        expected[result.metadata["iceberg_snapshot_id"]] = orders_held(pg)

    table = loads.iceberg_table()
    assert len(expected) == 3
    for snapshot, rows in expected.items():
        as_of = table.scan(snapshot_id=snapshot).to_arrow()
        assert rows_by(as_of, ["id", "note"]) == rows
        summary = table.snapshot_by_id(snapshot).summary
        assert summary["incremental-assets.txn"] and summary["incremental-assets.cursor"]
    # The CLI lists the snapshot of the last run, and of every run, newest first.
    monkeypatch.setenv("DAGSTER_HOME", str(loads.home))
    capsys.readouterr()
    assert cli.main(["--config", project.path, "status", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert cli.main(["--config", project.path, "status", "--history", "orders", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert row["iceberg_snapshot_id"] == list(expected)[-1]
    assert row["lake_table"] == "incremental_assets.orders"
    assert [r["iceberg_snapshot_id"] for r in history] == list(expected)[::-1]
    assert {r["event"] for r in history} == {"run"}
    # A cursor set by hand is in the history, where it happened.
    again = ["cursor", "set", "orders", str(row["cursor"]), "--reason", "replay"]
    assert cli.main(["--config", project.path, *again]) == 0
    capsys.readouterr()
    assert cli.main(["--config", project.path, "status", "--history", "orders", "--json"]) == 0
    history = json.loads(capsys.readouterr().out)
    assert [(r["event"], r["cursor"]) for r in history[:2]] == [
        ("cursor set", row["cursor"]),
        ("run", row["cursor"]),
    ]


def test_the_catalog_can_be_the_suites_postgresql(
    loads: Loads,
    pg: Schema,
    pg_catalog: str,
) -> None:
    create_orders(pg, 20)
    uri = pg_catalog
    catalog = {"type": "sql", "uri": uri, "init_catalog_tables": "true"}
    loads.configure(pg, ORDERS_MERGE, lake={**ICEBERG, "catalog": catalog, "namespace": pg.name})
    assert loads.run().success
    change_orders(pg, 1)
    second = loads.run()
    assert second.success, second.failure
    assert second.metadata["dagster/table_name"] == f"{pg.name}.orders"

    table = SqlCatalog("incremental_assets", uri=uri).load_table(f"{pg.name}.orders")
    assert rows_by(table.scan().to_arrow(), ["id", "note"]) == orders_held(pg)
    assert not (loads.lake_dir / "_catalog.db").exists()


@pytest.mark.parametrize("killed_before_recording", [False, True])
def test_a_plain_parquet_table_converts_in_place_keeping_its_cursor_and_rows(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    killed_before_recording: bool,
) -> None:
    """Killed after the snapshot landed and before the instance recorded it, the command run
    again records that conversion instead of refusing a table that exists already."""
    create_orders(pg, 100)
    loads.configure(pg, ORDERS_MERGE)
    assert loads.run().success
    change_orders(pg, 1)
    assert loads.run().success
    before = loads.rows(["id", "note", "_batch"])
    cursor = loads.metadata()["cursor"]
    iceberg = loads.configure(pg, ORDERS_MERGE, lake=ICEBERG)
    monkeypatch.setenv("DAGSTER_HOME", str(loads.home))
    command = ["--config", iceberg.path, "lake", "convert", "orders", "--reason", "test"]
    if killed_before_recording:
        with monkeypatch.context() as killed:
            killed.setattr(lake_cli, "record_cursor_override", _killed)
            with pytest.raises(KeyboardInterrupt):
                cli.main(command)
        assert loads.metadata()["cursor"] == cursor

    code = cli.main(command)

    assert code == 0
    table = loads.iceberg_table()
    assert rows_by(table.scan().to_arrow(), ["id", "note", "_batch"]) == before
    assert not (loads.lake_dir / "orders" / "_head").exists()
    change_orders(pg, 2, new=1)
    after = loads.run()
    assert after.success, after.failure
    assert after.metadata["previous_cursor"] == cursor
    assert after.metadata["full_refresh"] is False
    assert after.metadata["rows_inserted"] == 1
    assert loads.rows(["id", "note"]) == orders_held(pg)


def _killed(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


def test_maintenance_compacts_a_merge_table_whose_deletes_pile_up_without_changing_a_row(
    loads: Loads,
    pg: Schema,
) -> None:
    """Merge-on-read writes delete files; once they remove a tenth of the rows read, the run's
    maintenance rewrites those data files (a `replace` snapshot: same rows), and the next runs
    still add to the table incrementally."""
    create_orders(pg, 200)
    loads.configure(pg, ORDERS_MERGE, lake=ICEBERG)
    assert loads.run().success
    done = []
    for run in range(1, 5):
        change_orders(pg, run, new=2, every=4)  # a quarter of the rows each run: uniform
        result = loads.run()
        assert result.success, result.failure
        assert result.metadata["full_refresh"] is False
        done.append(result.metadata.get("maintenance") or "")

    assert any(what.startswith("compact:") for what in done), done
    table = loads.iceberg_table()
    assert rows_by(table.scan().to_arrow(), ["id", "note"]) == orders_held(pg)
    current = table.current_snapshot()
    assert int(current.summary["total-position-deletes"]) < 0.1 * int(
        current.summary["total-records"]
    )
