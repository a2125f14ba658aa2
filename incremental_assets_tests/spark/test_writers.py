"""The writers on tiny DataFrames in a real local lake directory, in each lake format: a journaled
folder of bucketed files, or an Iceberg table Spark writes (merge-on-read, partitioned by key)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from incremental_assets.config import LakeSpec, MergeTuning, Mode
from incremental_assets.cursor import CursorType
from incremental_assets.errors import WriteError
from incremental_assets.lake import LakeTable, open_lake
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.results import WriteOutcome
from incremental_assets.window import Window
from incremental_assets.writers.base import ClashingVersions, WritePlan
from incremental_assets_tests.support.plans import lake_write_plan as _plan
from incremental_assets_tests.support.plans import written as _write
from incremental_assets_tests.support.project import read_lake

SCHEMA = "id long, v string, c long, gone boolean"


def _append(spark: SparkSession, frame: DataFrame, plan: WritePlan) -> WriteOutcome:
    return _write(Mode.APPEND, spark, frame, plan)


def _merge(spark: SparkSession, frame: DataFrame, plan: WritePlan) -> WriteOutcome:
    return _write(Mode.MERGE, spark, frame, plan)


def _lake(spark: SparkSession, lake: LakeTable) -> DataFrame:
    """The table's rows: the files its last commit made the table, or the Iceberg table."""
    if isinstance(lake, IcebergLake):
        return lake.session(spark).read.table(lake.reference()).select("id", "v", "c")
    assert isinstance(lake, ParquetLake)
    return spark.read.parquet(*lake.file_uris(list(lake.facts().files))).select("id", "v", "c")


@pytest.fixture(params=["parquet", "iceberg"])
def lake(tmp_path: Path, request: pytest.FixtureRequest) -> LakeTable:
    """The table in each lake format: a journaled folder, or an Iceberg table (SQLite catalog)."""
    return open_lake(LakeSpec(path=str(tmp_path), format=request.param), "orders")


def _nothing_left(lake: LakeTable) -> bool:
    """Whether no run left anything of its own: staging (plain) or a branch (Iceberg)."""
    if isinstance(lake, IcebergLake):
        state = lake.state()
        return state is None or not any(name.startswith("ia-") for name in state.refs)
    assert isinstance(lake, ParquetLake)
    return not list(Path(lake.folder.path, "_staging").glob("*"))


@dataclass(frozen=True)
class MergePathCase:
    tuning: MergeTuning  # what the plan carries
    strategies: set[str]  # what the outcome may then record


@pytest.fixture(params=["patch", "rank"])
def merge_path(request: pytest.FixtureRequest, lake: LakeTable) -> MergePathCase:
    """Both ways a plain merge rewrites the buckets it touches: a job per bucket, or one shuffle
    (of the touched buckets, or of the whole table when they are most of it); the strategies the
    outcome may then record. An Iceberg merge writes deletes and new rows either way.

    Which one a run takes depends on the size of those buckets' files; these tables are tiny.
    """
    patch = request.param == "patch"
    tuning = MergeTuning(patch_min_bytes=0 if patch else 1 << 62)
    if isinstance(lake, IcebergLake):
        return MergePathCase(tuning, {"merge on read"})
    return MergePathCase(tuning, {"patch buckets"} if patch else {"rank buckets", "rewrite table"})


def test_append_rerun_of_a_batch_replaces_it_instead_of_duplicating(
    spark: SparkSession, lake: LakeTable
) -> None:
    _append(
        spark, spark.createDataFrame([(1, "a", 10, None)], SCHEMA), _plan(lake, 1, replace_all=True)
    )
    _append(spark, spark.createDataFrame([(2, "b", 20, None)], SCHEMA), _plan(lake, 2))
    # The run that wrote batch 2 died before recording it; the rerun reads a little more.
    rerun = _append(
        spark,
        spark.createDataFrame([(2, "b", 20, None), (3, "c", 21, None)], SCHEMA),
        _plan(lake, 2),
    )

    assert rerun.rows_written == 2
    assertDataFrameEqual(
        _lake(spark, lake),
        spark.createDataFrame(
            [(1, "a", 10), (2, "b", 20), (3, "c", 21)], "id long, v string, c long"
        ),
    )


def test_append_drops_rows_earlier_batches_hold_at_the_boundary(
    spark: SparkSession, lake: LakeTable
) -> None:
    _append(
        spark,
        spark.createDataFrame([(1, "a", 10, None), (2, "b", 10, None)], SCHEMA),
        _plan(lake, 1, replace_all=True),
    )
    boundary = Window("c", CursorType.INTEGER, 10, 10)
    delta = spark.createDataFrame(
        [(2, "b", 10, None), (3, "late", 10, None), (4, "d", 11, None)], SCHEMA
    )

    outcome = _append(spark, delta, _plan(lake, 2, boundary=boundary))

    assert (outcome.rows_extracted, outcome.rows_written) == (3, 2)
    assert sorted(r.id for r in _lake(spark, lake).collect()) == [1, 2, 3, 4]


def test_append_without_a_key_dedupes_whole_rows_including_nulls(
    spark: SparkSession, lake: LakeTable
) -> None:
    first = spark.createDataFrame([(1, None, 10, None)], SCHEMA)
    _append(spark, first, _plan(lake, 1, replace_all=True, primary_key=()))
    again = spark.createDataFrame([(1, None, 10, None), (1, "other", 10, None)], SCHEMA)

    outcome = _append(
        spark,
        again,
        _plan(lake, 2, primary_key=(), boundary=Window("c", CursorType.INTEGER, 10, 10)),
    )

    assert outcome.rows_written == 1


def test_merge_keeps_the_latest_version_per_key_and_removes_deleted_rows(
    spark: SparkSession, lake: LakeTable, merge_path: MergePathCase
) -> None:
    _merge(
        spark,
        spark.createDataFrame([(1, "a", 10, None), (2, "b", 10, None), (3, "c", 10, None)], SCHEMA),
        _plan(lake, 1, tuning=merge_path.tuning, replace_all=True),
    )
    delta = spark.createDataFrame(
        [
            (1, "a2", 11, None),
            (1, "a1", 9, None),
            (2, "stale", 5, None),
            (3, "c", 12, True),
            (4, "new", 12, None),
        ],
        SCHEMA,
    )

    outcome = _merge(spark, delta, _plan(lake, 2, tuning=merge_path.tuning))

    assert outcome.merge_path is not None and outcome.merge_path.strategy in merge_path.strategies
    assert outcome.merge is not None
    assert (outcome.merge.inserted, outcome.merge.updated, outcome.merge.deleted) == (1, 1, 1)
    expected = spark.createDataFrame(
        [(1, "a2", 11), (2, "b", 10), (4, "new", 12)], "id long, v string, c long"
    )
    assertDataFrameEqual(_lake(spark, lake), expected)


def test_merge_refuses_different_rows_tied_on_key_and_cursor_whatever_the_input_order(
    spark: SparkSession, tmp_path: Path, lake: LakeTable
) -> None:
    """Either row could be key 1's: the merge used to keep one by a hash. Key 2's copies are one."""
    rows = [(1, "x", 10, None), (1, "y", 10, None), (2, "z", 10, None), (2, "z", 10, None)]
    spec = LakeSpec(path=str(tmp_path / "lakes"), format=lake.format)
    for attempt, order in enumerate([rows, rows[::-1]]):
        table = open_lake(spec, f"t{attempt}")
        with pytest.raises(ClashingVersions) as raised:
            _merge(spark, spark.createDataFrame(order, SCHEMA), _plan(table, 1))
        assert raised.value.rows == 1
        assert not table.facts().exists


def _merged_200_keys(spark: SparkSession, lake: LakeTable) -> None:
    """A merge table of keys 0 to 199, in four ranges of 50 keys (plain: bucket files; Iceberg:
    partitions `truncate(50, id)`)."""
    initial = spark.createDataFrame([(i, "v", 1, None) for i in range(200)], SCHEMA)
    _merge(spark, initial, _plan(lake, 1, replace_all=True))


def test_merge_rewrites_only_what_the_delta_touches(
    spark: SparkSession, lake: LakeTable, merge_path: MergePathCase
) -> None:
    _merged_200_keys(spark, lake)
    before = {f.group: f.name for f in list(lake.facts().files)}

    outcome = _merge(
        spark,
        spark.createDataFrame([(7, "changed", 2, None)], SCHEMA),
        _plan(lake, 2, tuning=merge_path.tuning),
    )

    assert outcome.merge_path is not None and outcome.merge_path.strategy in merge_path.strategies
    assert _lake(spark, lake).count() == 200
    if isinstance(lake, IcebergLake):
        # Merge-on-read: the changed row and a delete file for its old version, in its range.
        assert outcome.rows_rewritten == 1 and outcome.files_written == 2
        assert outcome.merge_path.buckets_touched == 1
        return
    assert len(before) == 4
    after = {f.group: f.name for f in list(lake.facts().files)}
    changed = [group for group in before if before[group] != after[group]]
    assert len(changed) == 1
    assert outcome.rows_rewritten is not None and outcome.rows_rewritten < 200


def test_merge_of_a_delta_that_repeats_the_lake_rewrites_nothing(
    spark: SparkSession, lake: LakeTable, merge_path: MergePathCase
) -> None:
    _merged_200_keys(spark, lake)
    files, head = list(lake.facts().files), lake.facts().head
    # The rows tied with the cursor, read again; and a deleted key the lake never held.
    repeat = spark.createDataFrame(
        [(7, "v", 1, None), (120, "v", 1, None), (999, "x", 1, True)], SCHEMA
    )

    # All of them at or below the previous cursor (1): rows the lake may already hold.
    idle = _merge(
        spark,
        repeat,
        _plan(lake, 2, tuning=merge_path.tuning, boundary=Window("c", CursorType.INTEGER, upper=1)),
    )

    assert (idle.rows_extracted, idle.rows_written, idle.files_written, idle.rows_rewritten) == (
        3,
        0,
        0,
        0,
    )
    assert idle.merge is not None and (
        idle.merge.inserted,
        idle.merge.updated,
        idle.merge.deleted,
    ) == (0, 0, 0)
    assert idle.head is None  # no commit, no snapshot
    assert list(lake.facts().files) == files and lake.facts().head == head
    assert _nothing_left(lake)
    # The same keys with one real change, and a delete of a key the lake holds, still land.
    changed = spark.createDataFrame(
        [(7, "v", 1, None), (120, "v2", 1, None), (8, "v", 1, True)], SCHEMA
    )
    outcome = _merge(spark, changed, _plan(lake, 3, tuning=merge_path.tuning))
    assert outcome.merge_path is not None and outcome.merge_path.strategy in merge_path.strategies
    assert outcome.merge is not None and (outcome.merge.updated, outcome.merge.deleted) == (1, 1)
    rows = {r.id: r.v for r in _lake(spark, lake).collect()}
    assert (rows[120], 8 in rows, len(rows)) == ("v2", False, 199)
    assert _nothing_left(lake)


def test_merge_lets_the_delta_beat_the_lake_when_the_cursor_is_collated(
    spark: SparkSession, lake: LakeTable, merge_path: MergePathCase
) -> None:
    _merge(
        spark,
        spark.createDataFrame([(1, "old", 10, None)], SCHEMA),
        _plan(lake, 1, tuning=merge_path.tuning, replace_all=True),
    )
    # Spark's order says 10 is the newer cursor; the database said 5 and 6 came later.
    delta = spark.createDataFrame([(1, "new", 5, None), (1, "newer", 6, None)], SCHEMA)

    outcome = _merge(spark, delta, _plan(lake, 2, tuning=merge_path.tuning, delta_beats_lake=True))

    assert outcome.merge_path is not None and outcome.merge_path.strategy in merge_path.strategies
    assert outcome.merge is not None and outcome.merge.updated == 1
    assert [(r.id, r.v) for r in _lake(spark, lake).collect()] == [(1, "newer")]


def test_full_refresh_merge_replaces_the_table(spark: SparkSession, lake: LakeTable) -> None:
    _merge(
        spark,
        spark.createDataFrame([(1, "a", 10, None), (2, "b", 10, None)], SCHEMA),
        _plan(lake, 1, replace_all=True),
    )

    # A snapshot wins even where its cursor is older: it is what the source holds now.
    outcome = _merge(
        spark,
        spark.createDataFrame([(1, "restored", 5, None)], SCHEMA),
        _plan(lake, 2, replace_all=True),
    )

    assert outcome.merge is not None
    if isinstance(lake, ParquetLake):
        assert outcome.merge.deleted == 1  # the keys it removed, counted as it ranked them
    assert [(r.id, r.v) for r in _lake(spark, lake).collect()] == [(1, "restored")]


def test_the_table_reads_as_one_dataset_with_spark_and_pyarrow(
    spark: SparkSession, lake: LakeTable, tmp_path: Path
) -> None:
    _append(
        spark,
        spark.createDataFrame([(1, "a", 10, None)], SCHEMA),
        _plan(lake, 1, replace_all=True),
    )
    _append(spark, spark.createDataFrame([(2, "b", 11, None)], SCHEMA), _plan(lake, 2))
    # Leftovers a crashed run may leave must stay invisible to readers: staging (plain), a
    # data file no snapshot names (Iceberg).
    ghost = tmp_path / "orders" / ("data" if isinstance(lake, IcebergLake) else "_staging/dead")
    spark.createDataFrame([(99, "ghost", 0, None)], SCHEMA).write.mode("append").parquet(str(ghost))

    arrow = read_lake(tmp_path, "orders")
    assert sorted(arrow["id"].to_pylist()) == [1, 2]
    assert sorted(arrow["_batch"].to_pylist()) == [1, 2]
    assert sorted(r.id for r in _lake(spark, lake).collect()) == [1, 2]


def test_recovery_rolls_a_journaled_commit_forward_and_drops_unjournaled_staging(
    tmp_path: Path,
) -> None:
    lake = ParquetLake(str(tmp_path / "t"))
    root = Path(lake.folder.path)
    (root / "_staging" / "tx1" / "data").mkdir(parents=True)
    (root / "_staging" / "tx1" / "data" / "a.parquet").write_bytes(b"new")
    (root / "_staging" / "tx2").mkdir(parents=True)
    (root / "part-b000000000001-tx0-00000.parquet").write_bytes(b"old")
    (root / "_journal").mkdir()
    journal = {
        "txn": "tx1",
        "adds": [["data/a.parquet", "part-b000000000001-tx1-00000.parquet"]],
        "removes": ["part-b000000000001-tx0-00000.parquet"],
        "snapshot_batch": 1,
    }
    (root / "_journal" / "tx1.json").write_text(json.dumps(journal))

    notes = lake.recover()

    # The commit replaced the table as batch 1.
    assert json.loads((root / "_snapshot").read_text())["batch"] == 1
    assert [f.name for f in lake.folder.list_data_files()] == [
        "part-b000000000001-tx1-00000.parquet"
    ]
    assert (root / "part-b000000000001-tx1-00000.parquet").read_bytes() == b"new"
    assert not list((root / "_journal").iterdir()) and not list((root / "_staging").iterdir())
    assert notes == ["rolled forward commit tx1", "removed uncommitted staging tx2"]


def test_integer_keys_are_bucketed_by_range_and_other_keys_by_hash(
    spark: SparkSession, tmp_path: Path
) -> None:
    ranged, hashed = ParquetLake(str(tmp_path / "ranged")), ParquetLake(str(tmp_path / "hashed"))
    rows = [(i, "v", 1, None) for i in range(200)]
    _merge(spark, spark.createDataFrame(rows, SCHEMA), _plan(ranged, 1, replace_all=True))
    as_text = spark.createDataFrame(
        [(str(i), "v", 1, None) for i in range(200)], "id string, v string, c long, gone boolean"
    )
    _merge(spark, as_text, _plan(hashed, 1, replace_all=True))

    assert sorted(f.group for f in ranged.facts().files) == [f"rp{i:012d}w50" for i in range(4)]
    assert {f.group for f in hashed.facts().files} <= {f"h{i:05d}of00004" for i in range(4)}
    # New keys past the end land in a new range; the ranges holding old keys are not rewritten.
    before = {f.name for f in ranged.facts().files}
    _merge(spark, spark.createDataFrame([(250, "new", 2, None)], SCHEMA), _plan(ranged, 2))
    assert before < {f.name for f in ranged.facts().files}


def test_an_iceberg_merge_table_is_partitioned_by_its_key(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Ranges of a single integer key (`truncate`), buckets of any other key: a clustered delta
    reads and writes the files of few partitions."""
    spec = LakeSpec(path=str(tmp_path), format="iceberg")
    ranged, hashed = open_lake(spec, "ranged"), open_lake(spec, "hashed")
    rows = [(i, "v", 1, None) for i in range(200)]
    _merge(spark, spark.createDataFrame(rows, SCHEMA), _plan(ranged, 1, replace_all=True))
    as_text = spark.createDataFrame(
        [(str(i), "v", 1, None) for i in range(200)], "id string, v string, c long, gone boolean"
    )
    _merge(spark, as_text, _plan(hashed, 1, replace_all=True))

    assert isinstance(ranged, IcebergLake) and isinstance(hashed, IcebergLake)
    ranged_state, hashed_state = ranged.state(), hashed.state()
    assert ranged_state is not None and ranged_state.partitioning == ("truncate(50, `id`)",)
    assert hashed_state is not None and hashed_state.partitioning == ("bucket(4, `id`)",)


def _journaled_commit(root: Path, staged: bool) -> None:
    """A commit of tx1 that replaces the file of tx0 and died before any rename."""
    (root / "_staging" / "tx1" / "data").mkdir(parents=True)
    if staged:
        (root / "_staging" / "tx1" / "data" / "a.parquet").write_bytes(b"new")
    (root / "part-b000000000001-tx0-00000.parquet").write_bytes(b"old")
    (root / "_journal").mkdir()
    journal = {
        "txn": "tx1",
        "adds": [["data/a.parquet", "part-b000000000002-tx1-00000.parquet"]],
        "removes": ["part-b000000000001-tx0-00000.parquet"],
    }
    (root / "_journal" / "tx1.json").write_text(json.dumps(journal))


def test_a_journaled_commit_keeps_its_staging_when_its_run_fails(tmp_path: Path) -> None:
    lake = ParquetLake(str(tmp_path / "t"))
    _journaled_commit(Path(lake.folder.path), staged=True)

    assert lake.discard("tx1") is False
    lake.recover()

    assert [f.name for f in lake.folder.list_data_files()] == [
        "part-b000000000002-tx1-00000.parquet"
    ]


def test_recovery_refuses_a_commit_whose_new_files_are_gone(tmp_path: Path) -> None:
    lake = ParquetLake(str(tmp_path / "t"))
    _journaled_commit(Path(lake.folder.path), staged=False)

    with pytest.raises(WriteError, match=r"staged file _staging/tx1/data/a.parquet is missing"):
        lake.recover()

    # Finishing it would have removed the old file and added nothing.
    assert [f.name for f in lake.folder.list_data_files()] == [
        "part-b000000000001-tx0-00000.parquet"
    ]
