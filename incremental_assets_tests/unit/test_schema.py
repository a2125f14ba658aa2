from __future__ import annotations

import pytest
from pyspark.sql import types as T

from incremental_assets.errors import WriteError
from incremental_assets.writers.schema import plan_schema_change

LAKE = T.StructType(
    [
        T.StructField("id", T.IntegerType()),
        T.StructField("amount", T.DecimalType(10, 2)),
        T.StructField("ratio", T.FloatType()),
        T.StructField("note", T.StringType()),
        T.StructField("_batch", T.LongType()),
    ]
)


def _source(**changes: T.DataType | None) -> T.StructType:
    fields = [f for f in LAKE.fields if not f.name.startswith("_")]
    result = []
    for field in fields:
        if field.name in changes:
            if changes[field.name] is not None:
                result.append(T.StructField(field.name, changes.pop(field.name)))  # type: ignore[arg-type]
            else:
                changes.pop(field.name)
        else:
            result.append(field)
    result += [T.StructField(name, t) for name, t in changes.items() if t is not None]
    return T.StructType(result)


def test_no_lake_yet_takes_the_source_schema() -> None:
    source = _source()
    assert plan_schema_change("t", None, source).target == source


def test_an_unchanged_schema_needs_no_rewrite() -> None:
    change = plan_schema_change("t", LAKE, _source())
    assert not change.rewrites_lake and change.describe() == ""


@pytest.mark.parametrize(
    ("changes", "described"),
    [
        ({"id": T.LongType()}, "widened id int -> bigint"),
        ({"amount": T.DecimalType(12, 2)}, "widened amount decimal(10,2) -> decimal(12,2)"),
        ({"amount": T.DecimalType(13, 4)}, "widened amount decimal(10,2) -> decimal(13,4)"),
        ({"ratio": T.DoubleType()}, "widened ratio float -> double"),
        ({"colour": T.StringType()}, "added colour"),
    ],
)
def test_widenings_and_additions_are_accepted(
    changes: dict[str, T.DataType], described: str
) -> None:
    change = plan_schema_change("t", LAKE, _source(**changes))
    assert change.rewrites_lake
    assert change.describe() == described
    assert [f.name for f in change.target.fields][:4] == ["id", "amount", "ratio", "note"]


def test_a_dropped_column_is_kept_in_the_lake() -> None:
    change = plan_schema_change("t", LAKE, _source(note=None))
    assert "note" in change.target.fieldNames()
    assert change.describe() == "kept note (no longer in the source)"
    assert not change.rewrites_lake


@pytest.mark.parametrize(
    ("changes", "old", "new"),
    [
        ({"id": T.ShortType()}, "int", "smallint"),
        ({"amount": T.DecimalType(12, 1)}, "decimal(10,2)", "decimal(12,1)"),
        ({"note": T.IntegerType()}, "string", "int"),
        ({"ratio": T.StringType()}, "float", "string"),
    ],
)
def test_other_changes_are_refused_naming_the_column_and_both_types(
    changes: dict[str, T.DataType], old: str, new: str
) -> None:
    name = next(iter(changes))
    with pytest.raises(
        WriteError,
        match=f"column '{name}' is {old.replace('(', '.').replace(')', '.')} in the lake but {new.replace('(', '.').replace(')', '.')} in the source",
    ):
        plan_schema_change("orders", LAKE, _source(**changes))
