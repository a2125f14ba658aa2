"""Schema evolution: what the lake's schema becomes when the source's changes.

* a column added to the source is added to the lake; older rows read it as NULL;
* a column dropped from the source stays in the lake; newer rows hold NULL;
* a type may widen (int -> bigint, float -> double, a decimal with more digits);
* anything else is refused before a single file is written.

When the lake's schema changes, every file the commit doesn't already replace is rewritten to the
new schema in the same commit, so plain readers (which take one file's schema) see one schema.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from incremental_assets.errors import TableProblem, WriteError
from incremental_assets.spark_api import F, T, column_named

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Each integral type by the decimal digits its largest value has, narrowest first.
_INTEGRAL_DIGITS: dict[str, int] = {"byte": 3, "short": 5, "integer": 10, "long": 19}
_BOOKKEEPING = "_"


@dataclass(frozen=True)
class SchemaChange:
    target: T.StructType  # the lake's data columns after this run, bookkeeping excluded
    lake: T.StructType | None = None  # the lake's schema before this run, bookkeeping included
    added: tuple[str, ...] = ()
    widened: tuple[tuple[str, str, str], ...] = ()
    dropped: tuple[str, ...] = ()

    @property
    def rewrites_lake(self) -> bool:
        return bool(self.added or self.widened)

    def describe(self) -> str:
        parts = [f"added {', '.join(self.added)}"] if self.added else []
        parts += [f"widened {name} {old} -> {new}" for name, old, new in self.widened]
        parts += (
            [f"kept {', '.join(self.dropped)} (no longer in the source)"] if self.dropped else []
        )
        return "; ".join(parts)


def plan_schema_change(
    table_name: str, lake: T.StructType | None, source: T.StructType
) -> SchemaChange:
    """Merge the source schema into the lake's, or refuse with both types named."""
    if lake is None:
        return SchemaChange(source)
    existing = {f.name: f for f in lake.fields if not f.name.startswith(_BOOKKEEPING)}
    fields, added, widened = [], [], []
    for field in source.fields:
        old = existing.pop(field.name, None)
        if old is None:
            added.append(field.name)
            fields.append(field)
        elif old.dataType == field.dataType:
            fields.append(old)
        elif _widens(old.dataType, field.dataType):
            widened.append((field.name, old.dataType.simpleString(), field.dataType.simpleString()))
            fields.append(field)
        else:
            raise WriteError(
                TableProblem(
                    table_name,
                    f"column '{field.name}' is {old.dataType.simpleString()} in the lake but "
                    f"{field.dataType.simpleString()} in the source, and the lake can't hold both. "
                    "Nothing was written and the cursor did not move.",
                    fix="cast the column back in `query:`, or run a full refresh (asset config "
                    "full_refresh: true) to rebuild the table with the new type.",
                )
            )
    dropped = [T.StructField(name, f.dataType, True) for name, f in existing.items()]
    order = [f.name for f in lake.fields if not f.name.startswith(_BOOKKEEPING)]
    by_name = {f.name: f for f in [*fields, *dropped]}
    ordered = [by_name[n] for n in order if n in by_name] + [by_name[n] for n in added]
    return SchemaChange(
        T.StructType(ordered),
        lake=lake,
        added=tuple(added),
        widened=tuple(widened),
        dropped=tuple(f.name for f in dropped),
    )


def _widens(old: T.DataType, new: T.DataType) -> bool:
    digits = _INTEGRAL_DIGITS.get(old.typeName())
    if digits is not None and new.typeName() in _INTEGRAL_DIGITS:
        return _INTEGRAL_DIGITS[new.typeName()] > digits
    if digits is not None and isinstance(new, T.DecimalType):
        # BIGINT -> BIGINT UNSIGNED (decimal(20,0)) on MySQL, integer -> numeric on PostgreSQL.
        return new.precision - new.scale >= digits
    if isinstance(old, T.FloatType) and isinstance(new, T.DoubleType):
        return True
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return False


def conform(frame: DataFrame, target: T.StructType) -> DataFrame:
    """The frame with exactly the target's data columns (cast, or NULL where missing), then ours."""
    if [
        (f.name, f.dataType) for f in frame.schema.fields if not f.name.startswith(_BOOKKEEPING)
    ] == [(f.name, f.dataType) for f in target.fields]:
        return frame
    present = set(frame.columns)
    columns = [
        (
            column_named(f.name).cast(f.dataType)
            if f.name in present
            else F.lit(None).cast(f.dataType)
        ).alias(f.name)
        for f in target.fields
    ]
    bookkeeping = [column_named(c) for c in frame.columns if c.startswith(_BOOKKEEPING)]
    return frame.select(*columns, *bookkeeping)


@dataclass(frozen=True)
class ColumnHistory:
    """An append table's record of since which batch the source has had each column.

    A column the source adds (or takes back after dropping it) holds NULL in the batches written
    before; one it drops holds NULL in the batches written since. Rows read again are compared
    with an earlier batch only on the columns that batch and the source both really hold.
    """

    since: Mapping[str, int] = dataclasses.field(
        default_factory=dict
    )  # absent: there from the start
    absent: frozenset[str] = frozenset()  # in the lake, no longer in the source

    @staticmethod
    def from_record(record: Mapping[str, Any] | None) -> ColumnHistory:
        if record is None:
            return ColumnHistory()
        since = {str(k): int(v) for k, v in record.get("since", {}).items()}
        return ColumnHistory(since, frozenset(record.get("absent", [])))

    def to_record(self) -> dict[str, Any]:
        return {"since": dict(sorted(self.since.items())), "absent": sorted(self.absent)}

    def after(self, change: SchemaChange, batch: int) -> ColumnHistory:
        """The history once `batch` is written with `change`."""
        in_source = set(_source_columns(change)) | set(change.added)
        since = dict(self.since)
        for name in in_source:
            if name in change.added or name in self.absent:
                since[name] = batch
        return ColumnHistory(since, frozenset((self.absent - in_source) | set(change.dropped)))

    def comparable(self, change: SchemaChange, earliest_batch: int) -> list[str]:
        """The columns the source holds now and every batch from `earliest_batch` on held too."""
        return [
            name
            for name in _source_columns(change)
            if name not in change.added and self.since.get(name, 0) <= earliest_batch
        ]


def _source_columns(change: SchemaChange) -> list[str]:
    return [f.name for f in change.target.fields if f.name not in change.dropped]
