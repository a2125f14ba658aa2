"""Append (and full refresh): each run's rows become one batch of files.

A batch is named by its sequence number, which follows the number in the previous
materialization's metadata. A run that wrote batch N and died before its materialization was
recorded is rerun with the same N, and its files replace the dead run's: nothing is duplicated.
(If batch N replaced the whole table, the rerun repeats that full refresh: see `load.py`.)
Rows that an inclusive lower bound or a lookback reads again are dropped when an earlier batch
already holds them, by primary key and cursor (or by the whole row, without a key).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from incremental_assets.results import WriteOutcome
from incremental_assets.window import SPARK_SQL, render_window
from incremental_assets.writers.base import (
    BATCH_COLUMN,
    Staged,
    WritePlan,
    column_types,
    conformed,
    counted,
    null_safe_match,
    observed,
    rewrite_to_schema,
    write_parquet,
)
from incremental_assets.writers.lake import batch_group

_SUBDIR = "data"


class AppendWriter:
    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Staged:
        frame, extracted = counted(conformed(delta, plan), "extracted")
        if plan.boundary is not None and not plan.replace_all:
            frame = _drop_already_loaded(frame, plan)
        frame, written = counted(
            frame.withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint")), "written"
        )
        write_parquet(frame, f"{plan.lake.staging_uri(plan.txn)}/{_SUBDIR}", plan)
        return Staged(observed(extracted), observed(written), _SUBDIR, column_types(frame))

    def commit(self, staged: Staged, plan: WritePlan) -> WriteOutcome:
        group = batch_group(plan.batch)
        files = plan.lake.staged_parquet(plan.txn, staged.subdir)
        if staged.rows_written == 0 and not plan.replace_all:
            files = []  # keep the table free of empty files; a replaced table keeps one for its schema
        adds = [
            (f"{staged.subdir}/{f}", f"part-{group}-{plan.txn}-{i:05d}.parquet")
            for i, f in enumerate(files)
        ]
        existing = plan.lake.data_files()
        replaced = [f for f in existing if plan.replace_all or f.group == group]
        evolved, rewritten = rewrite_to_schema(
            self.spark, plan, [f for f in existing if f not in replaced]
        )
        plan.lake.commit(
            plan.txn, adds + evolved, [f.name for f in replaced] + rewritten, plan.snapshot_batch
        )
        return WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=staged.rows_written,
            files_written=len(adds),
            rows_rewritten=staged.rows_written,
            merge=None,
            columns=staged.columns,
            files=tuple(final for _, final in adds),
        )


def _drop_already_loaded(frame: DataFrame, plan: WritePlan) -> DataFrame:
    assert plan.boundary is not None
    earlier = [f for f in plan.lake.data_files() if f.batch is not None and f.batch < plan.batch]
    if not earlier:
        return frame
    if plan.boundary.lower is not None and not plan.boundary.include_nulls:
        earlier = plan.lake.files_reaching(earlier, plan.boundary.column, plan.boundary.lower)
        if not earlier:
            return frame
    reader = frame.sparkSession.read
    if plan.schema is not None and plan.schema.lake is not None:
        reader = reader.schema(plan.schema.lake)  # one schema for every lake file: no inference
    loaded = reader.parquet(*plan.lake.file_uris(earlier)).where(
        F.expr(render_window(plan.boundary, SPARK_SQL))
    )
    wanted = [*plan.primary_key, plan.boundary.column] if plan.primary_key else frame.columns
    keys = [c for c in dict.fromkeys(wanted) if c in loaded.columns]
    return frame.alias("d").join(
        loaded.select(*keys).alias("l"), null_safe_match("d", "l", keys), "left_anti"
    )
