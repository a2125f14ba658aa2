"""What the writers share: the plan of one write, staging with Spark, and counting in one pass."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from incremental_assets.config import MergeTuning, MergeWrites
from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake import BucketScheme, Commit, DataFile, LakeFacts, LakeHead, LakeTable
from incremental_assets.lake.names import data_file_name
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.results import WriteOutcome
from incremental_assets.spark_api import F, T, sql
from incremental_assets.window import Window
from incremental_assets.writers.schema import SchemaChange, conform

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

BATCH_COLUMN = "_batch"


@dataclass(frozen=True, kw_only=True)
class WritePlan:
    lake: LakeTable
    facts: LakeFacts  # the lake as the run found it; the commit applies to exactly this
    txn: str
    batch: int
    cursor: str | None  # the cursor the run is to record, kept with its commit
    # Replace the whole table (full refresh, first run, or a table without a cursor).
    replace_all: bool
    primary_key: tuple[str, ...]
    cursor_column: str | None
    delete_column: str | None
    buckets: int | None  # hash buckets; None: by the table's size
    bucket_rows: int | None  # rows per key range; None: by the table's size
    compression: str
    max_rows_per_file: int
    # The part of this read the lake may already hold: append drops those rows when an earlier
    # batch has them; merge compares them with the lake before letting them touch a bucket.
    boundary: Window | None = None
    # The lake's data columns after this run; existing files are rewritten when they change.
    schema: SchemaChange | None = None
    # Merge mode: also remove keys the source no longer has (hard deletes).
    reconcile: bool = False
    # The cursor's order is a database collation Spark can't reproduce (text cursors read over
    # JDBC): in a merge a version read now beats the lake's instead of the higher cursor winning,
    # and append compares re-read rows with every earlier batch.
    delta_beats_lake: bool = False
    # The columns rows are matched on (`Source.match_key`), when they aren't the primary key's,
    # and the collation each weight among them is weighed by (`Source.weighed_by`).
    match_key: tuple[str, ...] = ()
    weighed_by: tuple[tuple[str, str], ...] = ()
    # The key is the source's own primary key, read from its catalog: no two rows read share it,
    # so a merge needn't look for rows that do (`ClashingVersions`).
    key_enforced: bool = False
    run_id: str | None = None  # the Dagster run, recorded with the commit where the format can
    tuning: MergeTuning = field(default_factory=MergeTuning)  # plain merges' path (merge_path.py)
    merge_writes: MergeWrites = "position_deletes"  # Iceberg merges: how changed rows are written

    @property
    def row_key(self) -> tuple[str, ...]:
        """What identifies a row in the lake: the key's columns, as the source compares them."""
        return self.match_key or self.primary_key


@dataclass(frozen=True, kw_only=True)
class Staged:
    """A run's rows, written under `_staging/<txn>/` and not yet visible to readers."""

    rows_extracted: int
    rows_written: int
    subdir: str
    columns: tuple[tuple[str, str], ...] = ()
    buckets: frozenset[int] = frozenset()  # merge: the buckets the delta's new rows touch
    scheme: BucketScheme | None = None  # merge: how the table is bucketed after this run
    # merge: (column, min, max) of each key column whose values are exact literals, over the
    # re-read rows (over the whole delta on a first load)
    key_ranges: tuple[tuple[str, object, object], ...] = ()
    reread_rows: int = 0  # merge: rows inside `WritePlan.boundary`
    reread_buckets: frozenset[int] = frozenset()  # merge: the buckets those rows fall in
    null_keys: int = 0  # merge: rows with NULL in a key column, which no key can tell apart


S = TypeVar("S", bound=Staged)


class ClashingVersions(Exception):
    """Rows read now that differ from another row with their key and cursor value: nothing was
    committed."""

    def __init__(self, rows: int) -> None:
        super().__init__(f"{rows} rows differ from another row with their key and cursor value")
        self.rows = rows


class Writer(Protocol[S]):
    """Stages a run's rows, then commits them: all that passes between is the staged value."""

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> S: ...

    def commit(self, staged: S, plan: WritePlan) -> WriteOutcome: ...


def write_parquet(
    frame: DataFrame, uri: str, plan: WritePlan, partition_by: str | None = None
) -> None:
    spark = frame.sparkSession
    # INT96 (Spark's legacy default) loses the time zone flag and is deprecated in Parquet.
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    writer = (
        frame.write.mode("overwrite")
        .option("compression", plan.compression)
        .option("maxRecordsPerFile", plan.max_rows_per_file)
    )
    if partition_by is not None:
        writer = writer.partitionBy(partition_by)
    writer.parquet(uri)


def counted(frame: DataFrame, name: str) -> tuple[DataFrame, sql.Observation]:
    """Count rows as they stream through the next action, without a second scan."""
    observation = sql.Observation(name)
    return frame.observe(observation, F.count(F.lit(1)).alias("rows")), observation


def observed(observation: sql.Observation, key: str = "rows") -> int:
    return int(observation.get.get(key) or 0)


def null_safe_match(left: str, right: str, columns: list[str]) -> Column:
    condition = F.lit(True)
    for column in columns:
        condition = condition & F.col(f"{left}.{SPARK_SQL.quote(column)}").eqNullSafe(
            F.col(f"{right}.{SPARK_SQL.quote(column)}")
        )
    return condition


def column_types(schema: T.StructType, with_batch: bool = False) -> tuple[tuple[str, str], ...]:
    """(name, type) of each column, for the metadata's column schema; `_batch` last if asked."""
    columns = tuple((f.name, f.dataType.simpleString()) for f in schema.fields)
    return (*columns, (BATCH_COLUMN, "bigint")) if with_batch else columns


def conformed(frame: DataFrame, plan: WritePlan) -> DataFrame:
    return frame if plan.schema is None else conform(frame, plan.schema.target)


_EVOLVED = "evolved"
_GROUP = "__group"


def commit_replacing(
    spark: SparkSession,
    lake: ParquetLake,
    plan: WritePlan,
    adds: list[tuple[str, str]],
    replaced: list[DataFile],
    records: dict[str, Any],
) -> LakeHead:
    """Commit `adds` in place of `replaced`, with the lake's other files rewritten to a new
    schema."""
    rest = [f for f in plan.facts.files if f not in replaced]
    evolved, rewritten = rewrite_to_schema(spark, lake, plan, rest)
    commit = Commit(
        txn=plan.txn,
        batch=plan.batch,
        replace_all=plan.replace_all,
        cursor=plan.cursor,
        adds=adds + evolved,
        removes=[f.name for f in replaced] + rewritten,
        records=records,
    )
    return lake.commit(commit, plan.facts)


def rewrite_to_schema(
    spark: SparkSession, lake: ParquetLake, plan: WritePlan, files: list[DataFile]
) -> tuple[list[tuple[str, str]], list[str]]:
    """Rewrite files this commit doesn't replace to the new schema, each within its own group."""
    if plan.schema is None or not plan.schema.rewrites_lake or not files:
        return [], []
    frame = spark.read.parquet(*lake.file_uris(files))
    frame = frame.withColumn(
        _GROUP, F.regexp_extract(F.col("_metadata.file_name"), r"^part-([^-]+)-", 1)
    )
    staging = f"{lake.staging_uri(plan.txn)}/{_EVOLVED}"
    write_parquet(conform(frame, plan.schema.target), staging, plan, partition_by=_GROUP)
    adds = []
    for i, path in enumerate(lake.staged_parquet(plan.txn, _EVOLVED)):
        group = path.split("/", 1)[0].split("=", 1)[1]
        adds.append((f"{_EVOLVED}/{path}", data_file_name(group, plan.txn, i)))
    return adds, [f.name for f in files]
