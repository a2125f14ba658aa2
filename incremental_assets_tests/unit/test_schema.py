from __future__ import annotations

import pytest
from pyspark.sql import types as T

from incremental_assets.errors import WriteError
from incremental_assets.writers.schema import ColumnHistory, plan_schema_change

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
        match=(
            f"column '{name}' is {old.replace('(', '.').replace(')', '.')} in the lake but "
            f"{new.replace('(', '.').replace(')', '.')} in the source"
        ),
    ):
        plan_schema_change("orders", LAKE, _source(**changes))


def _history_after(*changes: T.StructType) -> ColumnHistory:
    """The column history of an append table loaded with these source schemas, batch 2 on."""
    history, lake = ColumnHistory(), LAKE
    for batch, source in enumerate(changes, start=2):
        change = plan_schema_change("t", lake, source)
        history = history.after(change, batch)
        lake = T.StructType([*change.target.fields, T.StructField("_batch", T.LongType())])
    return history


def test_a_column_added_is_compared_only_with_batches_written_since() -> None:
    source = _source(color=T.StringType())
    history = _history_after(source)
    # A later run: the lake has color now.
    change = plan_schema_change(
        "t", T.StructType([*LAKE.fields, T.StructField("color", T.StringType())]), source
    )

    assert history.since == {"color": 2}
    assert "color" not in history.comparable(change, earliest_batch=1)
    assert "color" in history.comparable(change, earliest_batch=2)


def test_a_dropped_column_is_not_compared_and_when_it_returns_only_with_later_batches() -> None:
    dropped = _source(note=None)
    back = _source()
    history = _history_after(dropped, back)

    assert history.absent == frozenset()
    assert history.since == {"note": 3}
    assert "note" not in history.comparable(plan_schema_change("t", LAKE, dropped), 5)
    assert "note" not in history.comparable(plan_schema_change("t", LAKE, back), 2)
    assert "note" in history.comparable(plan_schema_change("t", LAKE, back), 3)


def test_the_column_history_round_trips_through_its_record() -> None:
    history = _history_after(_source(note=None, color=T.StringType()))
    assert ColumnHistory.from_record(history.to_record()) == history
    assert history.absent == frozenset({"note"})
