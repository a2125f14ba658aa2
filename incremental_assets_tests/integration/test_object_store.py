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

import pytest

from incremental_assets_tests.support.loads import ORDERS_APPEND, ORDERS_MERGE, Loads
from incremental_assets_tests.support.orders import change_orders, create_orders, orders_held
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import rows_by
from incremental_assets_tests.support.s3 import S3Server

# A merge table from which rows deleted at the source are removed too, at every run.
RECONCILED = {**ORDERS_MERGE, "deletes": "reconcile", "reconcile_every": 1}


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
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    request: pytest.FixtureRequest,
    mode: str,
    catalog: str,
) -> None:
    create_orders(pg, 40)
    uri = request.getfixturevalue("pg_catalog") if catalog == "postgres" else None
    lake = _lake(s3, tmp_path, uri)
    table: dict[str, Any] = {**ORDERS_APPEND, "mode": mode}
    if mode == "full_refresh":
        table.pop("cursor")
    if mode == "merge":
        table = RECONCILED
    loads.configure(pg, table, lake=lake)
    for run in range(3):
        if run:
            _change(pg, run)
        result = loads.run()
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
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    connect: str,
) -> None:
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path)
    loads.configure(pg, RECONCILED, lake=lake)
    assert loads.run().success
    before = _rows(lake)
    _change(pg, 1)
    process, _ = loads.paused_run("mid-commit", remote=connect)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)

    assert _rows(lake) == before
    after = loads.run()
    assert after.success, after.failure
    assert _rows(lake) == orders_held(pg)


@pytest.mark.xdist_group("connect")
def test_of_two_overlapping_runs_the_second_to_commit_is_refused(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    connect: str,
) -> None:
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path)
    loads.configure(pg, ORDERS_APPEND, lake=lake)
    assert loads.run().success
    _change(pg, 1)
    process, marker = loads.paused_run("staged", remote=connect)

    b = loads.run()
    marker.unlink()
    _, stderr = process.communicate(timeout=300)

    assert b.success, b.failure
    assert process.returncode != 0 and "Two runs of the table overlapped" in stderr
    held = rows_by(_table(lake).scan().to_arrow(), ["id", "note", "updated_at"])
    assert len(held) == len(set(held))  # the batch once


def test_readers_see_whole_snapshots_and_maintenance_expires_objects(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
) -> None:
    create_orders(pg, 60)
    lake = {**_lake(s3, tmp_path), "keep_snapshots": 1, "keep_snapshots_for": "0s"}
    loads.configure(pg, RECONCILED, lake=lake)
    assert loads.run().success
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
            result = loads.run()
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
