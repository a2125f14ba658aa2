"""The Spark side of the neutral transport: a column's exact value from epoch numbers or text.

Some values don't survive a JDBC driver exactly (see each database's module), so they travel as
epoch microseconds (timestamps), epoch days (dates) or text (wide decimals), and are rebuilt here
by pure arithmetic: no time zone is consulted, and a decimal the lake's type can't hold exactly
fails the run naming the column instead of being rounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.config import TableSpec
from incremental_assets.spark_api import F, T

if TYPE_CHECKING:
    from pyspark.sql import Column


def scalar_type(data_type: T.DataType) -> tuple[T.DataType, int]:
    """The type of a column, or of its arrays' elements, and how many array dimensions it has."""
    dimensions = 0
    while isinstance(data_type, T.ArrayType):
        data_type, dimensions = data_type.elementType, dimensions + 1
    return data_type, dimensions


def from_epoch(scalar: T.DataType, value: Column) -> Column:
    """A timestamp from epoch microseconds, a date from epoch days."""
    if isinstance(scalar, T.TimestampNTZType):
        # Pure arithmetic on wall-clock values: no time zone is consulted.
        epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
        return F.timestamp_add("MICROSECOND", value, epoch)
    if isinstance(scalar, T.TimestampType):
        return F.timestamp_micros(value)
    assert isinstance(scalar, T.DateType)
    return F.date_from_unix_date(value)


def decimal_fits(table: TableSpec, name: str, scalar: T.DecimalType, value: Column) -> Column:
    """The decimal a text holds, or a failure naming the column when `scalar` can't hold it."""
    message = F.concat(
        F.lit(f"column '{name}' of table '{table.name}' holds "),
        value,
        F.lit(
            f", which {scalar.simpleString()} can't hold exactly. Fix: declare the column "
            "with at most 38 digits, or cast it in `query:` (to text to keep every digit)"
        ),
    )
    fits = value.isNull() | value.rlike(_decimal_pattern(scalar))
    return F.when(fits, value.cast(scalar)).otherwise(F.raise_error(message))


def _decimal_pattern(data_type: T.DecimalType) -> str:
    """The text of a decimal that `data_type` holds exactly (trailing zeros aside)."""
    whole, scale = data_type.precision - data_type.scale, data_type.scale
    integer = f"[0-9]{{1,{whole}}}" if whole else "0"
    fraction = rf"(\.[0-9]{{1,{scale}}}0*)?" if scale else r"(\.0+)?"
    return f"^-?{integer}{fraction}$"
