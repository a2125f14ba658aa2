"""An Iceberg lake on an object store: `lake.path: s3://bucket/lake`, through Iceberg's S3FileIO,
against moto's S3 server on 127.0.0.1, with the catalog on SQLite or on the suite's PostgreSQL.

Every mode loads exactly; a run killed before its commit leaves nothing readers see and the next
run loads what it would have; of two overlapping runs (no lock exists on an object store) the
second to commit is refused; readers scanning while runs commit see whole snapshots only; and
maintenance expires snapshots, deleting their objects.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.cli import paused_run, write_cli_config
from incremental_assets_tests.support.orders import (
    ORDERS_TABLE,
    change_orders,
    create_orders,
    orders_held,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import ProjectBuilder, materialize, rows_by
from incremental_assets_tests.support.s3 import S3Server

TABLE = ORDERS_TABLE


def _change(pg: Schema, run: int) -> None:
    change_orders(pg, run, new=5, every=5, delete=True)


def _lake(s3: S3Server, tmp_path: Path, pg_catalog: str | None = None) -> dict[str, Any]:
    """A lake in a new bucket, its catalog SQLite on the local disk or, given, on PostgreSQL."""
    bucket = s3.bucket(f"lake-{uuid.uuid4().hex[:12]}")
    uri = pg_catalog or f"sqlite:///{tmp_path}/catalog.db"
    return {
        "path": f"{bucket}/lake",
        "format": "iceberg",
        "namespace": f"ns_{uuid.uuid4().hex[:8]}",
        "catalog": s3.catalog(type="sql", uri=uri),
    }


def _table(lake: dict[str, Any]) -> Any:
    from pyiceberg.catalog import load_catalog

    properties = dict(lake["catalog"])
    catalog = load_catalog("incremental_assets", **properties)
    return catalog.load_table(f"{lake['namespace']}.orders")


def _rows(lake: dict[str, Any]) -> list[tuple[Any, ...]]:
    return rows_by(_table(lake).scan().to_arrow(), ["id", "note"])


@pytest.mark.parametrize(
    ("mode", "catalog"),
    [("merge", "sqlite"), ("append", "sqlite"), ("full_refresh", "sqlite"), ("merge", "postgres")],
)
def test_every_mode_loads_a_lake_on_an_object_store_exactly(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    request: pytest.FixtureRequest,
    mode: str,
    catalog: str,
) -> None:
    create_orders(pg, 40)
    uri = request.getfixturevalue("pg_catalog") if catalog == "postgres" else None
    lake = _lake(s3, tmp_path, uri)
    table: dict[str, Any] = {**TABLE, "mode": mode}
    if mode == "full_refresh":
        table.pop("cursor")
    if mode == "merge":  # rows deleted at the source are removed too
        table |= {"deletes": "reconcile", "reconcile_every": 1}
    project = make_project(pg, table, lake=lake)
    for run in range(3):
        if run:
            _change(pg, run)
        result = materialize(project, "orders", instance, spark_resource)
        assert result.success, result.failure
        assert result.metadata["dagster/uri"] == f"{lake['path']}/orders"

    if mode == "append":
        held = rows_by(_table(lake).scan().to_arrow(), ["id", "note", "updated_at"])
        assert len(held) == len(set(held))
        latest = {row[0]: row[1] for row in held}
        assert {k: v for k, v in latest.items() if (k, v) in orders_held(pg)} == dict(
            orders_held(pg)
        )
    else:
        assert _rows(lake) == orders_held(pg)
    bucket = lake["path"].removeprefix("s3://").split("/")[0]
    keys = s3.keys(bucket, "lake/orders/")
    assert any(k.startswith("lake/orders/metadata/") for k in keys)
    assert any(k.startswith("lake/orders/data/") for k in keys)


@pytest.mark.xdist_group("connect")
def test_a_run_killed_before_its_commit_leaves_nothing_readers_see(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    connect: str,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path)
    table = {**TABLE, "mode": "merge", "deletes": "reconcile", "reconcile_every": 1}
    project = make_project(pg, table, lake=lake)
    assert materialize(project, "orders", instance, spark_resource).success
    before = _rows(lake)
    _change(pg, 1)
    process, _ = _paused(
        tmp_path, pg, connect, table, lake, Path(str(instance.root_directory)), "mid-commit"
    )
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)

    assert _rows(lake) == before
    after = materialize(project, "orders", instance, spark_resource)
    assert after.success, after.failure
    assert _rows(lake) == orders_held(pg)


@pytest.mark.xdist_group("connect")
def test_of_two_overlapping_runs_the_second_to_commit_is_refused(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    connect: str,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path)
    table = {**TABLE, "mode": "append"}
    project = make_project(pg, table, lake=lake)
    assert materialize(project, "orders", instance, spark_resource).success
    _change(pg, 1)
    process, marker = _paused(
        tmp_path, pg, connect, table, lake, Path(str(instance.root_directory)), "staged"
    )

    b = materialize(project, "orders", instance, spark_resource)
    marker.unlink()
    _, stderr = process.communicate(timeout=300)

    assert b.success, b.failure
    assert process.returncode != 0 and "Two runs of the table overlapped" in stderr
    held = rows_by(_table(lake).scan().to_arrow(), ["id", "note", "updated_at"])
    assert len(held) == len(set(held))  # the batch once


def test_readers_see_whole_snapshots_and_maintenance_expires_objects(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    create_orders(pg, 60)
    lake = {**_lake(s3, tmp_path), "keep_snapshots": 1, "keep_snapshots_for": "0s"}
    merge = {**TABLE, "mode": "merge", "deletes": "reconcile", "reconcile_every": 1}
    project = make_project(pg, merge, lake=lake)
    assert materialize(project, "orders", instance, spark_resource).success
    table = _table(lake)
    committed = {len(orders_held(pg))}
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(table.refresh().scan().to_arrow().num_rows)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for run in range(1, 4):
            _change(pg, run)
            result = materialize(project, "orders", instance, spark_resource)
            assert result.success, result.failure
            committed.add(result.metadata["dagster/row_count"])
            assert "expire: expired" in result.metadata["maintenance"]
    finally:
        done.set()
        reader.join()

    assert seen and set(seen) <= committed
    # The last run's snapshot, and the compaction snapshots after it (if it compacted): expired
    # down to the head the next run reads, never past it.
    kept = [s.snapshot_id for s in table.refresh().snapshots()]
    assert result.metadata["iceberg_snapshot_id"] in kept and len(kept) <= 4
    assert _rows(lake) == orders_held(pg)


def _paused(
    tmp_path: Path,
    pg: Schema,
    connect: str,
    table: dict[str, Any],
    lake: dict[str, Any],
    home: Path,
    point: str,
) -> tuple[Any, Path]:
    entry = {**table, "source": "shop", "table": f"{pg.name}.orders"}
    config = write_cli_config(tmp_path / "cli", {"shop": pg.source()}, [entry], connect, **lake)
    return paused_run(tmp_path, config, home, point)
