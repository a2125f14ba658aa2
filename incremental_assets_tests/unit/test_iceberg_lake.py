"""The Iceberg lake table's commit on its own, without Spark: fed Parquet files written by pyarrow
into its staging, as the writers' Spark jobs would leave them.

* Committed every few minutes, it stays the same size to read and to commit: after dozens of
  commits, in append and in merge mode, the current snapshot lists a bounded number of
  manifests, only `keep_snapshots` snapshots are kept, and every file in the table's folder is
  one a kept snapshot or metadata file names.
* A commit whose catalog answer was lost, a writer whose snapshot expired under it, a staging
  left behind by a commit that landed, a metadata file cut short: nothing committed is deleted,
  and what could not be told is said.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Transaction
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec
from incremental_assets.errors import ConcurrentRunError
from incremental_assets.lake import Commit, LakeHead, durable_io, open_lake
from incremental_assets.lake.files import SPARK_SCHEMA, local_path
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.names import BucketScheme, batch_group, data_file_name, new_txn

BUCKETS = 8
KEEP = 5
RUNS = 45
_txns = itertools.count()


def _lake(tmp_path: Path) -> IcebergLake:
    spec = LakeSpec(path=str(tmp_path / "lake"), format="iceberg", keep_snapshots=KEEP)
    lake = open_lake(spec, "orders")
    assert isinstance(lake, IcebergLake)
    return lake


def _commit(lake: IcebergLake, run: int, groups: list[str], removes: list[str]) -> LakeHead:
    """One run's commit: a file for each of `groups`, replacing `removes`."""
    facts = lake.facts()
    return lake.commit(_staged(lake, run, groups, removes), facts)


def _staged(lake: IcebergLake, run: int, groups: list[str], removes: Sequence[str] = ()) -> Commit:
    """A run's files in its staging, and the commit that would add them."""
    txn = f"{new_txn()}{next(_txns):06d}"
    staging = Path(lake.staging_uri(txn).removeprefix("file:"))
    staging.mkdir(parents=True)
    adds = []
    for index, group in enumerate(groups):
        pq.write_table(_rows(run), staging / f"{index}.parquet")
        adds.append((f"{index}.parquet", data_file_name(group, txn, 0)))
    return Commit(
        txn=txn, batch=run, replace_all=False, cursor=str(run), adds=adds, removes=list(removes)
    )


def _rows(run: int) -> pa.Table:
    """A file as Spark writes it: its schema in Spark's terms in the footer."""
    spark_schema = T.StructType([T.StructField("id", T.LongType())]).json()
    table = pa.table({"id": pa.array([run], pa.int64())})
    return table.replace_schema_metadata({SPARK_SCHEMA: spark_schema})


def _referenced(lake: IcebergLake) -> set[str]:
    """Every file a kept snapshot or a kept metadata file names, relative to the table."""
    table = lake._load()
    assert table is not None
    io = table.io
    names = {table.metadata_location}
    names |= {entry.metadata_file for entry in table.metadata.metadata_log}
    for snapshot in table.metadata.snapshots:
        names.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            names.add(manifest.manifest_path)
            names |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io)}
    root = lake.uri.removeprefix("file:")
    return {os.path.relpath(name.removeprefix("file:").removeprefix("//"), root) for name in names}


def _on_disk(lake: IcebergLake) -> set[str]:
    root = Path(lake.uri.removeprefix("file:"))
    return {
        str(p.relative_to(root))
        for folder in ("data", "metadata")
        for p in (root / folder).iterdir()
    }


@pytest.mark.parametrize("mode", ["append", "merge"])
def test_many_commits_keep_manifests_snapshots_and_files_bounded(tmp_path: Path, mode: str) -> None:
    lake = _lake(tmp_path)
    scheme = BucketScheme("hash", BUCKETS)
    if mode == "merge":
        _commit(lake, 0, [scheme.group(i) for i in range(BUCKETS)], [])
    manifests = []
    for run in range(1, RUNS):
        if mode == "append":
            _commit(lake, run, [batch_group(run)], [])
        else:
            # A merge rewrites one bucket's file, or two.
            touched = {scheme.group(run % BUCKETS), scheme.group(run * 7 % BUCKETS)}
            held = [f.name for f in lake.facts().files if f.group in touched]
            _commit(lake, run, sorted(touched), held)
        table = lake._load()
        current = table.current_snapshot() if table is not None else None
        assert table is not None and current is not None
        manifests.append(len(current.manifests(table.io)))

    table = lake._load()
    assert table is not None
    assert len(table.metadata.snapshots) == KEEP
    # Merged once 16 accumulate (commit.manifest.min-count-to-merge): never far above that.
    assert max(manifests) <= 17, manifests
    assert _on_disk(lake) == _referenced(lake)
    files = lake.facts().files
    assert len(files) == (RUNS - 1 if mode == "append" else BUCKETS)
    rows = sorted(table.scan().to_arrow()["id"].to_pylist())
    assert len(rows) == len(files)
    if mode == "append":
        assert rows == list(range(1, RUNS))


def _files_of(lake: IcebergLake) -> list[str]:
    return [f.name for f in lake.facts().files]


def test_a_commit_whose_catalog_answer_was_lost_after_it_landed_keeps_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog took the commit, then the connection dropped (PostgreSQL, REST): the commit
    is the table's, so its files stay and the run goes on as committed."""
    lake = _lake(tmp_path)
    _commit(lake, 1, [batch_group(1)], [])
    commit = _staged(lake, 2, [batch_group(2)])
    facts = lake.facts()
    real = Transaction.commit_transaction

    def lost_answer(self: Transaction) -> Any:
        real(self)
        raise ConnectionError("server closed the connection unexpectedly")

    monkeypatch.setattr(Transaction, "commit_transaction", lost_answer)

    head = lake.commit(commit, facts)

    monkeypatch.undo()
    assert head.txn == commit.txn and head.batch == 2
    assert len(_files_of(lake)) == 2
    assert sorted(_table(lake).scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_a_commit_the_catalog_may_not_have_taken_is_said_so_and_cleaned_only_once_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A swap that raised while the table still holds the snapshot it was computed against: a
    REST catalog may be applying it still, so the failed run keeps its files, and the next run
    (which holds the lock) finds it never landed and removes them."""
    lake = _lake(tmp_path)
    _commit(lake, 1, [batch_group(1)], [])
    commit = _staged(lake, 2, [batch_group(2)])
    facts = lake.facts()

    def no_answer(self: Transaction) -> Any:
        raise ConnectionError("server closed the connection unexpectedly")

    monkeypatch.setattr(Transaction, "commit_transaction", no_answer)
    with pytest.raises(ConnectionError):
        lake.commit(commit, facts)
    monkeypatch.undo()

    moved = tmp_path / "lake" / "orders" / "data"
    assert not lake.discard(commit.txn)
    assert list(moved.glob(f"*-{commit.txn}-*"))
    message = str(lake.unfinished_error("orders", commit.txn, "lost"))
    assert "whether the catalog took it could not be told" in message

    next_run = _lake(tmp_path)
    assert len(next_run.recover()) == 1
    assert _files_of(next_run) == [f"part-{batch_group(1)}-{_only_txn(next_run)}-00000.parquet"]
    assert not list(moved.glob(f"*-{commit.txn}-*"))


def test_a_writer_whose_snapshot_expired_under_it_is_refused_as_a_conflict(
    tmp_path: Path,
) -> None:
    spec = LakeSpec(path=str(tmp_path / "lake"), format="iceberg", keep_snapshots=1)
    first, second = open_lake(spec, "orders"), open_lake(spec, "orders")
    assert isinstance(first, IcebergLake) and isinstance(second, IcebergLake)
    _commit(first, 1, [batch_group(1)], [])
    stale = second.facts()
    late = _staged(second, 4, [batch_group(4)])
    _commit(first, 2, [batch_group(2)], [])
    _commit(first, 3, [batch_group(3)], [])

    with pytest.raises(ConcurrentRunError, match="another run committed"):
        second.commit(late, stale)

    assert len(_files_of(first)) == 3
    assert not list((tmp_path / "lake" / "orders" / "data").glob(f"*-{late.txn}-*"))


def test_a_staging_left_by_a_commit_that_landed_is_removed_without_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lock (object stores), a day later: the commit landed, a later one is the
    head, and the staging it left (its run killed before removing it) goes alone."""
    spec = LakeSpec(path=str(tmp_path / "lake"), format="iceberg", lock=False)
    lake = open_lake(spec, "orders")
    assert isinstance(lake, IcebergLake)
    landed = _commit(lake, 1, [batch_group(1)], [])
    (tmp_path / "lake" / "orders" / "_staging" / landed.txn).mkdir(parents=True)
    _commit(lake, 2, [batch_group(2)], [])
    monkeypatch.setattr("incremental_assets.lake.iceberg.ORPHAN_AGE", timedelta(0))

    done = lake.recover()

    assert len(done) == 1
    assert len(_files_of(lake)) == 2
    assert sorted(_table(lake).scan().to_arrow()["id"].to_pylist()) == [1, 2]


def test_a_metadata_file_cut_short_reads_as_a_lost_table(tmp_path: Path) -> None:
    lake = _lake(tmp_path)
    _commit(lake, 1, [batch_group(1)], [])
    current = Path(_table(lake).metadata_location.removeprefix("file:"))
    current.write_bytes(b"")

    assert lake.facts().head is None
    assert lake.facts(with_files=False).head is None


def test_every_file_a_commit_writes_is_synced_before_the_catalog_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = _lake(tmp_path)
    _commit(lake, 1, [batch_group(1)], [])
    synced: list[str] = []
    monkeypatch.setattr(durable_io, "fsync_path", synced.append)

    _commit(lake, 2, [batch_group(2)], [])

    table = _table(lake)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    written = {table.metadata_location, snapshot.manifest_list}
    written |= {
        m.manifest_path
        for m in snapshot.manifests(table.io)
        if m.added_snapshot_id == snapshot.snapshot_id
    }
    assert {local_path(p) for p in written} <= set(synced)


def _table(lake: IcebergLake) -> Any:
    table = lake._load()
    assert table is not None
    return table


def _only_txn(lake: IcebergLake) -> str:
    head = lake.facts().head
    assert head is not None
    return head.txn


def test_files_nothing_kept_names_are_swept_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a commit killed between its swap and its tidying left, or another tool's failed
    commit, goes at the next sweep; another engine's files of other kinds stay."""
    monkeypatch.setattr("incremental_assets.lake.iceberg.SWEEP_EVERY", 3)
    lake = _lake(tmp_path)
    _commit(lake, 1, [batch_group(1)], [])
    root = tmp_path / "lake" / "orders"
    orphans = [
        root / "data" / data_file_name(batch_group(9), "20250101T000000ffffffff", 0),
        root / "metadata" / "0b1c-m0.avro",
        root / "metadata" / "00009-dead.metadata.json",
    ]
    foreign = root / "metadata" / "stats-1.puffin"
    # Another engine's commit under way has written its manifest already.
    young = root / "metadata" / "a1b2-m0.avro"
    two_days_ago = time.time() - 2 * 86400
    for path in [*orphans, foreign, young]:
        path.write_bytes(b"x")
        if path is not young:
            os.utime(path, (two_days_ago, two_days_ago))

    _commit(lake, 2, [batch_group(2)], [])
    _commit(lake, 3, [batch_group(3)], [])  # the table's third snapshot: a sweep

    assert not [p for p in orphans if p.exists()]
    assert foreign.exists() and young.exists()
    foreign.unlink()
    young.unlink()
    assert _on_disk(lake) == _referenced(lake)
    assert sorted(_table(lake).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]


def test_the_head_read_without_pyiceberg_is_pyicebergs_or_none_at_all(tmp_path: Path) -> None:
    """The no-JVM check's head: the same as PyIceberg reads it, where it can be read that way;
    where it can't (a catalog URI with options, a manifest list gone), PyIceberg reads it, and
    refuses what it refuses."""
    options = LakeSpec(
        path=str(tmp_path / "lake"),
        format="iceberg",
        catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/lake/_catalog.db?timeout=30"},
    )
    (tmp_path / "lake").mkdir()
    lake = open_lake(options, "orders")
    assert isinstance(lake, IcebergLake)
    _commit(lake, 1, [batch_group(1)], [])
    assert lake.facts(with_files=False).head == lake.facts().head is not None
    default = _lake(tmp_path / "other")
    _commit(default, 1, [batch_group(1)], [])
    quick = default.facts(with_files=False)
    assert quick.head == default.facts().head and quick.files == ()

    snapshot = _table(default).current_snapshot()
    Path(local_path(snapshot.manifest_list)).unlink()

    with pytest.raises(FileNotFoundError):
        default.facts(with_files=False)
