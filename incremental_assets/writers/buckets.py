"""How a merge table's keys map to buckets: ranges of an integer key, else a hash of the key.

Each data file of a merge table holds one bucket. A key always lands in the same bucket, so a
merge reads and rewrites only the buckets its delta touches; the lake's own scheme wins over the
configuration until a change of key or a full refresh buckets the table again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.lake import BucketScheme, DataFile
from incremental_assets.spark_api import F, T, column_named
from incremental_assets.writers.base import WritePlan

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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
    recorded = plan.facts.key_columns
    return recorded is not None and recorded != list(plan.row_key)


def scheme_of(existing: list[DataFile]) -> BucketScheme | None:
    """The lake's own bucketing wins over the config until the next full refresh."""
    for f in existing:
        if f.bucket is not None:
            return f.bucket[0]
    return None


# Without `bucket_rows`, a range holds about 1/64 of the first load, and 10,000 to 1,000,000 rows:
# a clustered change rewrites a few ranges however big the table, a uniform one about all of them
# (and then the whole table is cheaper: `rewrites_most_buckets`).
RANGES = 64
RANGE_ROWS = (10_000, 1_000_000)
# Without `buckets`, about a million rows a hash bucket, and at least 16 buckets.
HASH_ROWS, HASH_BUCKETS = 1_000_000, (16, 4096)


def choose_scheme(plan: WritePlan, rows: int, low: int | None, high: int | None) -> BucketScheme:
    """Ranges of a single integer key keep recent keys together; any other key is hashed.

    A range holds about `bucket_rows` rows (by default a 64th of this snapshot, within bounds) if
    the keys are as dense as in this snapshot, and at least as many key values, so a small first
    load doesn't leave a table of tiny buckets. A key so sparse that a range would be wider than
    a bigint (ids over the whole bigint range in a small load) is hashed instead.
    """
    auto = max(HASH_BUCKETS[0], min(HASH_BUCKETS[1], rows // HASH_ROWS))
    if low is None or high is None:
        return BucketScheme("hash", plan.buckets or auto)
    target = plan.bucket_rows or max(RANGE_ROWS[0], min(RANGE_ROWS[1], rows // RANGES))
    span = high - low + 1
    width = max(target, -(-span * target // max(rows, 1)))
    if width > _BIGINT_MAX:
        # Too sparse for ranges (snowflake ids, random bigints): hashed.
        return BucketScheme("hash", plan.buckets or auto)
    return BucketScheme("range", width)


_BIGINT_MAX = 2**63 - 1
_INTEGRAL = frozenset({"byte", "short", "integer", "long"})  # Spark's type names
# Key types whose values come back from Spark as Python values that are exact Spark literals.
_EXACT_LITERALS = _INTEGRAL | {"string", "date", "decimal"}


def integer_key(frame: DataFrame, plan: WritePlan) -> bool:
    return len(plan.row_key) == 1 and frame.schema[plan.row_key[0]].dataType.typeName() in _INTEGRAL


def bounded_keys(frame: DataFrame, plan: WritePlan) -> list[str]:
    """The key columns whose range in the delta can filter the lake."""
    return [c for c in plan.row_key if frame.schema[c].dataType.typeName() in _EXACT_LITERALS]


def bucket_of(frame: DataFrame, key: tuple[str, ...], scheme: BucketScheme) -> Column:
    """The key's bucket, independent of int widths and of the session time zone."""
    if scheme.kind == "range":
        return F.floor(column_named(key[0]).cast("bigint") / F.lit(scheme.size)).cast("bigint")
    parts = [_canonical(column_named(c), frame.schema[c].dataType) for c in key]
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
