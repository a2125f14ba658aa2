"""A merge table whose rows hold maps, at the top level and inside an array of structs, on an
Iceberg lake: it loads, an update updates, and maps equal but for their entries' order change
nothing (the row's hash and the merge's comparison both read them in one canonical form)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets_tests.support.loads import Loads

ITEM = pa.struct([("sku", pa.string()), ("tags", pa.map_(pa.string(), pa.int64()))])
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("at", pa.int64()),
        ("attrs", pa.map_(pa.string(), pa.string())),
        ("items", pa.list_(ITEM)),
    ]
)
FIRST: list[dict[str, Any]] = [
    {
        "id": 1,
        "at": 1,
        "attrs": {"color": "red", "size": "m", "fit": None},
        "items": [{"sku": "s1", "tags": {"p": 1, "q": 2}}, None],
    },
    {
        "id": 2,
        "at": 1,
        "attrs": {"color": "blue"},
        "items": [{"sku": "s2", "tags": None}, {"sku": "s3", "tags": {"r": 3, "s": 4, "t": 5}}],
    },
    {"id": 3, "at": 1, "attrs": None, "items": None},
]
UPDATED = [
    FIRST[0],
    {**FIRST[1], "at": 2, "items": [{"sku": "s2", "tags": {"r": 9}}, FIRST[1]["items"][1]]},
    FIRST[2],
    {"id": 4, "at": 2, "attrs": {}, "items": []},
]


def _write_source(folder: Path, rows: list[dict[str, Any]], reverse_entries: bool) -> None:
    """The source's one Parquet file, each map's entries in their order or reversed."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = [_ordered(row, reverse_entries) for row in rows]
    pq.write_table(pa.Table.from_pylist(entries, SCHEMA), folder / "part-0.parquet")


def _ordered(value: Any, reverse: bool) -> Any:
    """`value` with each map as a list of its entries (Arrow's form), reversed if asked."""
    if isinstance(value, dict) and not {"id", "sku"} & value.keys():
        pairs = [(k, _ordered(v, reverse)) for k, v in value.items()]
        return pairs[::-1] if reverse else pairs
    if isinstance(value, dict):
        return {k: _ordered(v, reverse) for k, v in value.items()}
    if isinstance(value, list):
        return [_ordered(v, reverse) for v in value]
    return value


def _held(loads: Loads, spark: SparkSession) -> list[dict[str, Any]]:
    """The table's rows, through the lake's catalog in Spark (PyIceberg 0.12 reads a NULL array
    of structs holding a map as an empty array)."""
    lake = IcebergLake(loads.project.lake, "items", "incremental_assets.items")
    rows = lake.session(spark).table(lake.reference()).select(*SCHEMA.names).collect()
    return sorted((row.asDict(recursive=True) for row in rows), key=lambda row: row["id"])


def test_a_merge_table_with_maps_loads_updates_and_ignores_the_order_of_map_entries(
    loads: Loads, spark: SparkSession, tmp_path: Path
) -> None:
    landing = tmp_path / "landing" / "items"
    _write_source(landing, FIRST, reverse_entries=False)
    loads.write(
        {
            "lake": {"path": str(tmp_path / "lake"), "format": "iceberg"},
            "sources": {"landing": {"type": "files", "path": str(tmp_path / "landing")}},
            "tables": [
                {
                    "name": "items",
                    "source": "landing",
                    "table": "items",
                    "mode": "merge",
                    "cursor": {"column": "at", "type": "integer"},
                    "primary_key": ["id"],
                    "lookback": 10,  # every run reads every row again
                }
            ],
        }
    )

    first = loads.run()

    assert first.success, first.failure
    assert _held(loads, spark) == FIRST

    # Rows 1 and 3 as they were, their maps' entries listed in the other order; row 2 changed.
    _write_source(landing, UPDATED, reverse_entries=True)
    update = loads.run()

    assert update.success, update.failure
    assert (update.metadata["rows_inserted"], update.metadata["rows_updated"]) == (1, 1)
    assert _held(loads, spark) == UPDATED

    _write_source(landing, UPDATED, reverse_entries=False)
    rerun = loads.run()

    assert rerun.success, rerun.failure
    assert rerun.metadata["rows_extracted"] == len(UPDATED)
    assert rerun.metadata["rows_written"] == 0
    assert _held(loads, spark) == UPDATED
