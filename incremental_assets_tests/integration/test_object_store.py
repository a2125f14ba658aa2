"""An Iceberg lake on an object store: `lake.path: s3://bucket/lake`, through Iceberg's S3FileIO,
against moto's S3 server on 127.0.0.1, with the catalog on SQLite or on the suite's PostgreSQL.

Every mode loads exactly; a run killed before its commit leaves nothing readers see and the next
run loads what it would have; of two overlapping runs (no lock exists on an object store) the
second to commit is refused; readers scanning while runs commit see whole snapshots only;
maintenance expires snapshots, deleting their objects; and the orphan sweep lists the table's
objects through Iceberg's own FileIO, as it lists a lake's files on a local disk; and a
`capture: log` table takes each change once across a kill after its commit and compaction.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from incremental_assets.cursor import parse_lsn
from incremental_assets.lake import open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.iceberg.maintenance import (
    ORPHAN_AGE,
    ORPHANS_SWEPT,
    Policy,
    Target,
    maintain,
)
from incremental_assets.lake.iceberg.table import now
from incremental_assets.lake.lock import LOCK
from incremental_assets_tests.support.cli import materializations
from incremental_assets_tests.support.loads import ORDERS_APPEND, ORDERS_MERGE, Loads
from incremental_assets_tests.support.log_capture import DURABLE, LOGGED, drop_slot, slot_of
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


# The shipped pool would keep the second run waiting for the first, paused here: two instances (or
# another engine) are what overlap.
@pytest.mark.pools_off
@pytest.mark.xdist_group("connect")
@pytest.mark.parametrize(
    ("point", "refusal"),
    [
        ("staged", "Two runs of the table overlapped"),
        ("committed", "another run committed to the lake after this run's commit"),
    ],
)
def test_of_two_overlapping_runs_the_second_to_commit_is_refused(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    s3: S3Server,
    connect: str,
    point: str,
    refusal: str,
) -> None:
    """Paused after its commit, the first run is overtaken by the second's: it records nothing,
    and the next run goes on from the second's record."""
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path)
    loads.configure(pg, ORDERS_APPEND, lake=lake)
    assert loads.run().success
    _change(pg, 1)
    process, marker = loads.paused_run(point, remote=connect)

    b = loads.run()
    marker.unlink()
    _, stderr = process.communicate(timeout=300)
    _change(pg, 2)
    after = loads.run()

    assert b.success, b.failure
    assert process.returncode != 0 and refusal in stderr, stderr[-3000:]
    assert after.success, after.failure
    held = rows_by(_table(lake).scan().to_arrow(), ["id", "note", "updated_at"])
    assert len(held) == len(set(held))  # each batch once


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
            # A breath between scans: back to back, the reader (and moto's server, both in this
            # process) held the GIL the runs need; still many scans while each run commits.
            done.wait(0.05)

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


@pytest.mark.parametrize("storage", ["object store", "local disk"])
def test_the_orphan_sweep_removes_only_old_orphans_wherever_the_lake_is(
    loads: Loads, tmp_path: Path, pg: Schema, s3: S3Server, storage: str
) -> None:
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path) if storage == "object store" else {"format": "iceberg"}
    loads.configure(pg, RECONCILED, lake=lake)
    assert loads.run().success
    iceberg = open_lake(loads.project.lake, "orders")
    assert isinstance(iceberg, IcebergLake)
    files = _TableFiles(iceberg.uri, s3)
    files.put("data/orphan-of-a-killed-writer.parquet")
    # Past the age limit: the orphan, and every file the run wrote, which a snapshot names.
    files.age(ORPHAN_AGE + timedelta(days=1))
    files.put("data/orphan-or-a-live-writers.parquet")
    state = iceberg.state()
    assert state is not None
    policy = Policy(keep_snapshots=100, keep_snapshots_for=timedelta(days=1))
    target = Target(iceberg.catalog.name, iceberg.procedure_table(), iceberg.reference())
    spark = iceberg.session(loads.spark_resource.spark_session)

    done = maintain(spark, target, state, ["orphans"], policy, now())

    assert done.done == {"orphans": "removed 1 orphan files"}
    names = files.names()
    assert "data/orphan-of-a-killed-writer.parquet" not in names
    assert "data/orphan-or-a-live-writers.parquet" in names  # younger than the age limit
    if iceberg.local:
        assert LOCK in names  # a hidden file, which Iceberg never lists
    swept = iceberg.state()
    assert swept is not None and ORPHANS_SWEPT in swept.properties
    _change(pg, 1)
    after = loads.run()
    assert after.success, after.failure
    held = spark.table(iceberg.reference()).select("id", "note").collect()
    assert sorted(tuple(row) for row in held) == orders_held(pg)


class _TableFiles:
    """The files in a table's folder, on the local disk or in a bucket of moto's S3 server."""

    def __init__(self, uri: str, s3: S3Server) -> None:
        self.uri, self.s3 = uri, s3
        self.bucket, _, self.prefix = uri.removeprefix("s3://").partition("/")

    def put(self, name: str) -> None:
        if "://" not in self.uri:
            (Path(self.uri) / name).write_bytes(b"no snapshot names this")
        else:
            self.s3.client().put_object(
                Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=b"no snapshot names this"
            )

    def names(self) -> set[str]:
        if "://" not in self.uri:
            root = Path(self.uri)
            return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
        return {k.removeprefix(f"{self.prefix}/") for k in self.s3.keys(self.bucket, self.prefix)}

    def age(self, by: timedelta) -> None:
        """Every file made `by` older. S3 has no call that sets an object's time: moto's server
        runs in this process, and its objects are changed where it keeps them."""
        then = datetime.now(UTC) - by
        if "://" not in self.uri:
            for path in Path(self.uri).rglob("*"):
                os.utime(path, (then.timestamp(), then.timestamp()))
            return
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        bucket = s3_backends[DEFAULT_ACCOUNT_ID]["global"].get_bucket(self.bucket)
        for key in bucket.keys.values():
            if key.name.startswith(f"{self.prefix}/"):
                key.last_modified = then.replace(tzinfo=None)  # moto keeps naive UTC


def _logged_orders(pg: Schema, loads: Loads, lake: dict[str, Any], mode: str = "merge") -> str:
    """A `capture: log` table of 40 rows on `lake`, loaded once: its slot."""
    pg.execute(
        DURABLE,
        "CREATE TABLE orders (id bigint PRIMARY KEY, note text)",
        "INSERT INTO orders SELECT i, 'n' || i FROM generate_series(1, 40) i",
    )
    loads.configure(pg, {**LOGGED, "name": "orders", "mode": mode}, lake=lake)
    assert loads.run().success
    return slot_of(loads, "orders")


@pytest.mark.xdist_group("connect")
def test_a_log_table_on_an_object_store_takes_each_change_once_across_a_kill_and_compaction(
    loads: Loads, tmp_path: Path, pg: Schema, s3: S3Server, connect: str
) -> None:
    """`capture: log` into a lake on S3: a run killed after its commit, before its record, then
    compaction, then the next run: every change once, the slot's position recorded."""
    lake = _lake(s3, tmp_path)
    slot = _logged_orders(pg, loads, lake)
    try:
        pg.execute(
            DURABLE,
            "UPDATE orders SET note = 'x' WHERE id <= 5",
            "DELETE FROM orders WHERE id > 35",
            "INSERT INTO orders VALUES (41, 'new')",
        )
        process, _ = loads.paused_run("committed", remote=connect)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        assert _rows(lake) == orders_held(pg)  # committed, not recorded
        loads.compact()
        pg.execute(DURABLE, "UPDATE orders SET note = 'y' WHERE id = 41")

        rerun = loads.run()

        assert rerun.success, rerun.failure
        assert _rows(lake) == orders_held(pg)
        assert parse_lsn(rerun.metadata["cursor"]) > 0
    finally:
        drop_slot(pg, slot)


# Two instances' runs of a log table on an object store (no lock, no pool between them), the
# first paused where a second writer hurts most: after its commit, before its record. The run
# overtaken after its commit records nothing (it used to record after the other run, and the
# table was refused until a full refresh). The second to commit from the same snapshot is
# refused whatever the capture (the cursor table's test above).
@pytest.mark.pools_off
@pytest.mark.xdist_group("connect")
@pytest.mark.parametrize("mode", ["merge", "append"])
def test_two_overlapping_runs_of_a_log_table_take_each_change_once(
    loads: Loads, tmp_path: Path, pg: Schema, s3: S3Server, connect: str, mode: str
) -> None:
    lake = _lake(s3, tmp_path)
    slot = _logged_orders(pg, loads, lake, mode)
    try:
        pg.execute(
            DURABLE,
            "UPDATE orders SET note = 'x' WHERE id <= 5",
            "DELETE FROM orders WHERE id = 40",
        )
        first, marker = loads.paused_run("committed", remote=connect)
        pg.execute(DURABLE, "INSERT INTO orders VALUES (41, 'new')")
        second = loads.run()
        marker.unlink()
        _, stderr = first.communicate(timeout=300)
        pg.execute(DURABLE, "UPDATE orders SET note = 'y' WHERE id = 41")

        after = loads.run()

        assert second.success, second.failure
        overtaken = "another run committed to the lake after this run's commit"
        assert first.returncode != 0 and overtaken in stderr, stderr[-3000:]
        assert after.success, after.failure
        assert after.metadata["log_changes"] == 1
        logged = _table(lake).scan().to_arrow().to_pylist()
        if mode == "merge":
            assert _rows(lake) == orders_held(pg)
        else:  # the first load's 40 rows, then each of the 8 changes once
            changes = [(r["change_lsn"], r["change_op"], r["id"]) for r in logged]
            assert len(changes) == len(set(changes)) == 48
    finally:
        drop_slot(pg, slot)


def _catalog_unreadable(catalog: Path) -> dict[Path, bytes]:
    """The SQLite catalog's files garbled in place, as a catalog that stops answering: what they
    held, to put back."""
    files = [
        catalog,
        catalog.with_name(f"{catalog.name}-wal"),
        catalog.with_name(f"{catalog.name}-shm"),
    ]
    saved = {f: f.read_bytes() for f in files if f.exists()}
    for f in saved:
        with f.open("r+b") as file:
            file.write(b"\xffnot a database" * 8)
    return saved


# What happens between a run's commit and its record must not make a committed run look failed:
# compaction by another process (a snapshot that is no run's commit), or the catalog not
# answering as the run checks no other run committed after it (the check read the lake and
# failed the run, saying nothing was written).
@pytest.mark.xdist_group("connect")
@pytest.mark.parametrize("meanwhile", ["compaction", "catalog not answering"])
def test_a_run_paused_after_its_commit_records_it_whatever_happens_meanwhile(
    loads: Loads, tmp_path: Path, pg: Schema, s3: S3Server, connect: str, meanwhile: str
) -> None:
    create_orders(pg, 40)
    lake = _lake(s3, tmp_path)
    loads.configure(pg, ORDERS_APPEND, lake=lake)
    for run in range(3):
        if run:
            _change(pg, run)
        assert loads.run().success
    _change(pg, 3)
    process, marker = loads.paused_run("committed", remote=connect)
    saved: dict[Path, bytes] = {}
    if meanwhile == "compaction":
        compacted = loads.compact()
        assert not compacted.startswith("compact: 0 data"), compacted
    else:
        saved = _catalog_unreadable(tmp_path / "catalog.db")
    try:
        marker.unlink()
        _, stderr = process.communicate(timeout=300)
    finally:
        for f, content in saved.items():
            f.write_bytes(content)

    assert process.returncode == 0, stderr[-3000:]
    if saved:
        assert "could not read the lake's last commit" in stderr
    assert len(materializations(loads.home, "orders")) == 4
    _change(pg, 4)
    after = loads.run()
    assert after.success, after.failure
    held = rows_by(_table(lake).scan().to_arrow(), ["id", "note", "updated_at"])
    assert len(held) == len(set(held))


# A run that committed nothing makes no check as it records (no read of the lake on the no-JVM
# path): overtaken by one that committed, its record comes last, and the next run takes the
# commit after it for an unrecorded one and repeats it, every change once.
@pytest.mark.pools_off
@pytest.mark.xdist_group("connect")
def test_a_log_run_that_found_nothing_overtaken_by_one_that_committed_loses_nothing(
    loads: Loads, tmp_path: Path, pg: Schema, s3: S3Server, connect: str
) -> None:
    lake = _lake(s3, tmp_path)
    slot = _logged_orders(pg, loads, lake)
    try:
        first, marker = loads.paused_run("committed", remote=connect)
        pg.execute(
            DURABLE, "INSERT INTO orders VALUES (41, 'new')", "DELETE FROM orders WHERE id = 3"
        )
        second = loads.run()
        marker.unlink()
        _, stderr = first.communicate(timeout=300)
        pg.execute(DURABLE, "UPDATE orders SET note = 'y' WHERE id = 41")

        after = loads.run()

        assert second.success, second.failure
        assert first.returncode == 0, stderr[-3000:]
        assert after.success, after.failure
        assert _rows(lake) == orders_held(pg)
    finally:
        drop_slot(pg, slot)
