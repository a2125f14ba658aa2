"""Merge (upsert by primary key) into hash buckets of the key.

Each data file belongs to one bucket, `pmod(xxhash64(key), buckets)`, named in the file name. A
merge reads the staged delta, finds the buckets it touches, reads only those buckets' files, and
rewrites them: per key, the latest version by cursor wins (the delta wins a tie with the lake, and
a hash of the row breaks any tie left), and rows whose delete column is set are removed. Buckets
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

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import Window as W
from pyspark.sql import functions as F
from pyspark.sql import types as T

from incremental_assets.results import MergeCounts, WriteOutcome
from incremental_assets.window import SPARK_SQL, render_window
from incremental_assets.writers.base import (
    BATCH_COLUMN,
    Staged,
    WritePlan,
    column_types,
    commit_replacing,
    conformed,
    counted,
    observed,
    write_parquet,
)
from incremental_assets.writers.lake import KEY, BucketScheme, DataFile

_DELTA, _KEYS, _MERGED = "delta", "keys", "merged"
# Up to this many re-read rows are compared with the lake; more mark their buckets touched.
REREAD_CHECK_ROWS = 100_000
_BUCKET = "__bucket"
_SOURCE, _HASH, _RANK, _IN_LAKE, _IN_DELTA, _LAKE_HASH, _GONE = (
    "__src",
    "__h",
    "__rn",
    "__in_lake",
    "__in_delta",
    "__lake_h",
    "__gone",
)


class MergeWriter:
    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def stage(self, delta: DataFrame, plan: WritePlan, keys: DataFrame | None = None) -> Staged:
        # The delta (and the source's keys) are written once, so the source is read once. What
        # the commit needs to know about it (the buckets it touches, its key range) is observed
        # on the way, at no extra pass.
        # A new key needs a new scheme (a range of its first column may not exist any more).
        keep_scheme = not (plan.replace_all or key_changed(plan))
        scheme = scheme_of(plan.lake.data_files()) if keep_scheme else None
        reread = _reread(plan)
        measures = [F.count(F.lit(1)).alias("rows"), F.count_if(reread).alias("reread")]
        if scheme is not None:
            bucket = bucket_of(delta, plan.primary_key, scheme)
            measures += [
                F.collect_set(F.when(~reread, bucket)).alias("buckets"),
                F.collect_set(F.when(reread, bucket)).alias("reread_buckets"),
            ]
        # Key ranges: of the whole delta on a first load (to size key ranges), else of the re-read
        # rows (to find their versions in the lake).
        bounded = _bounded_keys(delta, plan)
        for i, column in enumerate(bounded):
            key = F.col(f"`{column}`") if scheme is None else F.when(reread, F.col(f"`{column}`"))
            measures += [F.min(key).alias(f"low{i}"), F.max(key).alias(f"high{i}")]
        extracted = Observation("extracted")
        write_parquet(delta.observe(extracted, *measures), self._staged(plan, _DELTA), plan)
        if keys is not None:
            write_parquet(keys, self._staged(plan, _KEYS), plan)
        seen = extracted.get
        rows = int(seen.get("rows") or 0)
        key_ranges = tuple(
            (column, seen.get(f"low{i}"), seen.get(f"high{i}")) for i, column in enumerate(bounded)
        )
        if scheme is None:
            low, high = key_ranges[0][1:] if _integer_key(delta, plan) else (None, None)
            scheme = choose_scheme(plan, rows, low, high)
        return Staged(
            rows,
            rows,
            _DELTA,
            columns=column_types(delta.schema),
            buckets=frozenset(int(b) for b in seen.get("buckets") or []),
            scheme=scheme,
            key_ranges=key_ranges,
            reread_rows=int(seen.get("reread") or 0),
            reread_buckets=frozenset(int(b) for b in seen.get("reread_buckets") or []),
        )

    def commit(self, staged: Staged, plan: WritePlan) -> WriteOutcome:
        existing = plan.lake.data_files()
        scheme = staged.scheme
        assert scheme is not None
        schema = ", ".join(f"`{name}` {kind}" for name, kind in staged.columns)
        delta = conformed(self.spark.read.schema(schema).parquet(self._staged(plan, _DELTA)), plan)
        delta = delta.withColumn(_BUCKET, bucket_of(delta, plan.primary_key, scheme))
        gone = self._gone_keys(plan, existing, delta, scheme)
        if rewrites_every_bucket(plan, existing):
            replaced = existing
        else:
            touched = set(staged.buckets)
            if plan.reconcile:
                touched |= {row[0] for row in gone.select(_BUCKET).distinct().collect()}
            touched |= self._changed_by_rereads(plan, staged, delta, existing, touched)
            if not touched and not (plan.schema is not None and plan.schema.rewrites_lake):
                plan.lake.discard(plan.txn)
                return _unchanged(staged, delta)
            # Re-read rows in untouched buckets equal the lake's: leave those buckets alone.
            delta = delta.where(F.col(_BUCKET).isin(sorted(touched)))
            replaced = [f for f in existing if f.bucket is not None and f.bucket[1] in touched]
        lake_rows = self._read_bucketed(plan, replaced, scheme)
        merged, counts = _merge(delta, lake_rows, gone, plan)
        merged, rewritten = counted(merged, "rewritten")
        # The merge already clustered the rows by bucket (one shuffle): one task writes each bucket.
        write_parquet(merged, self._staged(plan, _MERGED), plan, partition_by=_BUCKET)
        adds = _named_adds(plan, scheme)
        commit_replacing(
            self.spark, plan, adds, replaced, {KEY: {"columns": list(plan.primary_key)}}
        )
        merge = MergeCounts(
            observed(counts, "inserted"), observed(counts, "updated"), observed(counts, "deleted")
        )
        return WriteOutcome(
            rows_extracted=staged.rows_extracted,
            rows_written=merge.inserted + merge.updated,
            files_written=len(adds),
            rows_rewritten=observed(rewritten),
            merge=merge,
            columns=column_types(merged.drop(_BUCKET).schema),
            files=tuple(final for _, final in adds),
        )

    def _staged(self, plan: WritePlan, subdir: str) -> str:
        return f"{plan.lake.staging_uri(plan.txn)}/{subdir}"

    def _read_lake(self, plan: WritePlan, files: list[DataFile]) -> DataFrame:
        # Every lake file carries one schema (a schema change rewrites them all): no inference.
        reader = self.spark.read
        if plan.schema is not None and plan.schema.lake is not None:
            reader = reader.schema(plan.schema.lake)
        return reader.parquet(*plan.lake.file_uris(files))

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
        if staged.reread_rows > REREAD_CHECK_ROWS:
            return set(candidates)
        keys = list(plan.primary_key)
        data = [c for c in delta.columns if c != _BUCKET]
        rows = delta.where(_reread(plan) & F.col(_BUCKET).isin(sorted(candidates))).select(
            *keys,
            _BUCKET,
            _row_hash(data).alias(_HASH),
            soft_deleted(delta, plan.delete_column).alias(_GONE),
        )
        files = [f for f in existing if f.bucket is not None and f.bucket[1] in candidates]
        if files:
            within = _within(staged.key_ranges, delta)
            lake = conformed(self._read_lake(plan, files).where(within), plan)
            rows = rows.join(lake.select(*keys, _row_hash(data).alias(_LAKE_HASH)), keys, "left")
        else:
            rows = rows.withColumn(_LAKE_HASH, F.lit(None).cast("long"))
        held = F.col(_LAKE_HASH).isNotNull()
        changes = F.when(F.col(_GONE), held).otherwise(~held | (F.col(_HASH) != F.col(_LAKE_HASH)))
        return {int(row[0]) for row in rows.where(changes).select(_BUCKET).distinct().collect()}

    def _read_bucketed(
        self, plan: WritePlan, files: list[DataFile], scheme: BucketScheme
    ) -> DataFrame | None:
        if not files:
            return None
        rows = conformed(self._read_lake(plan, files), plan)
        return rows.withColumn(_BUCKET, bucket_of(rows, plan.primary_key, scheme))

    def _gone_keys(
        self, plan: WritePlan, existing: list[DataFile], delta: DataFrame, scheme: BucketScheme
    ) -> DataFrame:
        """Keys in the lake that the source no longer has (empty unless reconciling deletes)."""
        key_columns = [F.col(f"`{c}`") for c in plan.primary_key]
        empty = delta.select(*key_columns, _BUCKET).limit(0)
        if not plan.reconcile or not existing:
            return empty.withColumn(_GONE, F.lit(True))
        in_lake = self._read_lake(plan, existing).select(*key_columns)
        in_source = self.spark.read.parquet(self._staged(plan, _KEYS))
        gone = (
            in_lake.join(in_source, list(plan.primary_key), "left_anti")
            .join(delta.select(*key_columns), list(plan.primary_key), "left_anti")
            .distinct()
        )
        return gone.withColumn(_BUCKET, bucket_of(gone, plan.primary_key, scheme)).withColumn(
            _GONE, F.lit(True)
        )


def rewrites_every_bucket(plan: WritePlan, existing: list[DataFile]) -> bool:
    """Whether this commit rewrites the whole table rather than the buckets the delta touches.

    A full refresh does; so does a merge into a lake with no bucket yet (a table whose every key
    was deleted: each delta row is new there), and one whose key changed: its columns (the lake
    records them in `_key`), or a column's type, since a key's bucket is a hash of its typed value
    (`decimal(12,0)` and `decimal(20,0)` hash apart). Every lake row is then bucketed again by the
    new key in the same commit.
    """
    if plan.replace_all or scheme_of(existing) is None or key_changed(plan):
        return True
    widened = plan.schema.widened if plan.schema is not None else ()
    return any(name in plan.primary_key for name, _, _ in widened)


def key_changed(plan: WritePlan) -> bool:
    """Whether the key's columns differ from the ones the lake's buckets hash (its `_key`)."""
    recorded = plan.lake.record(KEY)
    return recorded is not None and recorded["columns"] != list(plan.primary_key)


def scheme_of(existing: list[DataFile]) -> BucketScheme | None:
    """The lake's own bucketing wins over the config until the next full refresh."""
    for f in existing:
        if f.bucket is not None:
            return f.bucket[0]
    return None


def choose_scheme(plan: WritePlan, rows: int, low: int | None, high: int | None) -> BucketScheme:
    """Ranges of a single integer key keep recent keys together; any other key is hashed.

    A range holds about `bucket_rows` rows if the keys are as dense as in this snapshot, and at
    least `bucket_rows` key values, so a small first load doesn't leave a table of tiny buckets.
    """
    if low is None or high is None:
        return BucketScheme("hash", plan.buckets)
    span = high - low + 1
    width = max(plan.bucket_rows, -(-span * plan.bucket_rows // max(rows, 1)))
    return BucketScheme("range", width)


_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
# Key types whose values come back from Spark as Python values that are exact Spark literals.
_EXACT_LITERALS = (*_INTEGRAL, T.StringType, T.DateType, T.DecimalType)


def _integer_key(frame: DataFrame, plan: WritePlan) -> bool:
    return len(plan.primary_key) == 1 and isinstance(
        frame.schema[plan.primary_key[0]].dataType, _INTEGRAL
    )


def _bounded_keys(frame: DataFrame, plan: WritePlan) -> list[str]:
    """The key columns whose range in the delta can filter the lake."""
    return [c for c in plan.primary_key if isinstance(frame.schema[c].dataType, _EXACT_LITERALS)]


def _within(key_ranges: tuple[tuple[str, object, object], ...], frame: DataFrame) -> Column:
    condition = F.lit(True)
    for column, low, high in key_ranges:
        if low is not None and high is not None:
            kind = frame.schema[column].dataType
            condition = condition & F.col(f"`{column}`").between(
                F.lit(low).cast(kind), F.lit(high).cast(kind)
            )
    return condition


def _unchanged(staged: Staged, delta: DataFrame) -> WriteOutcome:
    return WriteOutcome(
        rows_extracted=staged.rows_extracted,
        rows_written=0,
        files_written=0,
        rows_rewritten=0,
        merge=MergeCounts(0, 0, 0),
        columns=column_types(delta.drop(_BUCKET).schema, with_batch=True),
    )


def bucket_of(frame: DataFrame, key: tuple[str, ...], scheme: BucketScheme) -> Column:
    """The key's bucket, independent of int widths and of the session time zone."""
    if scheme.kind == "range":
        return F.floor(F.col(f"`{key[0]}`").cast("bigint") / F.lit(scheme.size)).cast("bigint")
    parts = [_canonical(F.col(f"`{c}`"), frame.schema[c].dataType) for c in key]
    return F.pmod(F.xxhash64(*parts), F.lit(scheme.size)).cast("bigint")


def _canonical(column: Column, data_type: T.DataType) -> Column:
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return column.cast("bigint")
    if isinstance(data_type, T.TimestampType):
        return F.unix_micros(column)
    if isinstance(data_type, T.TimestampNTZType):
        return column.cast("string")
    if isinstance(data_type, T.DateType):
        return F.unix_date(column)
    return column


def _merge(
    delta: DataFrame, lake_rows: DataFrame | None, gone: DataFrame, plan: WritePlan
) -> tuple[DataFrame, Observation]:
    data_columns = [c for c in delta.columns if c != _BUCKET]
    incoming = delta.withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint")).withColumn(
        _SOURCE, F.lit(1)
    )
    combined = incoming
    if lake_rows is not None:
        combined = incoming.unionByName(
            lake_rows.withColumn(_SOURCE, F.lit(0)), allowMissingColumns=True
        )
    combined = combined.join(gone.drop(_BUCKET), list(plan.primary_key), "left")
    combined = combined.withColumn(_HASH, _row_hash(data_columns))
    # Clustering by bucket once serves both the per-key windows (bucket, key) and the writer.
    combined = combined.repartition(_BUCKET)
    by_key = W.partitionBy(F.col(_BUCKET), *[F.col(f"`{c}`") for c in plan.primary_key])
    ranked = (
        combined.withColumn(_RANK, F.row_number().over(by_key.orderBy(*_precedence(plan))))
        .withColumn(_IN_LAKE, F.max((F.col(_SOURCE) == 0).cast("int")).over(by_key))
        .withColumn(_IN_DELTA, F.max(F.col(_SOURCE)).over(by_key))
        .withColumn(_LAKE_HASH, F.max(F.when(F.col(_SOURCE) == 0, F.col(_HASH))).over(by_key))
    )
    winners = ranked.where(F.col(_RANK) == 1)
    deleted = _deleted(winners, plan)
    from_delta, in_lake = F.col(_SOURCE) == 1, F.col(_IN_LAKE) == 1
    counts = Observation("merge")
    winners = winners.observe(
        counts,
        F.sum((from_delta & ~in_lake & ~deleted).cast("long")).alias("inserted"),
        F.sum(
            (from_delta & in_lake & ~deleted & (F.col(_HASH) != F.col(_LAKE_HASH))).cast("long")
        ).alias("updated"),
        F.sum((deleted & in_lake).cast("long")).alias("deleted"),
    )
    kept = winners.where(~deleted)
    ordered = [c for c in kept.columns if not c.startswith("__") and c != BATCH_COLUMN] + [
        BATCH_COLUMN,
        _BUCKET,
    ]
    return kept.select(*[F.col(f"`{c}`") for c in ordered]), counts


def _reread(plan: WritePlan) -> Column:
    """Rows of this read that the lake may already hold as they are (`plan.boundary`)."""
    if plan.boundary is None or plan.replace_all:
        return F.lit(False)
    return F.coalesce(F.expr(render_window(plan.boundary, SPARK_SQL)), F.lit(False))


def _row_hash(columns: list[str]) -> Column:
    return F.xxhash64(*[F.col(f"`{c}`") for c in columns])


def _precedence(plan: WritePlan) -> list[Column]:
    """The order of a key's versions, the winner first; within the delta, cursor order holds."""
    cursor = [F.col(f"`{plan.cursor_column}`").desc_nulls_last()] if plan.cursor_column else []
    newest_source = F.col(_SOURCE).desc()
    if plan.replace_all or plan.delta_beats_lake:
        return [newest_source, *cursor, F.col(_HASH).desc()]
    return [*cursor, newest_source, F.col(_HASH).desc()]


def soft_deleted(frame: DataFrame, delete_column: str | None) -> Column:
    """Rows the merge removes by their delete column: a true flag, or any value of another type."""
    if not delete_column:
        return F.lit(False)
    column = F.col(f"`{delete_column}`")
    if isinstance(frame.schema[delete_column].dataType, T.BooleanType):
        return F.coalesce(column, F.lit(False))
    return column.isNotNull()


def _deleted(winners: DataFrame, plan: WritePlan) -> Column:
    deleted = F.coalesce(F.col(_GONE), F.lit(False)) | soft_deleted(winners, plan.delete_column)
    if plan.replace_all:
        deleted = deleted | (F.col(_IN_DELTA) == 0)
    return deleted


def _named_adds(plan: WritePlan, scheme: BucketScheme) -> list[tuple[str, str]]:
    adds = []
    for i, path in enumerate(plan.lake.staged_parquet(plan.txn, _MERGED)):
        bucket = int(path.split("/", 1)[0].split("=", 1)[1])
        name = f"part-{scheme.group(bucket)}-{plan.txn}-{i:05d}.parquet"
        adds.append((f"{_MERGED}/{path}", name))
    return adds
