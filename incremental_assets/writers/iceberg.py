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

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT, Layout
from incremental_assets.lake.iceberg.commits import IcebergCommit
from incremental_assets.lake.iceberg.partitions import bucketable, partition_spec
from incremental_assets.lake.iceberg.properties import TableSettings
from incremental_assets.lake.iceberg.records import SnapshotInfo, deletes_of, live_rows, summary_of
from incremental_assets.lake.iceberg.table import IcebergLake
from incremental_assets.results import MergeCounts, MergePath, MergeStrategy, WriteOutcome
from incremental_assets.spark_api import F, T, column_named, sql
from incremental_assets.writers.append import drop_loaded
from incremental_assets.writers.base import (
    BATCH_COLUMN,
    ClashingVersions,
    Staged,
    WritePlan,
    column_types,
    conformed,
    counted,
    observed,
)
from incremental_assets.writers.buckets import integer_key, key_changed
from incremental_assets.writers.matched import (
    KeyRange,
    decided,
    delete_sql,
    inserted_rows,
    replaced_keys,
    tally,
)
from incremental_assets.writers.schema import ColumnHistory
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


def iceberg_lake(plan: WritePlan) -> IcebergLake:
    assert isinstance(plan.lake, IcebergLake), plan.lake
    return plan.lake


class IcebergAppendWriter:
    """Append and full_refresh tables: one batch per run."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._commit: IcebergCommit | None = None
        self._frame: DataFrame | None = None
        self._observed: tuple[sql.Observation, sql.Observation] | None = None

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Staged:
        """Write the batch on the run's branch (a replaced table: in its snapshot, at commit)."""
        commit = _open(self.spark, plan, "batches", _column_records(plan))
        self._commit = commit
        frame, extracted = counted(conformed(delta, plan), "extracted")
        if plan.boundary is not None and not plan.replace_all:
            earlier = commit.base_frame().where(F.col(BATCH_COLUMN) < plan.batch)
            frame = drop_loaded(frame, earlier, plan, lambda: _earliest_batch(earlier))
        frame, written = counted(
            frame.withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint")), "written"
        )
        self._frame, self._observed = frame, (extracted, written)
        if plan.replace_all:
            return Staged(rows_extracted=0, rows_written=0, subdir="")
        _evolve(commit, plan, merge=False)
        target = commit.begin()
        with commit.summarized():
            if plan.facts.head is not None and plan.facts.head.batch == plan.batch:
                # The batch was committed by a run that died before recording it: its rows are
                # replaced, deleted row by row (compaction may have packed them with other
                # batches', where a delete by filter is refused), then appended again.
                commit.spark.sql(
                    f"DELETE FROM {target} WHERE {SPARK_SQL.quote(BATCH_COLUMN)} = {plan.batch}"
                )
            frame.writeTo(target).append()
        return self._staged()

    def commit(self, staged: Staged, plan: WritePlan) -> WriteOutcome:
        commit, frame = self._commit, self._frame
        assert commit is not None and frame is not None
        if plan.replace_all:
            head = commit.replace(frame, _settings(plan, merge=False))
            staged = self._staged()
        else:
            if commit.written() is None or (staged.rows_written == 0 and not _evolved(plan)):
                commit.abandon()
                return WriteOutcome.nothing(staged.columns, staged.rows_extracted)
            head = commit.publish()
        return WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=staged.rows_written,
            files_written=_files_added(commit.snapshot),
            rows_rewritten=staged.rows_written,
            merge=None,
            columns=staged.columns,
            head=head,
            rows_held=_rows_held(commit),
        )

    def _staged(self) -> Staged:
        assert self._frame is not None and self._observed is not None
        extracted, written = self._observed
        return Staged(
            rows_extracted=observed(extracted),
            rows_written=observed(written),
            subdir="",
            columns=column_types(self._frame.schema),
        )


class IcebergMergeWriter:
    """Merge tables: each key's latest version, its lake rows replaced where it changes them."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._commit: IcebergCommit | None = None
        self._source: DataFrame | None = None
        self._clashes = 0
        self._span: KeyRange | None = None
        self._keys = 0

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Staged:
        """Each key's latest version, kept in Spark's storage (the source is read once, here):
        rows, NULL keys and clashes are known before anything is written."""
        commit = _open(self.spark, plan, "merge", {KEY: _key_record(plan)})
        self._commit = commit
        frame = conformed(delta, plan).withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint"))
        winners = latest_versions(frame, plan).withColumn(GONE, F.lit(False))
        if keys is not None and plan.reconcile:
            winners = winners.unionByName(_gone_keys(commit, plan, keys, winners), True)
        kept = winners.localCheckpoint()
        spanned = plan.row_key[0] if integer_key(kept, plan) else None
        seen = version_counts(kept, plan, spanned)
        self._source = kept.drop(VERSIONS, KEY_CLASHES)
        self._clashes, self._keys = seen["clashes"], seen["keys"]
        if spanned is not None and "low" in seen:
            self._span = KeyRange(spanned, seen["low"], seen["high"])
        return Staged(
            rows_extracted=seen["rows"],
            rows_written=seen["rows"],
            subdir="",
            columns=column_types(frame.schema),
            null_keys=seen["null_keys"],
        )

    def commit(self, staged: Staged, plan: WritePlan) -> WriteOutcome:
        """The replaced keys' lake rows deleted, then the written rows appended, on the run's
        branch (`writers/matched.py`); `main` moves once, to both."""
        commit, source = self._commit, self._source
        assert commit is not None and source is not None
        if self._clashes:
            raise ClashingVersions(self._clashes)
        if plan.replace_all or key_changed(plan):
            return _replace_merged(commit, source, staged, plan)
        _evolve(commit, plan, merge=True)
        lake = conformed(commit.base_frame(), plan)
        decisions = decided(lake, source, plan, self._span, self._keys).localCheckpoint()
        counts = tally(decisions)
        if not counts.changes and not _evolved(plan):
            commit.abandon()
            return WriteOutcome.nothing(staged.columns, staged.rows_extracted, MergeCounts(0, 0, 0))
        target = commit.begin()
        snapshots = []
        with commit.summarized():
            if counts.replaced_keys:
                keys = replaced_keys(decisions, plan, self._keys)
                with commit.viewed(keys, "replaced") as view:
                    commit.spark.sql(delete_sql(target, view, plan, self._span))
                snapshots.append(commit.written())
            if counts.inserted or counts.updated or not snapshots:
                inserted_rows(decisions).writeTo(target).append()
                snapshots.append(commit.written())
        head = commit.publish()
        made = [s for s in snapshots if s is not None]
        merged = WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=counts.inserted + counts.updated,
            files_written=sum(_files_added(s) for s in made),
            rows_rewritten=sum(int(s.summary.get("added-records", 0)) for s in made),
            merge=MergeCounts(counts.inserted, counts.updated, counts.deleted),
            columns=staged.columns,
            merge_path=MergePath(
                strategy=_strategy(commit),
                # Where rows changed: the delete's partitions (the append's, if none changed).
                buckets_touched=_int(made[0].summary.get("changed-partition-count"))
                if made
                else None,
                buckets_held=None,
            ),
            head=head,
            duplicate_keys=counts.duplicate_keys,
            rows_held=_rows_held(commit),
        )
        return _with_deletes(merged, commit.snapshot)


def _replace_merged(
    commit: IcebergCommit, source: DataFrame, staged: Staged, plan: WritePlan
) -> WriteOutcome:
    """The table replaced by the latest version of every key: the delta's, for a full refresh;
    the lake's rows' and the delta's, matched again, when the key changed: a key whose latest
    version deletes it, or that reconcile found gone from the source, is removed, lake rows and
    all."""
    if plan.replace_all:
        candidates = source.withColumn(REMOVED, F.col(DELETED) | F.col(GONE))
    else:
        candidates = _matched_again(commit, source, plan)
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
    head = commit.replace(rows, _settings(plan, True, partitioning))
    counts = MergeCounts(written, 0, 0)
    if not plan.replace_all:  # the key changed: what changed, beside every row written again
        counts = MergeCounts(*(int(seen.get(n) or 0) for n in ("inserted", "updated", "deleted")))
    replaced = WriteOutcome(
        rows_extracted=staged.rows_extracted,
        rows_written=counts.inserted + counts.updated,
        files_written=_files_added(commit.snapshot),
        rows_rewritten=written,
        merge=counts,
        columns=staged.columns,
        merge_path=MergePath(strategy="rewrite table", buckets_touched=None, buckets_held=None),
        head=head,
        duplicate_keys=int(seen.get("duplicate_keys") or 0),
        rows_held=_rows_held(commit),
    )
    return _with_deletes(replaced, commit.snapshot)


def _matched_again(commit: IcebergCommit, source: DataFrame, plan: WritePlan) -> DataFrame:
    """The lake's rows and the delta's, matched again under the run's key: each key's latest
    version, `REMOVED` if it deletes the key or reconcile found the key gone from the source, and
    whether it was in the lake (`IN_LAKE`) or changed there (`CHANGED`)."""
    key = list(plan.row_key)
    delta = source.where(~F.col(GONE)).drop(DELETED, GONE)
    merged = latest_versions(delta, plan, conformed(commit.base_frame(), plan))
    named = [column_named(c) for c in key]
    gone = source.where(F.col(GONE)).select(*named).withColumn(GONE, F.lit(True))
    return merged.join(gone, key, "left").withColumn(
        REMOVED, F.col(DELETED) | F.coalesce(F.col(GONE), F.lit(False))
    )


def _open(
    spark: SparkSession, plan: WritePlan, layout: Layout, records: dict[str, Any]
) -> IcebergCommit:
    """The run's commit, its summary carrying the records as the commit leaves them."""
    lake = iceberg_lake(plan)
    kept: dict[str, Any] = {}
    if not plan.replace_all:
        kept = {KEY: plan.facts.key, COLUMNS: plan.facts.columns}
        if plan.facts.replaced_batch is not None:
            kept[SNAPSHOT] = {"batch": plan.facts.replaced_batch}
    else:
        kept[SNAPSHOT] = {"batch": plan.batch, "txn": plan.txn}
    summary = summary_of(
        txn=plan.txn,
        batch=plan.batch,
        cursor=plan.cursor,
        layout=layout,
        records={**kept, **records},
        run_id=plan.run_id,
    )
    return IcebergCommit.open(lake, spark, plan.facts, plan.txn, summary)


def _column_records(plan: WritePlan) -> dict[str, Any]:
    """The append table's column history after this batch (`writers/append.py`)."""
    if plan.schema is None:
        return {}
    history = ColumnHistory() if plan.replace_all else ColumnHistory.from_record(plan.facts.columns)
    return {COLUMNS: history.after(plan.schema, plan.batch).to_record()}


def _key_record(plan: WritePlan) -> dict[str, Any]:
    return {"columns": list(plan.row_key), "weighed_by": dict(plan.weighed_by)}


def _evolve(commit: IcebergCommit, plan: WritePlan, merge: bool) -> None:
    """The table's settings and columns made the run's: its write properties set (a settings
    change since it was made), and its columns evolved in place where Iceberg can; else the
    table is replaced by its own rows cast to the new types, before the run's own snapshot."""
    commit.conform(_settings(plan, merge))
    if plan.schema is None or plan.schema.lake is None or not _evolved(plan):
        return
    lake = T.StructType([f for f in plan.schema.lake.fields if not f.name.startswith("_")])
    if not commit.evolve(lake, plan.schema.target):
        commit.rewrite_types(conformed(commit.base_frame(), plan), _settings(plan, merge))


def _evolved(plan: WritePlan) -> bool:
    return plan.schema is not None and plan.schema.rewrites_lake


def _settings(plan: WritePlan, merge: bool, partitioning: tuple[str, ...] = ()) -> TableSettings:
    return TableSettings.of(
        plan.compression, merge, partitioning, plan.merge_writes, plan.facts.format_version
    )


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


def _gone_keys(
    commit: IcebergCommit, plan: WritePlan, keys: DataFrame, winners: DataFrame
) -> DataFrame:
    """The lake's keys the source no longer has (nor the delta), flagged `GONE`."""
    key, named = list(plan.row_key), [column_named(c) for c in plan.row_key]
    in_lake = commit.base_frame().select(*named)
    gone = in_lake.join(keys.select(*named), key, "left_anti").join(
        winners.select(*named), key, "left_anti"
    )
    return gone.distinct().withColumn(GONE, F.lit(True)).withColumn(DELETED, F.lit(False))


def _strategy(commit: IcebergCommit) -> MergeStrategy:
    """How the table's merges write, by its properties as the commit read them."""
    mode = commit.properties.get("write.merge.mode")
    return "copy on write" if mode == "copy-on-write" else "merge on read"


def _earliest_batch(earlier: DataFrame) -> int:
    row = earlier.agg(F.min(F.col(BATCH_COLUMN))).first()
    return int(row[0]) if row is not None and row[0] is not None else 0


def _files_added(snapshot: SnapshotInfo | None) -> int:
    summary = snapshot.summary if snapshot is not None else {}
    return int(summary.get("added-data-files", 0)) + int(summary.get("added-delete-files", 0))


def _with_deletes(outcome: WriteOutcome, snapshot: SnapshotInfo | None) -> WriteOutcome:
    """`outcome` with the table's delete files and deleted fraction after the merge's commit."""
    if snapshot is None:
        return outcome
    deletes = deletes_of(snapshot)
    return replace(outcome, delete_files=deletes.files, deleted_fraction=round(deletes.fraction, 4))


def _rows_held(commit: IcebergCommit) -> int | None:
    return live_rows(commit.snapshot) if commit.snapshot is not None else None


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)
