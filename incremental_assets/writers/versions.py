"""Which version of each key a merge keeps, and which keys it removes.

The delta and the lake rows of the touched buckets are ranked per key: the latest version by
cursor wins (the delta wins a tie with the lake; rows read now that tie with their key's winner
but differ are counted as clashes, which fail the commit, and identical copies are one row); with
a text cursor read over JDBC, or a snapshot, the delta always wins. Rows whose delete column is
set, keys gone from the source, and (for a snapshot) keys missing from it are removed.

Rows are hashed, and an Iceberg merge compares the lake's value with the delta's, in one
canonical form (`comparable_sql`): Spark neither hashes nor compares maps, and two equal maps may
list their entries in any order, so each map is the array of its entries sorted by key, through
arrays and structs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.spark_api import F, T, column_named, sql
from incremental_assets.writers.base import BATCH_COLUMN, WritePlan, null_safe_match

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, WindowSpec

BUCKET = "__bucket"
DELETED = "__deleted"
SOURCE, HASH, RANK, IN_LAKE, IN_DELTA, LAKE_HASH, GONE, CLASHES = (
    "__src",
    "__h",
    "__rn",
    "__in_lake",
    "__in_delta",
    "__lake_h",
    "__gone",
    "__clashes",
)
VERSIONS, KEY_CLASHES, KEY_ROWS = "__versions", "__key_clashes", "__key_rows"
CHANGED = "__changed"
COUNTED = ("rows", "null_keys", "clashes", "keys")


def ranked_merge(
    delta: DataFrame, lake_rows: DataFrame | None, gone: DataFrame, plan: WritePlan
) -> tuple[DataFrame, sql.Observation]:
    """Each key's winning version, deleted keys left out; inserted/updated/deleted are observed."""
    data_columns = [c for c in delta.columns if c != BUCKET]
    incoming = delta.withColumn(BATCH_COLUMN, F.lit(plan.batch).cast("bigint")).withColumn(
        SOURCE, F.lit(1)
    )
    combined = incoming
    if lake_rows is not None:
        combined = incoming.unionByName(
            lake_rows.withColumn(SOURCE, F.lit(0)), allowMissingColumns=True
        )
    combined = combined.join(gone.drop(BUCKET), list(plan.row_key), "left")
    combined = combined.withColumn(HASH, row_hash(data_columns, combined.schema))
    # Clustering by bucket once serves both the per-key windows (bucket, key) and the writer.
    combined = combined.repartition(BUCKET)
    by_key = sql.Window.partitionBy(F.col(BUCKET), *[column_named(c) for c in plan.row_key])
    in_order = by_key.orderBy(*precedence(plan))
    ranked = (
        combined.withColumn(RANK, F.row_number().over(in_order))
        .withColumn(IN_LAKE, F.max((F.col(SOURCE) == 0).cast("int")).over(by_key))
        .withColumn(IN_DELTA, F.max(F.col(SOURCE)).over(by_key))
        .withColumn(LAKE_HASH, F.max(F.when(F.col(SOURCE) == 0, F.col(HASH))).over(by_key))
        .withColumn(CLASHES, F.lit(0) if plan.key_enforced else _clashes(plan, in_order))
    )
    # Observed before the winners are picked, so that the losing rows' clashes are counted too.
    winner, deleted = F.col(RANK) == 1, deleted_rows(ranked, plan)
    from_delta, in_lake = winner & (F.col(SOURCE) == 1), F.col(IN_LAKE) == 1
    counts = sql.Observation("merge")
    ranked = ranked.observe(
        counts,
        F.sum((from_delta & ~in_lake & ~deleted).cast("long")).alias("inserted"),
        F.sum(
            (from_delta & in_lake & ~deleted & (F.col(HASH) != F.col(LAKE_HASH))).cast("long")
        ).alias("updated"),
        F.sum((winner & deleted & in_lake).cast("long")).alias("deleted"),
        F.sum(F.col(CLASHES)).alias("clashes"),
    )
    winners = ranked.where(winner)
    kept = winners.where(~deleted)
    ordered = [c for c in kept.columns if not c.startswith("__") and c != BATCH_COLUMN] + [
        BATCH_COLUMN,
        BUCKET,
    ]
    return kept.select(*[column_named(c) for c in ordered]), counts


def latest_versions(
    delta: DataFrame, plan: WritePlan, lake_rows: DataFrame | None = None
) -> DataFrame:
    """Each key's latest version in `delta` (and `lake_rows`, which lose a tie), with `DELETED`
    saying whether its delete column (or the delta's own `DELETED`: a log's) deletes its key,
    and its key's counts (`VERSIONS` of the delta's rows, `KEY_CLASHES`) for `version_counts`,
    which reads them once the winners are
    kept (an observation of a frame kept with `localCheckpoint` never reaches a Spark Connect
    client). With `lake_rows`, also whether the key is in the lake (`IN_LAKE`) and whether the
    winner is a delta version that differs from the lake's (`CHANGED`).

    For a merge that matches the delta with the lake row by row (an Iceberg `MERGE INTO`, which
    takes at most one version of a key), and for a table whose rows are matched again under a
    new key.
    """
    marked = DELETED in delta.columns  # a log's delta says itself which keys it deletes
    data_columns = [c for c in delta.columns if c != DELETED]
    key = [column_named(c) for c in plan.row_key]
    from_delta = F.col(SOURCE) == 1
    rows = delta.withColumn(SOURCE, F.lit(1))
    if lake_rows is not None:
        rows = rows.unionByName(lake_rows.withColumn(SOURCE, F.lit(0)), allowMissingColumns=True)
    content = [c for c in data_columns if c != BATCH_COLUMN]  # a version is its data, not its run
    hashed = rows.withColumn(HASH, row_hash(content, rows.schema))
    by_key = sql.Window.partitionBy(*key)
    in_order = by_key.orderBy(*precedence(plan))
    ranked = (
        hashed.withColumn(RANK, F.row_number().over(in_order))
        .withColumn(CLASHES, F.lit(0) if plan.key_enforced else _clashes(plan, in_order))
        .withColumn(VERSIONS, F.sum(from_delta.cast("long")).over(by_key))
        .withColumn(KEY_CLASHES, F.sum(F.col(CLASHES)).over(by_key))
    )
    if lake_rows is not None:
        lake_hash = F.max(F.when(~from_delta, F.col(HASH))).over(by_key)
        ranked = ranked.withColumn(IN_LAKE, lake_hash.isNotNull()).withColumn(
            CHANGED, from_delta & ~F.coalesce(F.col(HASH) == lake_hash, F.lit(False))
        )
    deleted = soft_deleted(ranked, plan.delete_column)
    if marked:
        deleted = deleted | F.coalesce(F.col(DELETED), F.lit(False))
    winners = ranked.where(F.col(RANK) == 1).withColumn(DELETED, deleted)
    compared = [IN_LAKE, CHANGED] if lake_rows is not None else []
    return winners.select(
        *[column_named(c) for c in data_columns], DELETED, VERSIONS, KEY_CLASHES, *compared
    )


def version_counts(
    winners: DataFrame, plan: WritePlan, spanned: str | None = None
) -> dict[str, int]:
    """The delta's `rows`, those with a NULL key (`null_keys`), and `clashes`, summed over the
    winners `latest_versions` chose (a key's NULL makes its winner's whole key NULL-keyed), and
    the winners' own count (`keys`: reconcile's gone keys among them); with `spanned`, an
    integer column, also its `low` and `high` (absent if the delta has none)."""
    null_key = F.lit(False)
    for column in plan.row_key:
        null_key = null_key | column_named(column).isNull()
    spans = []
    if spanned is not None:
        span = F.col(SPARK_SQL.quote(spanned))
        spans = [F.min(span).alias("low"), F.max(span).alias("high")]
    # One task sums the kept rows: a job, where a global aggregate over several partitions takes
    # two (its shuffle is a job of its own), at a fixed cost of a tenth of a second or so.
    row = (
        winners.coalesce(1)
        .agg(
            F.sum(VERSIONS).alias("rows"),
            F.sum(F.when(null_key, F.col(VERSIONS))).alias("null_keys"),
            F.sum(KEY_CLASHES).alias("clashes"),
            F.count(F.lit(1)).alias("keys"),
            *spans,
        )
        .first()
    )
    seen = row.asDict() if row is not None else {}
    counts = {name: int(seen.get(name) or 0) for name in COUNTED}
    return counts | {n: int(seen[n]) for n in ("low", "high") if seen.get(n) is not None}


def with_key_rows(merged: DataFrame, plan: WritePlan) -> DataFrame:
    """`merged`, each row with how many written rows share its key (`KEY_ROWS`).

    The rows are clustered by bucket (if they have one) and sorted by key already (the ranking's
    window), so the count needs no pass of its own.
    """
    buckets = [F.col(BUCKET)] if BUCKET in merged.columns else []
    by_key = sql.Window.partitionBy(*buckets, *[column_named(c) for c in plan.row_key])
    return merged.withColumn(KEY_ROWS, F.count(F.lit(1)).over(by_key))


def duplicate_keys(among: Column | None = None) -> Column:
    """Keys more than one row of a `with_key_rows` frame has (of the rows `among` holds for):
    each of a key's n rows adds 1/n."""
    twice = F.col(KEY_ROWS) > 1 if among is None else among & (F.col(KEY_ROWS) > 1)
    share = F.when(twice, F.lit(1.0) / F.col(KEY_ROWS)).otherwise(F.lit(0.0))
    return F.round(F.sum(share)).alias("duplicate_keys")


def with_key_count(merged: DataFrame, plan: WritePlan) -> tuple[DataFrame, sql.Observation]:
    """`merged`, observed for keys that more than one written row has (`primary_key_unique`):
    the count rides on the write, with no pass over the files once they are written."""
    duplicates = sql.Observation("keys")
    observed = with_key_rows(merged, plan).observe(duplicates, duplicate_keys())
    return observed.drop(KEY_ROWS), duplicates


def patched_merge(
    delta: DataFrame, lake_rows: DataFrame | None, gone: DataFrame, plan: WritePlan
) -> tuple[DataFrame, sql.Observation]:
    """`_merge`, with the lake rows of keys the delta doesn't name passed through as they are."""
    if lake_rows is None:
        return ranked_merge(delta, None, gone, plan)
    keys = list(plan.row_key)
    named = F.broadcast(
        delta.select(*[column_named(c) for c in keys])
        .unionByName(gone.select(*[column_named(c) for c in keys]))
        .distinct()
        .alias("named")
    )
    rows = lake_rows.alias("lake")
    matching = null_safe_match("lake", "named", keys)
    untouched = rows.join(named, matching, "left_anti")
    contested = rows.join(named, matching, "left_semi")
    winners, counts = ranked_merge(delta, contested, gone, plan)
    columns = [column_named(c) for c in winners.columns]
    return untouched.select(*columns).unionByName(winners), counts


def _clashes(plan: WritePlan, in_order: WindowSpec) -> Column:
    """1 for a row read now that differs from the one ranked just above it, also read now, at the
    same cursor value: the key doesn't identify one row of the source, and which one wins is
    arbitrary. (Versions rank by cursor, then by hash: identical copies sit together.)"""
    above = [F.lag(F.col(SOURCE)).over(in_order) == 1, F.lag(F.col(HASH)).over(in_order)]
    same_cursor = F.lit(True)
    if plan.cursor_column:
        cursor = column_named(plan.cursor_column)
        same_cursor = cursor.eqNullSafe(F.lag(cursor).over(in_order))
    clash = (F.col(SOURCE) == 1) & above[0] & (F.col(HASH) != above[1]) & same_cursor
    return F.coalesce(clash, F.lit(False)).cast("long")


def row_hash(columns: list[str], schema: T.StructType) -> Column:
    """The hash of the row's `columns`: each in its canonical form (`comparable_sql`, which needs
    its type), beside whether it is NULL (xxhash64 skips NULLs, so without the flags a row with
    (NULL, 'x') would hash as one with ('x', NULL), and a NULL array as an empty one). A nested
    value is hashed as its JSON, NULLs inside it spelled out: xxhash64 skips those too, so
    ['x'] and ['x', NULL] would hash alike."""
    parts: list[Column] = []
    for c in columns:
        column = SPARK_SQL.quote(c)
        value = comparable_sql(column, schema[c].dataType)
        if isinstance(schema[c].dataType, T.ArrayType | T.StructType | T.MapType):
            value = f"to_json(named_struct('v', {value}), map('ignoreNullFields', 'false'))"
        parts += [F.expr(value), F.col(column).isNull()]
    return F.xxhash64(*parts)


def comparable_sql(reference: str, data_type: T.DataType, depth: int = 0) -> str:
    """Spark SQL for the value at `reference` (of `data_type`) in a form Spark hashes and compares,
    equal exactly when the values are: each map the array of its entries (`k`, `v`) sorted by
    key, through arrays, structs and map values; a value holding no map as it is.

    Map keys need no sorting of their own (Spark refuses maps in map keys) and are unique, so the
    order is total. `depth` keeps nested lambdas' variables apart.
    """
    if not _holds_map(data_type):
        return reference
    if isinstance(data_type, T.MapType):
        entry, left, right = f"e{depth}", f"l{depth}", f"r{depth}"
        value = comparable_sql(f"{entry}.value", data_type.valueType, depth + 1)
        entries = (
            f"transform(map_entries({reference}), "
            f"{entry} -> named_struct('k', {entry}.key, 'v', {value}))"
        )
        by_key = (
            f"CASE WHEN {left}.k < {right}.k THEN -1 WHEN {left}.k > {right}.k THEN 1 ELSE 0 END"
        )
        return f"array_sort({entries}, ({left}, {right}) -> {by_key})"
    if isinstance(data_type, T.ArrayType):
        element = f"x{depth}"
        inner = comparable_sql(element, data_type.elementType, depth + 1)
        return f"transform({reference}, {element} -> {inner})"
    assert isinstance(data_type, T.StructType), data_type
    fields = ", ".join(
        f"'f{i}', {comparable_sql(f'{reference}.{SPARK_SQL.quote(f.name)}', f.dataType, depth)}"
        for i, f in enumerate(data_type.fields)
    )
    return f"CASE WHEN {reference} IS NULL THEN NULL ELSE named_struct({fields}) END"


def _holds_map(data_type: T.DataType) -> bool:
    if isinstance(data_type, T.MapType):
        return True
    if isinstance(data_type, T.ArrayType):
        return _holds_map(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return any(_holds_map(f.dataType) for f in data_type.fields)
    return False


def precedence(plan: WritePlan) -> list[Column]:
    """The order of a key's versions, the winner first; within the delta, cursor order holds."""
    cursor = [column_named(plan.cursor_column).desc_nulls_last()] if plan.cursor_column else []
    newest_source = F.col(SOURCE).desc()
    if plan.replace_all or plan.delta_beats_lake:
        return [newest_source, *cursor, F.col(HASH).desc()]
    return [*cursor, newest_source, F.col(HASH).desc()]


def soft_deleted(frame: DataFrame, delete_column: str | None) -> Column:
    """Rows the merge removes by their delete column: a true flag, or any value of another type.

    An integer column is a flag too (MySQL's BOOLEAN is a TINYINT(1)): any value but 0 deletes.
    """
    if not delete_column:
        return F.lit(False)
    column = column_named(delete_column)
    kind = frame.schema[delete_column].dataType
    if isinstance(kind, T.BooleanType):
        return F.coalesce(column, F.lit(False))
    if isinstance(kind, T.IntegralType):
        return F.coalesce(column != 0, F.lit(False))
    return column.isNotNull()


def deleted_rows(winners: DataFrame, plan: WritePlan) -> Column:
    deleted = F.coalesce(F.col(GONE), F.lit(False)) | soft_deleted(winners, plan.delete_column)
    if plan.replace_all:
        deleted = deleted | (F.col(IN_DELTA) == 0)
    return deleted
