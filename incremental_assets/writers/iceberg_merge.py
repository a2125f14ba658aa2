"""The Iceberg merge writer: each key's latest version in the delta (rows that clash, or have
a NULL key, fail the run before anything is written), matched with the lake's rows of its key
(`writers/matched.py`): a version newer than the lake's (or as new: the delta wins a tie)
replaces it, a delete column removes it, a reconciled key gone from the source is removed, and a
version equal to the lake's changes nothing. The replaced keys' rows are deleted and the new
versions appended on the run's branch. Merge tables are merge-on-read: a run writes its new rows
and delete files, not the files they touch. A full refresh, or a change of key, replaces the
table with the latest version of every key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from incremental_assets.lake.facts import KEY
from incremental_assets.lake.iceberg.branch import Branch, Whole
from incremental_assets.lake.iceberg.commit_plan import Landed, plan_replacement, settled
from incremental_assets.lake.iceberg.commits import apply
from incremental_assets.lake.iceberg.partitions import bucketable, partition_spec
from incremental_assets.lake.iceberg.records import SnapshotInfo, deletes_of, live_rows
from incremental_assets.lake.iceberg.table import IcebergLake
from incremental_assets.results import MergeCounts, MergePath, MergeStrategy, WriteOutcome
from incremental_assets.spark_api import F, column_named
from incremental_assets.writers.base import (
    BATCH_COLUMN,
    ClashingVersions,
    Staged,
    WritePlan,
    column_types,
    conformed,
)
from incremental_assets.writers.buckets import integer_key, key_changed
from incremental_assets.writers.iceberg import (
    evolved,
    files_added,
    on_branch,
    planned,
    settings_for,
    summary_for,
)
from incremental_assets.writers.matched import (
    KeyRange,
    Tally,
    decided,
    delete_sql,
    inserted_rows,
    replaced_keys,
    tally,
)
from incremental_assets.writers.versions import (
    CHANGED,
    DELETED,
    GONE,
    IN_LAKE,
    KEY_CLASHES,
    KEY_ROWS,
    VERSIONS,
    duplicate_keys,
    latest_versions,
    version_counts,
    with_key_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

REMOVED = "__removed"  # a replaced table's row left out (deleted, or gone from the source)


@dataclass(frozen=True, kw_only=True)
class Versions(Staged):
    """A merge's delta: each key's latest version, kept in Spark's storage."""

    source: DataFrame
    clashes: int
    keys: int
    span: KeyRange | None


class IcebergMergeWriter:
    """Merge tables: each key's latest version, its lake rows replaced where it changes them."""

    def __init__(self, spark: SparkSession, lake: IcebergLake) -> None:
        self.spark = spark
        self.lake = lake

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Versions:
        """Each key's latest version, kept in Spark's storage (the source is read once, here):
        rows, NULL keys and clashes are known before anything is written."""
        frame = conformed(delta, plan).withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint"))
        winners = latest_versions(frame, plan).withColumn(GONE, F.lit(False))
        if keys is not None and plan.reconcile:
            lake = self.lake.rows(self.spark, plan.facts.current_snapshot)
            winners = winners.unionByName(_gone_keys(lake, plan, keys, winners), True)
        kept = winners.localCheckpoint()
        spanned = plan.row_key[0] if integer_key(kept, plan) else None
        seen = version_counts(kept, plan, spanned)
        span = None
        if spanned is not None and "low" in seen:
            span = KeyRange(spanned, seen["low"], seen["high"])
        return Versions(
            rows_extracted=seen["rows"],
            rows_written=seen["rows"],
            subdir="",
            columns=column_types(frame.drop(DELETED).schema),
            null_keys=seen["null_keys"],
            source=kept.drop(VERSIONS, KEY_CLASHES),
            clashes=seen["clashes"],
            keys=seen["keys"],
            span=span,
        )

    def commit(self, staged: Versions, plan: WritePlan) -> WriteOutcome:
        """The replaced keys' lake rows deleted, then the written rows appended, on the run's
        branch (`writers/matched.py`); `main` moves once, to both."""
        if staged.clashes:
            raise ClashingVersions(staged.clashes)
        if plan.replace_all or key_changed(plan):
            return _replace_merged(self.lake, self.spark, staged, plan)
        summary = summary_for(plan, "merge", {KEY: _key_record(plan)})
        commit = planned(self.lake, plan, summary, merge=True)
        tallied: list[Tally] = []

        def merge(branch: Branch) -> bool:
            lake = conformed(branch.rows(), plan)
            decisions = decided(lake, staged.source, plan, staged.span, staged.keys)
            decisions = decisions.localCheckpoint()
            counts = tally(decisions)
            tallied.append(counts)
            if not counts.changes and not evolved(plan):
                return False
            if counts.replaced_keys:
                keys = replaced_keys(decisions, plan, staged.keys)
                with branch.viewed(keys, "replaced") as view:
                    branch.sql(delete_sql(branch.reference, view, plan, staged.span))
            if counts.inserted or counts.updated or not counts.replaced_keys:
                inserted_rows(decisions).writeTo(branch.reference).append()
            return True

        done = settled(apply(self.lake, self.spark, commit, on_branch(merge, plan)))
        if done is None:
            return WriteOutcome.nothing(staged.columns, staged.rows_extracted, merge=True)
        made, counts = done.snapshots, tallied[-1]
        merged = WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=counts.inserted + counts.updated,
            files_written=files_added(made),
            rows_rewritten=sum(int(s.summary.get("added-records", 0)) for s in made),
            merge=MergeCounts(counts.inserted, counts.updated, counts.deleted),
            columns=staged.columns,
            merge_path=MergePath(
                strategy=_strategy(done),
                # Where rows changed: the delete's partitions (the append's, if none changed).
                buckets_touched=_int(made[0].summary.get("changed-partition-count")),
                buckets_held=None,
            ),
            head=done.head,
            duplicate_keys=counts.duplicate_keys,
            rows_held=live_rows(done.snapshot),
        )
        return _with_deletes(merged, done.snapshot)


def _replace_merged(
    lake: IcebergLake, spark: SparkSession, staged: Versions, plan: WritePlan
) -> WriteOutcome:
    """The table replaced by the latest version of every key: the delta's, for a full refresh;
    the lake's rows' and the delta's, matched again, when the key changed: a key whose latest
    version deletes it, or that reconcile found gone from the source, is removed, lake rows and
    all."""
    source = staged.source
    if plan.replace_all:
        candidates = source.withColumn(REMOVED, F.col(DELETED) | F.col(GONE))
    else:
        base = lake.rows(spark, plan.facts.current_snapshot)
        candidates = _matched_again(base, source, plan)
    # Counted once kept: an observation of a checkpoint never reaches a Spark Connect client.
    kept = with_key_rows(candidates, plan).localCheckpoint()
    written_row = ~F.col(REMOVED)
    key = column_named(plan.row_key[0])
    measures = [
        F.sum(written_row.cast("long")).alias("rows"),
        duplicate_keys(among=written_row),
    ]
    if not plan.replace_all:
        in_lake, changed = F.col(IN_LAKE), F.col(CHANGED)
        measures += [
            F.sum((written_row & ~in_lake).cast("long")).alias("inserted"),
            F.sum((written_row & in_lake & changed).cast("long")).alias("updated"),
            F.sum((~written_row & in_lake).cast("long")).alias("deleted"),
        ]
    rows = kept.where(written_row).drop(
        KEY_ROWS, REMOVED, DELETED, GONE, VERSIONS, KEY_CLASHES, IN_LAKE, CHANGED
    )
    if integer_key(rows, plan):
        measures += [
            F.min(F.when(written_row, key)).alias("low"),
            F.max(F.when(written_row, key)).alias("high"),
        ]
    found = kept.agg(*measures).first()
    seen = found.asDict() if found is not None else {}
    written = int(seen.get("rows") or 0)
    partitioning = _partitioning(plan, rows, written, seen.get("low"), seen.get("high"))
    commit = plan_replacement(
        lake.state(),
        txn=plan.txn,
        base=plan.facts.current_snapshot,
        summary=summary_for(plan, "merge", {KEY: _key_record(plan)}),
        settings=settings_for(plan, True, partitioning),
        rows=rows.schema,
        misplaced=plan.facts.misplaced is not None,
    )
    done = settled(apply(lake, spark, commit, Whole(rows)))
    assert done is not None, "a replacement always makes a snapshot"
    counts = MergeCounts(written, 0, 0)
    if not plan.replace_all:  # the key changed: what changed, beside every row written again
        counts = MergeCounts(*(int(seen.get(n) or 0) for n in ("inserted", "updated", "deleted")))
    replaced = WriteOutcome(
        rows_extracted=staged.rows_extracted,
        rows_written=counts.inserted + counts.updated,
        files_written=files_added(done.snapshots),
        rows_rewritten=written,
        merge=counts,
        columns=staged.columns,
        merge_path=MergePath(strategy="rewrite table", buckets_touched=None, buckets_held=None),
        head=done.head,
        duplicate_keys=int(seen.get("duplicate_keys") or 0),
        rows_held=live_rows(done.snapshot),
    )
    return _with_deletes(replaced, done.snapshot)


def _matched_again(base: DataFrame, source: DataFrame, plan: WritePlan) -> DataFrame:
    """The lake's rows and the delta's, matched again under the run's key: each key's latest
    version, `REMOVED` if it deletes the key or reconcile found the key gone from the source, and
    whether it was in the lake (`IN_LAKE`) or changed there (`CHANGED`)."""
    key = list(plan.row_key)
    delta = source.where(~F.col(GONE)).drop(GONE)  # a log's DELETED marks are the delta's own
    merged = latest_versions(delta, plan, conformed(base, plan))
    named = [column_named(c) for c in key]
    gone = source.where(F.col(GONE)).select(*named).withColumn(GONE, F.lit(True))
    return merged.join(gone, key, "left").withColumn(
        REMOVED, F.col(DELETED) | F.coalesce(F.col(GONE), F.lit(False))
    )


def _key_record(plan: WritePlan) -> dict[str, Any]:
    return {"columns": list(plan.row_key), "weighed_by": dict(plan.weighed_by)}


def _partitioning(
    plan: WritePlan, rows: DataFrame, count: int, low: object, high: object
) -> tuple[str, ...]:
    """The partition spec of a merge table (`lake/iceberg/partitions.py`)."""
    first = plan.row_key[0]
    return partition_spec(
        first,
        count,
        (low, high) if isinstance(low, int) and isinstance(high, int) else None,
        bucketable=bucketable(rows.schema[first].dataType),
        buckets=plan.buckets,
        bucket_rows=plan.bucket_rows,
    )


def _gone_keys(lake: DataFrame, plan: WritePlan, keys: DataFrame, winners: DataFrame) -> DataFrame:
    """The lake's keys the source no longer has (nor the delta), flagged `GONE`."""
    key, named = list(plan.row_key), [column_named(c) for c in plan.row_key]
    in_lake = lake.select(*named)
    gone = in_lake.join(keys.select(*named), key, "left_anti").join(
        winners.select(*named), key, "left_anti"
    )
    return gone.distinct().withColumn(GONE, F.lit(True)).withColumn(DELETED, F.lit(False))


def _strategy(landed: Landed) -> MergeStrategy:
    """How the table's merges write, by its properties as the commit left them."""
    mode = landed.properties.get("write.merge.mode")
    return "copy on write" if mode == "copy-on-write" else "merge on read"


def _with_deletes(outcome: WriteOutcome, snapshot: SnapshotInfo) -> WriteOutcome:
    """`outcome` with the table's delete files and deleted fraction after the merge's commit."""
    deletes = deletes_of(snapshot)
    return replace(outcome, delete_files=deletes.files, deleted_fraction=round(deletes.fraction, 4))


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)
