"""What an Iceberg merge does to each key, decided before anything is written.

The delta's winners (each key's latest version, `versions.latest_versions`, with the keys
reconcile found gone) are matched with the lake's rows of their keys only: a join that
broadcasts each winner's key, row hash, cursor and flags to the table's scan, so the table is
never shuffled (a `MERGE INTO` with an insert clause is an outer join that shuffles the whole
table with its row positions). Per key:

    replaced   the key is in the lake and the delta changes it: gone from the source, or the
               delta's version is as new as every lake row of the key (the delta wins a tie)
               and deletes the key or differs from one of them (by the row hash of
               `versions.row_hash`, maps in their canonical form, as re-read rows are compared
               everywhere)
    inserted   the delta's version is written: not a delete, and the key is new or replaced

The commit then removes the replaced keys' lake rows (a `MERGE ... WHEN MATCHED THEN DELETE`,
an inner join that broadcasts the keys and reads only the table's key columns) and appends the
inserted rows, both on the run's branch: the table is read twice, and shuffled never. An update
is thus a delete and an insert: on a format v3 table the new version gets a new row id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.spark_api import F, sql
from incremental_assets.writers.base import BATCH_COLUMN, WritePlan
from incremental_assets.writers.versions import DELETED, GONE, HASH, row_hash

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

LAKE_ROWS, REPLACED, INSERTED = "__lake_rows", "__replaced", "__inserted"
_FROM_LAKE, _NEWER, _CHANGES = "__from_lake", "__newer", "__changes"
_CURSOR = "__s_cursor"
# Winners (keys) up to this many are broadcast to the table's scan, about 40 bytes each; a larger
# delta is joined by shuffling both sides, as any large join (Spark's own choice).
BROADCAST_ROWS = 2_000_000


@dataclass(frozen=True)
class Tally:
    inserted: int
    updated: int
    deleted: int
    duplicate_keys: int  # touched keys the lake still holds more than once after the merge
    replaced_keys: int  # keys whose lake rows the merge deletes

    @property
    def changes(self) -> bool:
        return bool(self.inserted or self.replaced_keys)


def decided(
    lake: DataFrame, winners: DataFrame, plan: WritePlan, key_range: KeyRange | None, keys: int
) -> DataFrame:
    """`winners`, each with how many lake rows its key has (`LAKE_ROWS`), whether the merge
    replaces them (`REPLACED`) and whether it writes the winner (`INSERTED`). `keys`: how many
    winners there are (gone keys included), which decides the broadcast.

    The matched pairs go back to their winners in one shuffle of both (a window over the key),
    not an aggregate joined back: a Spark job less per run."""
    key = [SPARK_SQL.quote(c) for c in plan.row_key]
    content = [c for c in winners.columns if c not in (DELETED, GONE, BATCH_COLUMN)]
    # The winners' side is renamed so that the lake's columns keep their own names past the join:
    # each lake row is hashed after it (only the matched ones), not all of the table's before.
    probe = [F.col(c).alias(f"__s{i}") for i, c in enumerate(key)]
    cursor = plan.cursor_column if plan.cursor_column and not plan.delta_beats_lake else None
    if cursor is not None and cursor not in plan.row_key:
        probe.append(F.col(SPARK_SQL.quote(cursor)).alias(_CURSOR))
    narrow = winners.select(*probe, row_hash(content, winners.schema).alias(HASH), DELETED, GONE)
    if key_range is not None:
        lake = lake.where(key_range.condition())
    newer = F.lit(True)
    if cursor is not None:
        theirs = f"__s{plan.row_key.index(cursor)}" if cursor in plan.row_key else _CURSOR
        mine = F.col(SPARK_SQL.quote(cursor))
        newer = mine.isNull() | (F.col(theirs) >= mine)
    on = F.lit(True)
    for i, column in enumerate(key):
        on = on & (F.col(column) == F.col(f"__s{i}"))
    pairs = lake.join(_broadcast_if_small(narrow, keys), on, "inner").select(
        *[F.col(c).alias(name) for c, name in zip(key, plan.row_key, strict=True)],
        F.coalesce(newer, F.lit(False)).alias(_NEWER),
        (F.col(DELETED) | (row_hash(content, lake.schema) != F.col(HASH))).alias(_CHANGES),
        F.lit(1).alias(_FROM_LAKE),
    )
    both = winners.withColumn(_FROM_LAKE, F.lit(0)).unionByName(pairs, allowMissingColumns=True)
    by_key = sql.Window.partitionBy(*key)
    # Every lake row of the key no newer than the delta's version, and one of them changed.
    replaces = F.col(GONE) | (
        F.coalesce(F.min(_NEWER).over(by_key), F.lit(False))
        & F.coalesce(F.max(_CHANGES).over(by_key), F.lit(False))
    )
    matched = (
        both.withColumn(LAKE_ROWS, F.sum(_FROM_LAKE).over(by_key))
        .withColumn(REPLACED, replaces)
        .where(F.col(_FROM_LAKE) == 0)
        .drop(_FROM_LAKE, _NEWER, _CHANGES)
    )
    in_lake = F.col(LAKE_ROWS) > 0
    written = ~F.col(DELETED) & ~F.col(GONE) & (~in_lake | F.col(REPLACED))
    return matched.withColumn(REPLACED, in_lake & F.col(REPLACED)).withColumn(INSERTED, written)


def tally(decisions: DataFrame) -> Tally:
    in_lake, replaced, inserted = (
        F.col(LAKE_ROWS) > 0,
        F.col(REPLACED),
        F.col(INSERTED),
    )
    removed = replaced & ~inserted
    row = (
        decisions.coalesce(1)
        .agg(  # one job, as `versions.version_counts`
            F.count_if(inserted & ~in_lake).alias("inserted"),
            F.count_if(inserted & in_lake).alias("updated"),
            F.sum(F.when(removed, F.col(LAKE_ROWS))).alias("deleted"),
            F.count_if(in_lake & ~replaced & (F.col(LAKE_ROWS) > 1)).alias("duplicate_keys"),
            F.count_if(replaced).alias("replaced_keys"),
        )
        .first()
    )
    seen = row.asDict() if row is not None else {}
    return Tally(**{name: int(seen.get(name) or 0) for name in Tally.__dataclass_fields__})


@dataclass(frozen=True)
class KeyRange:
    """The span of a single integer key's values a merge touches: a static filter Iceberg prunes
    data files by (their key's lower and upper bounds), which its runtime filter doesn't."""

    column: str
    low: int
    high: int

    def condition(self) -> Column:
        return F.expr(self.sql(""))

    def sql(self, prefix: str) -> str:
        return f"{prefix}{SPARK_SQL.quote(self.column)} BETWEEN {self.low} AND {self.high}"


def delete_sql(target: str, view: str, plan: WritePlan, key_range: KeyRange | None) -> str:
    """The MERGE that deletes every lake row of the keys in `view`: one DELETE clause, so an
    inner join with no cardinality check, that broadcasts the keys and reads only the key
    columns of the table."""
    on = " AND ".join(f"t.{SPARK_SQL.quote(c)} = s.{SPARK_SQL.quote(c)}" for c in plan.row_key)
    if key_range is not None:
        on += f" AND {key_range.sql('t.')}"
    return f"MERGE INTO {target} t USING {view} s ON {on} WHEN MATCHED THEN DELETE"


def replaced_keys(decisions: DataFrame, plan: WritePlan, keys: int) -> DataFrame:
    replaced = decisions.where(F.col(REPLACED))
    return _broadcast_if_small(replaced.select(*[SPARK_SQL.quote(c) for c in plan.row_key]), keys)


def inserted_rows(decisions: DataFrame) -> DataFrame:
    return decisions.where(F.col(INSERTED)).drop(DELETED, GONE, LAKE_ROWS, REPLACED, INSERTED)


def _broadcast_if_small(frame: DataFrame, keys: int) -> DataFrame:
    return frame.hint("broadcast") if keys <= BROADCAST_ROWS else frame
