"""Append (and full refresh): each run's rows become one batch of files.

A batch is named by its sequence number, which follows the number in the previous
materialization's metadata. A run that wrote batch N and died before its materialization was
recorded is rerun with the same N, and its files replace the dead run's: nothing is duplicated.
(If batch N replaced the whole table, the rerun repeats that full refresh: see `load.py`.)
Rows that an inclusive lower bound or a lookback reads again are dropped when an earlier batch
already holds them: by primary key and cursor, or, without a key, by counting. A source may hold
identical rows, so a keyless row read again is dropped only as many times as the earlier batches
hold its value, compared on the columns both the source and those batches hold (a column the
source dropped, or added since, is NULL in the lake and would make every re-read row look new).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake.facts import COLUMNS
from incremental_assets.lake.names import batch_group, data_file_name
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.results import WriteOutcome
from incremental_assets.spark_api import F, column_named, sql
from incremental_assets.window import render_window
from incremental_assets.writers.base import (
    BATCH_COLUMN,
    Staged,
    WritePlan,
    column_types,
    commit_replacing,
    conformed,
    counted,
    null_safe_match,
    observed,
    write_parquet,
)
from incremental_assets.writers.schema import ColumnHistory
from incremental_assets.writers.versions import comparable_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_SUBDIR = "data"
_COPY, _HELD = "__copy", "__held"


class AppendWriter:
    def __init__(self, spark: SparkSession, lake: ParquetLake) -> None:
        self.spark = spark
        self.lake = lake

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Staged:
        frame, extracted = counted(conformed(delta, plan), "extracted")
        if plan.boundary is not None and not plan.replace_all:
            frame = _drop_already_loaded(frame, self.lake, plan)
        frame, written = counted(
            frame.withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint")), "written"
        )
        write_parquet(frame, f"{self.lake.staging_uri(plan.txn)}/{_SUBDIR}", plan)
        return Staged(
            rows_extracted=observed(extracted),
            rows_written=observed(written),
            subdir=_SUBDIR,
            columns=column_types(frame.schema),
        )

    def commit(self, staged: Staged, plan: WritePlan) -> WriteOutcome:
        group = batch_group(plan.batch)
        files = self.lake.staged_parquet(plan.txn, staged.subdir)
        if staged.rows_written == 0 and not plan.replace_all:
            # Keep the table free of empty files; a replaced table keeps one for its schema.
            files = []
        adds = [
            (f"{staged.subdir}/{f}", data_file_name(group, plan.txn, i))
            for i, f in enumerate(files)
        ]
        replaced = [f for f in plan.facts.files if plan.replace_all or f.group == group]
        head = commit_replacing(self.spark, self.lake, plan, adds, replaced, _column_history(plan))
        return WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=staged.rows_written,
            files_written=len(adds),
            merge=None,
            columns=staged.columns,
            files=tuple(final for _, final in adds),
            head=head,
        )


def _column_history(plan: WritePlan) -> dict[str, object]:
    """The lake's `_columns` record after this commit, when it changes."""
    if plan.schema is None:
        return {}
    lake = ColumnHistory.from_record(plan.facts.columns)
    before = ColumnHistory() if plan.replace_all else lake
    after = before.after(plan.schema, plan.batch)
    return {COLUMNS: after.to_record()} if plan.replace_all or after != before else {}


def _drop_already_loaded(frame: DataFrame, lake: ParquetLake, plan: WritePlan) -> DataFrame:
    assert plan.boundary is not None
    earlier = [f for f in plan.facts.files if f.batch is not None and f.batch < plan.batch]
    # A text cursor the database compares by its collation ('c1' = 'C1 ' in MySQL's default):
    # Spark can't tell which lake rows the window holds, so it compares every earlier row.
    windowed = not plan.delta_beats_lake
    if windowed and earlier and plan.boundary.lower is not None and not plan.boundary.include_nulls:
        earlier = lake.files_reaching(earlier, plan.boundary.column, plan.boundary.lower)
    if not earlier:
        return frame
    reader = frame.sparkSession.read
    if plan.schema is not None and plan.schema.lake is not None:
        reader = reader.schema(plan.schema.lake)  # one schema for every lake file: no inference
    loaded = reader.parquet(*lake.file_uris(earlier))
    earliest = min(f.batch for f in earlier if f.batch is not None)
    return drop_loaded(frame, loaded, plan, lambda: earliest)


def drop_loaded(
    frame: DataFrame, loaded: DataFrame, plan: WritePlan, earliest_batch: Callable[[], int]
) -> DataFrame:
    """The rows of `frame` that `loaded` (earlier batches' rows) doesn't hold already: by key
    and cursor, or as a multiset of values. `earliest_batch` names the oldest batch `loaded`
    holds, for the columns every one of its rows can be compared on."""
    assert plan.boundary is not None
    if not plan.delta_beats_lake:
        loaded = loaded.where(F.expr(render_window(plan.boundary, SPARK_SQL)))
    if plan.primary_key:
        versions = list(dict.fromkeys([*plan.primary_key, plan.boundary.column]))
        return frame.alias("d").join(
            loaded.select(*[column_named(c) for c in versions]).alias("l"),
            null_safe_match("d", "l", versions),
            "left_anti",
        )
    return _beyond_counts(frame, loaded, _comparable(frame, plan, earliest_batch))


def _comparable(frame: DataFrame, plan: WritePlan, earliest_batch: Callable[[], int]) -> list[str]:
    if plan.schema is None or plan.schema.lake is None:
        return [c for c in frame.columns if c != BATCH_COLUMN]
    history = ColumnHistory.from_record(plan.facts.columns)
    if not history.since:
        return history.comparable(plan.schema, 0)  # no column came later: every one compares
    return history.comparable(plan.schema, earliest_batch())


def _beyond_counts(frame: DataFrame, loaded: DataFrame, columns: list[str]) -> DataFrame:
    """The delta's rows beyond the first n of each value, n being how often `loaded` holds it.

    Values are compared on `columns`, NULL equal to NULL, each in its canonical form (a map as
    its sorted entries: Spark can't group, sort or compare maps). Which copies of a value are
    kept only matters for the other columns; the order is made stable by sorting on them.
    """
    values = [f"__value{i}" for i in range(len(columns))]
    others = [c for c in frame.columns if c not in columns]
    order = [f"__other{i}" for i in range(len(others))]
    numbered = _canonical(_canonical(frame, columns, values), others, order).withColumn(
        _COPY,
        F.row_number().over(
            sql.Window.partitionBy(*[F.col(v) for v in values]).orderBy(
                *[F.col(o) for o in order] or [F.lit(1)]
            )
        ),
    )
    held = _canonical(loaded, columns, values).groupBy(*values).agg(F.count(F.lit(1)).alias(_HELD))
    joined = numbered.alias("d").join(held.alias("l"), null_safe_match("d", "l", values), "left")
    kept = joined.where(F.col(_COPY) > F.coalesce(F.col(f"l.{_HELD}"), F.lit(0)))
    return kept.select(*[F.col(f"d.{SPARK_SQL.quote(c)}") for c in frame.columns])


def _canonical(frame: DataFrame, columns: list[str], names: list[str]) -> DataFrame:
    """`frame` with each of `columns` also in its canonical form, under `names`."""
    return frame.select(
        "*",
        *[
            F.expr(comparable_sql(SPARK_SQL.quote(c), frame.schema[c].dataType)).alias(name)
            for c, name in zip(columns, names, strict=True)
        ],
    )
