"""An Iceberg table committed every few minutes stays the same size to read and to commit.

No Spark: the lake table's own commit, fed Parquet files written by pyarrow into its staging,
as the writers' Spark jobs would leave them. After hundreds of commits, in append and in merge
mode, the current snapshot lists a bounded number of manifests, only `keep_snapshots` snapshots
are kept, and every file in the table's folder is one a kept snapshot or metadata file names.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec
from incremental_assets.lake import Commit, open_lake
from incremental_assets.lake.files import SPARK_SCHEMA
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.names import BucketScheme, batch_group, data_file_name, new_txn

BUCKETS = 8
KEEP = 5
RUNS = 120
_txns = itertools.count()


def _lake(tmp_path: Path) -> IcebergLake:
    spec = LakeSpec(path=str(tmp_path / "lake"), format="iceberg", keep_snapshots=KEEP)
    lake = open_lake(spec, "orders")
    assert isinstance(lake, IcebergLake)
    return lake


def _commit(lake: IcebergLake, run: int, groups: list[str], removes: list[str]) -> None:
    """One run's commit: a file for each of `groups`, replacing `removes`."""
    facts = lake.facts()
    txn = f"{new_txn()}{next(_txns):06d}"
    staging = Path(lake.staging_uri(txn).removeprefix("file:"))
    staging.mkdir(parents=True)
    adds = []
    for index, group in enumerate(groups):
        pq.write_table(_rows(run), staging / f"{index}.parquet")
        adds.append((f"{index}.parquet", data_file_name(group, txn, 0)))
    commit = Commit(
        txn=txn, batch=run, replace_all=False, cursor=str(run), adds=adds, removes=removes
    )
    lake.commit(commit, facts)


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
