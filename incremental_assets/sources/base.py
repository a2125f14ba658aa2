"""What every source offers the load, and the checks of a table's columns against its schema."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from incremental_assets.config import TableSpec
from incremental_assets.config.rules import TimeLimits
from incremental_assets.cursor import CursorType, CursorValue, decode_wire
from incremental_assets.dialects import Dialect
from incremental_assets.errors import ConfigError, CursorError, TableProblem
from incremental_assets.spark_api import T
from incremental_assets.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# By Spark's type name (`DataType.typeName()`): naming the classes would import pyspark.
_CURSOR_TYPES: dict[str, CursorType] = {
    "long": CursorType.INTEGER,
    "integer": CursorType.INTEGER,
    "short": CursorType.INTEGER,
    "byte": CursorType.INTEGER,
    "decimal": CursorType.DECIMAL,
    "date": CursorType.DATE,
    "timestamp_ntz": CursorType.TIMESTAMP,
    "timestamp": CursorType.TIMESTAMPTZ,
    "string": CursorType.STRING,
}
# A partition column is split by value; these cursor types have a wire form that is an integer.
SPLITTABLE = (CursorType.INTEGER, CursorType.DATE, CursorType.TIMESTAMPTZ)


@dataclass(frozen=True)
class Cursor:
    """The table's cursor, with its type settled against the source schema."""

    column: str
    type: CursorType


@dataclass(frozen=True)
class Partitioning:
    """Split the read on `column` into value ranges; `column` is integer, date or timestamptz."""

    column: str
    type: CursorType


@dataclass(frozen=True, kw_only=True)
class FreezeRequest:
    cursor: Cursor
    lower: CursorValue | None
    timezone: str
    partitioning: Partitioning | None = None
    limits: TimeLimits = dataclasses.field(default_factory=TimeLimits)
    below: CursorValue | None = None  # backfills: an exclusive upper limit

    def lagged(self, dialect: Dialect) -> str:
        """The SQL condition that a row is at least `safety_lag` old, or TRUE without a lag."""
        lag = self.limits.safety_lag
        if lag is None:
            return "TRUE"
        now = dialect.now_plus(self.cursor.type, -lag, self.timezone)
        return f"{dialect.quote(self.cursor.column)} <= {now}"


@dataclass(frozen=True)
class TransactionCap:
    """PostgreSQL's oldest open transaction, below whose start the upper bound was kept."""

    oldest_start: datetime | None  # None: no other transaction was open
    holder: str | None  # which session, for the metadata
    hidden_sessions: int  # sessions the role can't see: the cap may be incomplete
    rows_held_back: int  # rows the cap left for a later run
    limits: tuple[str, ...] = ()  # what else the cap could not see, and what was done about it


@dataclass(frozen=True)
class Bounds:
    """The result of the one query that freezes the upper bound before the read."""

    upper: CursorValue | None
    rows: int
    # The highest value in the window ignoring `safety_lag` and the transaction cap: a snapshot
    # (a full refresh) reads up to here, while the cursor it records stays at `upper`.
    newest: CursorValue | None = None
    partition_low: int | None = None
    partition_high: int | None = None
    null_rows: int = 0
    boundary_rows: int = 0  # rows sharing the upper bound's value
    future_cap: CursorValue | None = None  # the clock plus `future_tolerance`
    transaction: TransactionCap | None = None


class Source(Protocol):
    dialect: Dialect

    def describe(self) -> str: ...

    def schema(self) -> T.StructType: ...

    def freeze(self, request: FreezeRequest) -> Bounds: ...

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame: ...

    def read_keys(self) -> DataFrame: ...

    def primary_key(self) -> tuple[str, ...]: ...

    def match_key(self) -> tuple[str, ...]:
        """The columns a merge matches rows on: the key's, each compared as the database does.

        A key column the database compares by a collation ('a' = 'A ') is matched on its weight,
        a bookkeeping column (`weight_column`) that `read` and `read_keys` add beside it.
        """
        ...

    def weighed_by(self) -> dict[str, str]:
        """The collation each weight column is weighed by, by name (none if the source is empty).

        A weight only matches weights of the same collation: after the column's collation (or
        character set) changes, the lake's weights no longer match the source's.
        """
        ...


WEIGHT_PREFIX = "_weight_"


def weight_column(name: str) -> str:
    return f"{WEIGHT_PREFIX}{name}"


def cursor_type_of(data_type: T.DataType) -> CursorType | None:
    return _CURSOR_TYPES.get(data_type.typeName())


def resolve_cursor(table: TableSpec, schema: T.StructType) -> Cursor | None:
    """Settle the cursor's type from the schema, or check the declared one against it."""
    if table.cursor is None:
        return None
    field = _field(table, schema, table.cursor.column, "cursor")
    inferred = cursor_type_of(field.dataType)
    if inferred is None:
        raise ConfigError(
            TableProblem(
                table.name,
                f"column '{field.name}' is {field.dataType.simpleString()}, which can't serve as "
                "an exact cursor.",
                "cursor",
                "use an integer, decimal, date, timestamp, timestamptz or text column, or cast "
                "one in `query:`.",
            )
        )
    declared = table.cursor.declared_type
    if declared is not None and declared is not inferred:
        raise ConfigError(
            TableProblem(
                table.name,
                f"declared {declared.value}, but column '{field.name}' is "
                f"{field.dataType.simpleString()} ({inferred.value}) in the source.",
                "cursor.type",
                "correct the declared type, or remove it to use the source's.",
            )
        )
    return Cursor(field.name, inferred)


def freeze_window(request: FreezeRequest) -> Window:
    """The part of the freeze query's window a source renders itself: lower and backfill limit."""
    return Window(
        request.cursor.column,
        request.cursor.type,
        request.lower,
        request.below,
        upper_edge="open",
    )


def selected(table: TableSpec, schema: T.StructType) -> T.StructType:
    """The source schema narrowed to `columns:` or without `exclude_columns:`."""
    names = schema.fieldNames()
    wanted = table.columns if table.columns is not None else table.exclude_columns
    setting = "columns" if table.columns is not None else "exclude_columns"
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise ConfigError(
            TableProblem(
                table.name,
                f"{', '.join(unknown)} not in {table.source_object} (columns: {', '.join(names)}).",
                setting,
                "correct the column names.",
            )
        )
    if table.columns is not None:
        needed = [
            c
            for c in (
                table.cursor.column if table.cursor else None,
                *table.primary_key,
                table.delete_column,
            )
            if c
        ]
        missing = [c for c in needed if c not in table.columns and c in names]
        keep = set(table.columns) | set(missing)
        return T.StructType([f for f in schema.fields if f.name in keep])
    needed_names = {
        table.cursor.column if table.cursor else "",
        *table.primary_key,
        table.delete_column or "",
    }
    dropped = [c for c in table.exclude_columns if c in needed_names]
    if dropped:
        raise ConfigError(
            TableProblem(
                table.name,
                f"{', '.join(dropped)} is the cursor, the key or the delete column, which the load "
                "needs.",
                "exclude_columns",
                "keep it.",
            )
        )
    return T.StructType([f for f in schema.fields if f.name not in table.exclude_columns])


def check_columns(table: TableSpec, schema: T.StructType) -> None:
    """Every column the table names must exist in the source, and none may clash with ours."""
    for column in table.primary_key:
        _field(table, schema, column, "primary_key")
    if table.delete_column:
        _field(table, schema, table.delete_column, "delete_column")
    clashes = [f.name for f in schema.fields if f.name.startswith("_")]
    if clashes:
        raise ConfigError(
            TableProblem(
                table.name,
                f"source columns {', '.join(clashes)} start with '_', which the lake reserves for "
                "its bookkeeping columns.",
                fix="rename them in a `query:` (e.g. SELECT _x AS x ...).",
            )
        )


def _field(table: TableSpec, schema: T.StructType, column: str, setting: str) -> T.StructField:
    for field in schema.fields:
        if field.name == column:
            return field
    available = ", ".join(schema.fieldNames())
    raise ConfigError(
        TableProblem(
            table.name,
            f"column '{column}' is not in {table.source_object} (columns: {available}).",
            setting,
            "correct the column name.",
        )
    )


def choose_partitioning(
    table: TableSpec, schema: T.StructType, cursor: Cursor | None
) -> Partitioning | None:
    """Split on a single-column integer key if there is one, else on a splittable cursor."""
    if len(table.primary_key) == 1:
        key_type = cursor_type_of(
            _field(table, schema, table.primary_key[0], "primary_key").dataType
        )
        if key_type is CursorType.INTEGER:
            return Partitioning(table.primary_key[0], key_type)
    if cursor is not None and cursor.type in SPLITTABLE:
        return Partitioning(cursor.column, cursor.type)
    return None


def split_ranges(low: int, high: int, parts: int) -> list[tuple[int | None, int | None]]:
    """`parts` half-open ranges covering everything: the first open below, the last above.

    The open ends catch rows outside [low, high] (and NULLs, in the first range) so that no row is
    missed when the value bounds are stale by the time a partition runs.
    """
    parts = max(1, min(parts, high - low + 1))
    if parts == 1:
        return [(None, None)]
    step = (high - low + 1) / parts
    cuts = [low + math.ceil(step * i) for i in range(1, parts)]
    edges: list[int | None] = [None, *cuts, None]
    return list(itertools.pairwise(edges))


def partition_count(rows: int, rows_per_partition: int, max_partitions: int) -> int:
    return max(1, min(max_partitions, math.ceil(rows / rows_per_partition)))


def default_parallelism(spark: SparkSession) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        return int(spark.conf.get("spark.default.parallelism", "4") or 4)


def decode_upper(table: TableSpec, cursor: Cursor, wire: str | None) -> CursorValue | None:
    if wire is None:
        return None
    try:
        return decode_wire(cursor.type, wire)
    except CursorError as exc:
        raise CursorError(TableProblem(table.name, str(exc), "cursor")) from None


def join_conditions(conditions: Sequence[str]) -> str:
    kept = [c for c in conditions if c and c != "TRUE"]
    return " AND ".join(f"({c})" for c in kept) if kept else "TRUE"
