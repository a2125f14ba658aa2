"""Iceberg's types and Spark's: what a source column becomes in an Iceberg table, and back.

Iceberg has no 8- or 16-bit integers (Spark writes them as `int`) and no fixed-length text, so
a source schema is first made `storable`: the lake's schema is then compared with the source's
as the table will hold it, and a `tinyint` isn't taken for an `int` narrowed. A schema change
is made in place where Iceberg can (`promotable`: a column added, `int` to `bigint`, `float` to
`double`, a decimal's precision); any other type change rewrites the table's rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from incremental_assets.spark_api import T


@cache
def _primitives() -> dict[str, T.DataType]:
    return {
        "boolean": T.BooleanType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "date": T.DateType(),
        "time": T.LongType(),
        "timestamp": T.TimestampNTZType(),
        "timestamptz": T.TimestampType(),
        "timestamp_ns": T.TimestampNTZType(),
        "timestamptz_ns": T.TimestampType(),
        "string": T.StringType(),
        "uuid": T.StringType(),
        "binary": T.BinaryType(),
    }


def spark_schema(schema: Mapping[str, Any]) -> T.StructType:
    """An Iceberg schema (its metadata JSON) as Spark reads the table."""
    return T.StructType([_field(f) for f in schema.get("fields", [])])


def _field(field: Mapping[str, Any]) -> T.StructField:
    return T.StructField(
        str(field["name"]), _type(field["type"]), nullable=not field.get("required", False)
    )


def _type(kind: Any) -> T.DataType:
    if isinstance(kind, str):
        if kind.startswith("decimal("):
            precision, scale = kind[len("decimal(") : -1].split(",")
            return T.DecimalType(int(precision), int(scale))
        if kind.startswith("fixed["):
            return T.BinaryType()
        return _primitives()[kind]
    if kind["type"] == "struct":
        return spark_schema(kind)
    if kind["type"] == "list":
        return T.ArrayType(_type(kind["element"]), not kind.get("element-required", False))
    if kind["type"] == "map":
        return T.MapType(_type(kind["key"]), _type(kind["value"]), not kind.get("value-required"))
    raise ValueError(f"an Iceberg type this package doesn't read: {kind}")


def storable(data_type: T.DataType) -> T.DataType:
    """The type a Spark value of `data_type` has once in an Iceberg table."""
    if isinstance(data_type, T.ByteType | T.ShortType):
        return T.IntegerType()
    if isinstance(data_type, T.CharType | T.VarcharType):
        return T.StringType()
    if isinstance(data_type, T.StructType):
        return T.StructType(
            [T.StructField(f.name, storable(f.dataType), f.nullable) for f in data_type.fields]
        )
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(storable(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, T.MapType):
        return T.MapType(
            storable(data_type.keyType), storable(data_type.valueType), data_type.valueContainsNull
        )
    return data_type


def promotable(old: T.DataType, new: T.DataType) -> bool:
    """Whether Iceberg changes a column from `old` to `new` in place (its type promotions)."""
    if isinstance(old, T.IntegerType) and isinstance(new, T.LongType):
        return True
    if isinstance(old, T.FloatType) and isinstance(new, T.DoubleType):
        return True
    return (
        isinstance(old, T.DecimalType)
        and isinstance(new, T.DecimalType)
        and old.scale == new.scale
        and new.precision >= old.precision
    )
