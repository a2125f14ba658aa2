"""How an Iceberg merge table is partitioned by its key, chosen when the table is written whole
(a first load, a full refresh, a key change, a conversion).

A partition holds about `PARTITION_ROWS` rows: enough that a uniform merge, which touches every
partition, writes few delete files and few small data files, while a clustered one (recent keys)
reads and writes only the partitions its keys are in. Within a partition Iceberg sizes the files
itself and prunes them by their key ranges. A single integer key is partitioned in ranges
(`truncate`), so that recent keys stay together; any other key in hash buckets of its first
column (`bucket`). A table of fewer than two partitions' rows isn't partitioned.

Iceberg takes a width or a count up to 2**31-1 only (`MAX_PARAMETER`). A single integer key too
sparse for that (snowflake ids, random bigints, one far outlier) is partitioned like any other
key: in hash buckets of the key, one per `bucket_rows` (or `PARTITION_ROWS`) rows. Recent keys
are then spread over every bucket, but the table loads. A range that Iceberg can express is
kept even when a few outliers leave most partitions empty and the rest in one.

A table written whole again (a full refresh, a key change) takes the partitioning its settings
give then: a changed `buckets` or `bucket_rows` applies there, and only there. Iceberg names a
partition field a `CREATE TABLE` makes after its column and transform (`id_trunc`), and a
merge-on-read `MERGE INTO` fails on a table with two specs that give one name two meanings
("multiple fields for name _partition.id_trunc"). So an existing table's spec is changed in
place (`evolution`), each new field named after its parameter too (`id_trunc_2000`), and the
rows are then written under it; a table that must be created again (a column's type Iceberg
can't change) is created with each field as the table's field of the name a `CREATE` gives it
means it (`consistent_with`), then evolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.spark_api import T

PARTITION_ROWS = 2_000_000
# Iceberg's transforms take a Java int: "Unsupported width for transform" above it.
MAX_PARAMETER = 2**31 - 1
# Key types Iceberg's `bucket` transform takes.
_BUCKETABLE = frozenset(
    {"integer", "long", "decimal", "date", "timestamp", "timestamp_ntz", "string", "binary"}
)  # Spark's type names


_PARAMETRIZED = re.compile(r"^(bucket|truncate)\((\d+), (.+)\)$")


def bucketable(column_type: T.DataType) -> bool:
    return column_type.typeName() in _BUCKETABLE


def partition_spec(
    column: str,
    rows: int,
    key_range: tuple[int, int] | None,
    *,
    bucketable: bool,
    buckets: int | None = None,
    bucket_rows: int | None = None,
) -> tuple[str, ...]:
    """The partition transforms, as Spark SQL spells them, for a table of `rows` rows whose key's
    first `column` spans `key_range` (a single integer key) or is hashed.

    `bucket_rows` (rows a range holds) and `buckets` (hash buckets) are the table's settings; a
    setting the user gave is followed even for a small table. A range wider than Iceberg takes
    gives way to hash buckets, one per `bucket_rows` rows.
    """
    per = bucket_rows or PARTITION_ROWS
    if key_range is None:
        return _hashed(column, buckets or rows // per, bucketable)
    if bucket_rows is None and rows < 2 * per:
        return ()
    low, high = key_range
    width = max(1, -(-(high - low + 1) * per // max(rows, 1)))
    if width > MAX_PARAMETER:
        return _hashed(column, rows // per, bucketable)
    return (f"truncate({width}, {SPARK_SQL.quote(column)})",)


def _hashed(column: str, count: int, bucketable: bool) -> tuple[str, ...]:
    if count <= 1 or not bucketable:
        return ()
    return (f"bucket({min(count, MAX_PARAMETER)}, {SPARK_SQL.quote(column)})",)


def consistent_with(spec: tuple[str, ...], fields: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """`spec` as a `CREATE TABLE` of an existing table can make it: each bucket or truncate
    field that Iceberg would name as one of the table's fields (`id_trunc`) with the transform
    that field has (its parameter), so that no name gets a second meaning."""
    meaning = {name: transform for name, transform in reversed(list(fields))}
    return tuple(meaning.get(_auto_name(field), field) for field in spec)


def _auto_name(field: str) -> str:
    """The name Iceberg gives a field a `CREATE TABLE` makes: its column, then `_trunc` or
    `_bucket` (a column alone, for identity)."""
    match = _PARAMETRIZED.match(field)
    if match is None:
        return SPARK_SQL.unquote(field)
    return f"{SPARK_SQL.unquote(match[3])}_{'trunc' if match[1] == 'truncate' else 'bucket'}"


def evolution(current: tuple[str, ...], wanted: tuple[str, ...]) -> list[str]:
    """The `ALTER TABLE` clauses that make a table partitioned by `current` partitioned by
    `wanted` in place: the fields `wanted` lacks dropped, then the ones it adds, each named after
    its column, transform and parameter, a name no earlier spec gives another meaning."""
    clauses = [f"DROP PARTITION FIELD {field}" for field in current if field not in wanted]
    for field in wanted:
        if field not in current:
            clauses.append(f"ADD PARTITION FIELD {field} AS {SPARK_SQL.quote(_field_name(field))}")
    return clauses


def _field_name(field: str) -> str:
    match = _PARAMETRIZED.match(field)
    if match is None:
        return SPARK_SQL.unquote(field)
    kind = "trunc" if match[1] == "truncate" else match[1]
    return f"{SPARK_SQL.unquote(match[3])}_{kind}_{match[2]}"
