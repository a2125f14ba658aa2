"""Writers for the Iceberg lake: Spark writes each run's rows into the table itself.

    append, full_refresh   the run's rows are one batch (`_batch`), appended on the run's
                           branch; a batch committed but never recorded is replaced by its
                           rerun in the same snapshot; a run that replaces the table writes a
                           snapshot of the whole table
    merge                  each key's latest version in the delta (rows that clash, or have a
                           NULL key, fail the run before anything is written), matched with the
                           lake's rows of its key (`writers/matched.py`): a version newer than
                           the lake's (or as new: the delta wins a tie) replaces it, a delete
                           column removes it, a reconciled key gone from the source is removed,
                           and a version equal to the lake's changes nothing. The replaced keys'
                           rows are deleted and the new versions appended on the run's branch.
                           Merge tables are merge-on-read: a run writes its new rows and delete
                           files, not the files they touch.

Whatever the mode, a run's commit goes through `lake/iceberg/commits.py`: a snapshot (a merge's
delete and append: two) on the run's branch, then `main` moved to it if nothing else moved
`main` meanwhile; or a snapshot replacing the whole table. Its summary carries the run's commit
id, batch, cursor and records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT, Layout
from incremental_assets.lake.iceberg.branch import Branch, OnBranch, Whole
from incremental_assets.lake.iceberg.commit_plan import (
    CommitPlan,
    plan_commit,
    plan_replacement,
    settled,
)
from incremental_assets.lake.iceberg.commits import apply
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import SnapshotInfo, live_rows, summary_of
from incremental_assets.lake.iceberg.table import IcebergLake
from incremental_assets.results import WriteOutcome
from incremental_assets.spark_api import F, T, sql
from incremental_assets.writers.append import drop_loaded
from incremental_assets.writers.base import (
    BATCH_COLUMN,
    Staged,
    WritePlan,
    column_types,
    conformed,
    counted,
    observed,
)
from incremental_assets.writers.schema import ColumnHistory

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True, kw_only=True)
class Batch(Staged):
    """An append's batch, counted as it is written at commit."""

    rows: DataFrame
    extracted: sql.Observation
    written: sql.Observation


class IcebergAppendWriter:
    """Append and full_refresh tables: one batch per run."""

    def __init__(self, spark: SparkSession, lake: IcebergLake) -> None:
        self.spark = spark
        self.lake = lake

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Batch:
        """The batch, with the rows an earlier batch holds dropped; written at commit."""
        frame, extracted = counted(conformed(delta, plan), "extracted")
        if plan.boundary is not None and not plan.replace_all:
            earlier = self._base(plan).where(F.col(BATCH_COLUMN) < plan.batch)
            frame = drop_loaded(frame, earlier, plan, lambda: _earliest_batch(earlier))
        frame, written = counted(
            frame.withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint")), "written"
        )
        return Batch(
            rows_extracted=0,
            rows_written=0,
            subdir="",
            rows=frame,
            extracted=extracted,
            written=written,
        )

    def commit(self, staged: Batch, plan: WritePlan) -> WriteOutcome:
        """The batch appended on the run's branch, then main moved to it (a replaced table: a
        snapshot of the whole table)."""
        summary = summary_for(plan, "batches", _column_records(plan))
        rows = staged.rows
        columns = column_types(rows.schema)
        if plan.replace_all:
            commit = plan_replacement(
                self.lake.state(),
                txn=plan.txn,
                base=plan.facts.current_snapshot,
                summary=summary,
                settings=settings_for(plan, merge=False),
                rows=rows.schema,
                misplaced=plan.facts.misplaced is not None,
            )
            done = settled(apply(self.lake, self.spark, commit, Whole(rows)))
        else:
            commit = planned(self.lake, plan, summary, merge=False)
            count = {"written": 0}

            def append(branch: Branch) -> bool:
                if plan.facts.head is not None and plan.facts.head.batch == plan.batch:
                    # The batch was committed by a run that died before recording it: its rows
                    # are replaced, deleted row by row (compaction may have packed them with
                    # other batches', where a delete by filter is refused), then appended again.
                    branch.sql(
                        f"DELETE FROM {branch.reference} "
                        f"WHERE {SPARK_SQL.quote(BATCH_COLUMN)} = {plan.batch}"
                    )
                rows.writeTo(branch.reference).append()
                count["written"] = observed(staged.written)
                return count["written"] > 0 or evolved(plan)

            done = settled(apply(self.lake, self.spark, commit, on_branch(append, plan)))
        extracted, written = observed(staged.extracted), observed(staged.written)
        if done is None:
            return WriteOutcome.nothing(columns, extracted)
        return WriteOutcome(
            rows_extracted=extracted,
            rows_written=written,
            # The append's own (a rerun's DELETE of its batch rewrites files first).
            files_written=files_added((done.snapshot,)),
            merge=None,
            columns=columns,
            head=done.head,
            rows_held=live_rows(done.snapshot),
        )

    def _base(self, plan: WritePlan) -> DataFrame:
        return self.lake.rows(self.spark, plan.facts.current_snapshot)


def summary_for(plan: WritePlan, layout: Layout, records: dict[str, Any]) -> dict[str, str]:
    """The run's snapshots' summary, carrying the records as the commit leaves them."""
    kept: dict[str, Any] = {}
    if not plan.replace_all:
        kept = {KEY: plan.facts.key, COLUMNS: plan.facts.columns}
        if plan.facts.replaced_batch is not None:
            kept[SNAPSHOT] = {"batch": plan.facts.replaced_batch}
    else:
        kept[SNAPSHOT] = {"batch": plan.batch, "txn": plan.txn}
    return summary_of(
        txn=plan.txn,
        batch=plan.batch,
        cursor=plan.cursor,
        layout=layout,
        records={**kept, **records},
        run_id=plan.run_id,
    )


def planned(lake: IcebergLake, plan: WritePlan, summary: dict[str, str], merge: bool) -> CommitPlan:
    """The run's commit on its branch: the table's settings made the run's (a settings change
    since it was made), and its columns evolved in place where Iceberg can, else the table
    replaced by its own rows cast to the new types, before the run's own snapshot."""
    columns = None
    if plan.schema is not None and plan.schema.lake is not None and evolved(plan):
        held = [f for f in plan.schema.lake.fields if not f.name.startswith("_")]
        columns = (T.StructType(held), plan.schema.target)
    return plan_commit(
        lake.state(),
        txn=plan.txn,
        base=plan.facts.current_snapshot,
        summary=summary,
        settings=settings_for(plan, merge),
        columns=columns,
    )


def on_branch(write: Callable[[Branch], bool], plan: WritePlan) -> OnBranch:
    return OnBranch(write, cast=lambda rows: conformed(rows, plan))


def _column_records(plan: WritePlan) -> dict[str, Any]:
    """The append table's column history after this batch (`writers/append.py`)."""
    if plan.schema is None:
        return {}
    history = ColumnHistory() if plan.replace_all else ColumnHistory.from_record(plan.facts.columns)
    return {COLUMNS: history.after(plan.schema, plan.batch).to_record()}


def evolved(plan: WritePlan) -> bool:
    return plan.schema is not None and plan.schema.rewrites_lake


def settings_for(plan: WritePlan, merge: bool, partitioning: tuple[str, ...] = ()) -> TableSettings:
    return TableSettings.of(
        plan.compression, merge, partitioning, plan.merge_writes, plan.facts.format_version
    )


def _earliest_batch(earlier: DataFrame) -> int:
    row = earlier.agg(F.min(F.col(BATCH_COLUMN))).first()
    return int(row[0]) if row is not None and row[0] is not None else 0


def files_added(snapshots: tuple[SnapshotInfo, ...]) -> int:
    return sum(
        int(s.summary.get("added-data-files", 0)) + int(s.summary.get("added-delete-files", 0))
        for s in snapshots
    )
