"""Merge (upsert by primary key) into hash buckets of the key.

Each data file belongs to one bucket, `pmod(xxhash64(key), buckets)`, named in the file name. A
merge reads the staged delta, finds the buckets it touches, reads only those buckets' files, and
rewrites them: per key, the latest version by cursor wins (the delta wins a tie with the lake;
two different rows read with one key and cursor value fail the commit), and rows whose delete
column is set are removed. Buckets
the delta doesn't touch are not read or rewritten. A text cursor read over JDBC is ordered by the
database's collation, which Spark can't reproduce: there the delta, read now, beats the lake.

Rows the lake may already hold (those tied with the previous cursor or inside the lookback, read
again by every run) don't mark their bucket as touched by themselves: they are compared with the
lake rows of their keys first, and only the ones that changed add their bucket. A run that only
re-reads what the lake holds rewrites nothing at all.

A full refresh is the same merge with the whole table as "touched" and the delta as a complete
snapshot: the snapshot always wins, and keys missing from it are removed. Reconciling hard
deletes works the same way for the keys the source no longer has.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake import BucketScheme, DataFile
from incremental_assets.lake.facts import KEY
from incremental_assets.lake.names import data_file_name
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.results import MergeCounts, MergePath, WriteOutcome
from incremental_assets.spark_api import F, column_named, sql
from incremental_assets.window import render_window
from incremental_assets.writers.base import (
    ClashingVersions,
    Staged,
    WritePlan,
    column_types,
    commit_replacing,
    conformed,
    counted,
    observed,
    write_parquet,
)
from incremental_assets.writers.buckets import (
    bounded_keys,
    bucket_of,
    choose_scheme,
    integer_key,
    key_changed,
    rewrites_every_bucket,
    scheme_of,
)
from incremental_assets.writers.merge_path import choose_merge_path, touches_most
from incremental_assets.writers.versions import (
    BUCKET,
    GONE,
    HASH,
    LAKE_HASH,
    patched_merge,
    ranked_merge,
    row_hash,
    soft_deleted,
    with_key_count,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_DELTA, _KEYS, _MERGED = "delta", "keys", "merged"


class MergeWriter:
    def __init__(self, spark: SparkSession, lake: ParquetLake) -> None:
        self.spark = spark
        self.lake = lake

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Staged:
        # The delta (and the source's keys) are written once, so the source is read once. What
        # the commit needs to know about it (the buckets it touches, its key range) is observed
        # on the way, at no extra pass.
        # A new key needs a new scheme (a range of its first column may not exist any more).
        keep_scheme = not (plan.replace_all or key_changed(plan))
        scheme = scheme_of(list(plan.facts.files)) if keep_scheme else None
        reread = _reread(plan)
        null_key = F.lit(False)
        for column in plan.primary_key:
            null_key = null_key | column_named(column).isNull()
        measures = [
            F.count(F.lit(1)).alias("rows"),
            F.count_if(reread).alias("reread"),
            F.count_if(null_key).alias("null_keys"),
        ]
        if scheme is not None:
            bucket = bucket_of(delta, plan.row_key, scheme)
            measures += [
                F.collect_set(F.when(~reread, bucket)).alias("buckets"),
                F.collect_set(F.when(reread, bucket)).alias("reread_buckets"),
            ]
        # Key ranges: of the whole delta on a first load (to size key ranges), else of the re-read
        # rows (to find their versions in the lake).
        bounded = bounded_keys(delta, plan)
        for i, column in enumerate(bounded):
            key = column_named(column) if scheme is None else F.when(reread, column_named(column))
            measures += [F.min(key).alias(f"low{i}"), F.max(key).alias(f"high{i}")]
        extracted = sql.Observation("extracted")
        write_parquet(delta.observe(extracted, *measures), self._staged(plan, _DELTA), plan)
        if keys is not None:
            write_parquet(keys, self._staged(plan, _KEYS), plan)
        seen = extracted.get
        rows = int(seen.get("rows") or 0)
        key_ranges = tuple(
            (column, seen.get(f"low{i}"), seen.get(f"high{i}")) for i, column in enumerate(bounded)
        )
        if scheme is None:
            low, high = key_ranges[0][1:] if integer_key(delta, plan) else (None, None)
            scheme = choose_scheme(plan, rows, low, high)
        return Staged(
            rows_extracted=rows,
            rows_written=rows,
            subdir=_DELTA,
            columns=column_types(delta.schema),
            buckets=frozenset(int(b) for b in seen.get("buckets") or []),
            scheme=scheme,
            key_ranges=key_ranges,
            reread_rows=int(seen.get("reread") or 0),
            reread_buckets=frozenset(int(b) for b in seen.get("reread_buckets") or []),
            null_keys=int(seen.get("null_keys") or 0),
        )

    def commit(self, staged: Staged, plan: WritePlan) -> WriteOutcome:
        existing = list(plan.facts.files)
        scheme = staged.scheme
        assert scheme is not None
        schema = ", ".join(f"{SPARK_SQL.quote(name)} {kind}" for name, kind in staged.columns)
        delta = conformed(self.spark.read.schema(schema).parquet(self._staged(plan, _DELTA)), plan)
        delta = delta.withColumn(BUCKET, bucket_of(delta, plan.row_key, scheme))
        gone = self._gone_keys(plan, existing, delta, scheme)
        buckets = {f.bucket[1] for f in existing if f.bucket is not None}
        touched = set(staged.buckets)
        if plan.reconcile:
            touched |= {row[0] for row in gone.select(BUCKET).distinct().collect()}
        every = rewrites_every_bucket(plan, existing)
        if not (every or touches_most(touched, buckets, plan.tuning)):
            touched |= self._changed_by_rereads(plan, staged, delta, existing, touched)
            if not touched and not (plan.schema is not None and plan.schema.rewrites_lake):
                plan.lake.discard(plan.txn)
                return _unchanged(staged, delta)
        strategy = choose_merge_path(
            touched=touched,
            buckets=buckets,
            rewrites_every_bucket=every,
            delta_rows=staged.rows_extracted,
            touched_bytes=sum(f.size for f in existing if f.bucket and f.bucket[1] in touched),
            tuning=plan.tuning,
        )
        counted_touched = None if every else len(touched & buckets)
        if strategy == "rewrite table":
            replaced = existing
        else:
            # Re-read rows in untouched buckets equal the lake's: leave those buckets alone.
            delta = delta.where(F.col(BUCKET).isin(sorted(touched)))
            replaced = [f for f in existing if f.bucket is not None and f.bucket[1] in touched]
        if strategy == "patch buckets":
            written = self._patch_buckets(plan, replaced, sorted(touched), delta, gone)
        elif strategy == "schema only":  # the other files are rewritten to it in the commit
            columns = column_types(delta.drop(BUCKET).schema, with_batch=True)
            written = _Written(MergeCounts(0, 0, 0), 0, columns, 0, duplicate_keys=0)
        else:
            written = self._merge_buckets(plan, replaced, scheme, delta, gone)
        if written.clashes:
            raise ClashingVersions(written.clashes)
        adds = _named_adds(self.lake, plan, scheme)
        key = {"columns": list(plan.row_key), "weighed_by": dict(plan.weighed_by)}
        head = commit_replacing(self.spark, self.lake, plan, adds, replaced, {KEY: key})
        return WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=written.merge.inserted + written.merge.updated,
            files_written=len(adds),
            rows_rewritten=written.rows,
            merge=written.merge,
            columns=written.columns,
            files=tuple(final for _, final in adds),
            merge_path=MergePath(
                strategy=strategy, buckets_touched=counted_touched, buckets_held=len(buckets)
            ),
            head=head,
            duplicate_keys=written.duplicate_keys,
        )

    def _merge_buckets(
        self,
        plan: WritePlan,
        replaced: list[DataFile],
        scheme: BucketScheme,
        delta: DataFrame,
        gone: DataFrame,
    ) -> _Written:
        """Rank every version of every key in the replaced buckets; one shuffle clusters them."""
        lake_rows = self._read_bucketed(plan, replaced, scheme)
        merged, counts = ranked_merge(delta, lake_rows, gone, plan)
        merged, keys = with_key_count(merged, plan)
        merged, rewritten = counted(merged, "rewritten")
        # The merge already clustered the rows by bucket: one task writes each bucket.
        write_parquet(merged, self._staged(plan, _MERGED), plan, partition_by=BUCKET)
        return _Written(
            _counts(counts),
            observed(rewritten),
            column_types(merged.drop(BUCKET).schema),
            observed(counts, "clashes"),
            duplicate_keys=observed(keys, "duplicate_keys"),
        )

    def _patch_buckets(
        self,
        plan: WritePlan,
        replaced: list[DataFile],
        touched: list[int],
        delta: DataFrame,
        gone: DataFrame,
    ) -> _Written:
        """Rewrite each touched bucket in a job of its own, several at a time, without a shuffle.

        A bucket's lake rows whose key the delta (or a reconciled delete) doesn't name are copied
        as they are; only the named keys' versions are ranked. A bucket's file is read by one task
        and its new file written by the same task: no row of it crosses the network.
        """
        files = {
            b: [f for f in replaced if f.bucket is not None and f.bucket[1] == b] for b in touched
        }

        def one(bucket: int) -> _Written:
            lake_rows = self._read_lake(plan, files[bucket]) if files[bucket] else None
            in_bucket = F.col(BUCKET) == bucket
            rows = (
                None
                if lake_rows is None
                else conformed(lake_rows, plan).withColumn(BUCKET, F.lit(bucket).cast("bigint"))
            )
            merged, counts = patched_merge(
                delta.where(in_bucket), rows, gone.where(in_bucket), plan
            )
            # As many files as the bucket had (one, unless it outgrew max_rows_per_file): they
            # don't multiply with every merge.
            merged, rewritten = counted(merged.coalesce(max(1, len(files[bucket]))), "rewritten")
            write_parquet(
                merged.drop(BUCKET), f"{self._staged(plan, _MERGED)}/{BUCKET}={bucket}", plan
            )
            return _Written(
                _counts(counts),
                observed(rewritten),
                column_types(merged.drop(BUCKET).schema),
                observed(counts, "clashes"),
            )

        with ThreadPoolExecutor(max_workers=plan.tuning.patch_jobs) as pool:
            results = list(pool.map(one, touched))
        return _Written(
            MergeCounts(
                *(
                    sum(getattr(r.merge, f) for r in results)
                    for f in ("inserted", "updated", "deleted")
                )
            ),
            sum(r.rows for r in results),
            results[0].columns,
            sum(r.clashes for r in results),
        )

    def _staged(self, plan: WritePlan, subdir: str) -> str:
        return f"{self.lake.staging_uri(plan.txn)}/{subdir}"

    def _read_lake(self, plan: WritePlan, files: list[DataFile]) -> DataFrame:
        # Every lake file carries one schema (a schema change rewrites them all): no inference.
        reader = self.spark.read
        if plan.schema is not None and plan.schema.lake is not None:
            reader = reader.schema(plan.schema.lake)
        return reader.parquet(*self.lake.file_uris(files))

    def _changed_by_rereads(
        self,
        plan: WritePlan,
        staged: Staged,
        delta: DataFrame,
        existing: list[DataFile],
        touched: set[int],
    ) -> set[int]:
        """The buckets, not already touched, where a re-read row differs from the lake's version.

        A row differs when the lake has no row for its key, or one with other values, or when it
        deletes a key the lake holds. The lake side reads only the candidate buckets' files, and in
        them only the re-read rows' key ranges, a filter Parquet applies to row groups and pages.
        """
        candidates = staged.reread_buckets - touched
        if not candidates:
            return set()
        if staged.reread_rows > plan.tuning.reread_check_rows:
            return set(candidates)
        keys = list(plan.row_key)
        data = [c for c in delta.columns if c != BUCKET]
        rows = delta.where(_reread(plan) & F.col(BUCKET).isin(sorted(candidates))).select(
            *keys,
            BUCKET,
            row_hash(data, delta.schema).alias(HASH),
            soft_deleted(delta, plan.delete_column).alias(GONE),
        )
        files = [f for f in existing if f.bucket is not None and f.bucket[1] in candidates]
        if files:
            within = _within(staged.key_ranges, delta)
            lake = conformed(self._read_lake(plan, files).where(within), plan)
            rows = rows.join(
                lake.select(*keys, row_hash(data, lake.schema).alias(LAKE_HASH)), keys, "left"
            )
        else:
            rows = rows.withColumn(LAKE_HASH, F.lit(None).cast("long"))
        held = F.col(LAKE_HASH).isNotNull()
        changes = F.when(F.col(GONE), held).otherwise(~held | (F.col(HASH) != F.col(LAKE_HASH)))
        return {int(row[0]) for row in rows.where(changes).select(BUCKET).distinct().collect()}

    def _read_bucketed(
        self, plan: WritePlan, files: list[DataFile], scheme: BucketScheme
    ) -> DataFrame | None:
        if not files:
            return None
        rows = conformed(self._read_lake(plan, files), plan)
        if plan.replace_all and not set(plan.row_key) <= set(rows.columns):
            # Written before the key was matched on a weight: the snapshot replaces every row,
            # and counts each of its rows as inserted.
            return None
        return rows.withColumn(BUCKET, bucket_of(rows, plan.row_key, scheme))

    def _gone_keys(
        self, plan: WritePlan, existing: list[DataFile], delta: DataFrame, scheme: BucketScheme
    ) -> DataFrame:
        """Keys in the lake that the source no longer has (empty unless reconciling deletes)."""
        key_columns = [column_named(c) for c in plan.row_key]
        empty = delta.select(*key_columns, BUCKET).limit(0)
        if not plan.reconcile or not existing:
            return empty.withColumn(GONE, F.lit(True))
        in_lake = self._read_lake(plan, existing).select(*key_columns)
        in_source = self.spark.read.parquet(self._staged(plan, _KEYS))
        gone = (
            in_lake.join(in_source, list(plan.row_key), "left_anti")
            .join(delta.select(*key_columns), list(plan.row_key), "left_anti")
            .distinct()
        )
        return gone.withColumn(BUCKET, bucket_of(gone, plan.row_key, scheme)).withColumn(
            GONE, F.lit(True)
        )


def _within(key_ranges: tuple[tuple[str, object, object], ...], frame: DataFrame) -> Column:
    condition = F.lit(True)
    for column, low, high in key_ranges:
        if low is not None and high is not None:
            kind = frame.schema[column].dataType
            condition = condition & column_named(column).between(
                F.lit(low).cast(kind), F.lit(high).cast(kind)
            )
    return condition


def _unchanged(staged: Staged, delta: DataFrame) -> WriteOutcome:
    columns = column_types(delta.drop(BUCKET).schema, with_batch=True)
    return WriteOutcome.nothing(columns, staged.rows_extracted, merge=True)


@dataclass(frozen=True)
class _Written:
    merge: MergeCounts
    rows: int  # rows written to the new files
    columns: tuple[tuple[str, str], ...]
    clashes: int  # rows read now that differ from their key's winner at its cursor value
    # Rows written whose key another written row has, counted as they were written (None: not
    # counted, so `primary_key_unique` reads the written files again).
    duplicate_keys: int | None = None


def _counts(observation: sql.Observation) -> MergeCounts:
    return MergeCounts(*(observed(observation, f) for f in ("inserted", "updated", "deleted")))


def _reread(plan: WritePlan) -> Column:
    """Rows of this read that the lake may already hold as they are (`plan.boundary`)."""
    if plan.boundary is None or plan.replace_all:
        return F.lit(False)
    if plan.delta_beats_lake:
        # A text cursor the database compares by its collation ('c1' = 'C1 '): Spark can't
        # tell which rows are at or below the boundary, so any row may be one read again.
        return F.lit(True)
    return F.coalesce(F.expr(render_window(plan.boundary, SPARK_SQL)), F.lit(False))


def _named_adds(lake: ParquetLake, plan: WritePlan, scheme: BucketScheme) -> list[tuple[str, str]]:
    adds = []
    for i, path in enumerate(lake.staged_parquet(plan.txn, _MERGED)):
        bucket = int(path.split("/", 1)[0].split("=", 1)[1])
        adds.append((f"{_MERGED}/{path}", data_file_name(scheme.group(bucket), plan.txn, i)))
    return adds
