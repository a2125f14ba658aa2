"""`conversion.py`'s decisions without Spark: which lakes can be converted, and how a plain merge
table's buckets become Iceberg partitions. The conversion itself runs in test_iceberg.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec, TableSpec, project_from_mapping
from incremental_assets.conversion import convert_to_iceberg, iceberg_partitioning
from incremental_assets.errors import ConfigError, WriteError
from incremental_assets.lake import LakeFacts
from incremental_assets.lake.names import DataFile
from incremental_assets.results import StoredState

RECORDED = StoredState(
    cursor="100", cursor_column="id", cursor_type=None, batch=3, run_id="r", lake_table_id="t1"
)


def project(lake_format: str | None) -> tuple[TableSpec, LakeSpec]:
    lake: dict[str, Any] = {"path": "/lake"} | ({"format": lake_format} if lake_format else {})
    raw = {
        "lake": lake,
        "sources": {"landing": {"type": "files", "path": "/landing"}},
        "tables": [{"name": "orders", "source": "landing", "table": "orders", "cursor": "id"}],
    }
    loaded = project_from_mapping(raw, Path("/project/incremental_assets.yaml"))
    return loaded.tables[0], loaded.lake


@pytest.mark.parametrize(
    ("lake_format", "stored", "refusal", "words"),
    [
        ("parquet", RECORDED, ConfigError, "set lake.format: iceberg"),
        (None, StoredState.initial(), WriteError, "`incremental-assets run orders`"),
    ],
)
def test_a_lake_with_nothing_to_convert_is_refused_before_spark_is_asked(
    lake_format: str | None, stored: StoredState, refusal: type[Exception], words: str
) -> None:
    table, lake = project(lake_format)

    with pytest.raises(refusal) as refused:
        convert_to_iceberg(None, table, lake, "ns.orders", stored)  # type: ignore[arg-type]

    assert words in str(refused.value)


def merge_facts(groups: list[str], key: list[str] | None) -> LakeFacts:
    return LakeFacts(
        uri="/lake/orders",
        files=tuple(DataFile(f"part-{g}.parquet", g) for g in groups),
        schema=T.StructType([T.StructField("id", T.LongType())]),
        key=None if key is None else {"columns": key},
        layout="merge",
    )


RANGES = [f"rp{i:012d}w100000" for i in range(100)]  # keys 0 to 9,999,999 in 100 ranges
HASHED = [f"h{i:05d}of00064" for i in range(64)]


@pytest.mark.parametrize(
    ("groups", "key", "rows", "buckets", "expected"),
    [
        (RANGES, ["id"], 10_000_000, None, ("truncate(2000000, `id`)",)),
        (RANGES, ["id"], 1_000_000, None, ()),  # under two partitions' rows
        (HASHED, ["id"], 10_000_000, None, ("bucket(5, `id`)",)),
        (HASHED, ["id"], 1_000_000, 8, ("bucket(8, `id`)",)),  # the table's own setting
        (["b000001"], ["id"], 10_000_000, 8, ()),  # an append table's batches aren't buckets
        (RANGES, None, 10_000_000, None, ()),
    ],
)
def test_a_merge_tables_partitions_are_what_a_first_load_of_its_rows_would_choose(
    groups: list[str],
    key: list[str] | None,
    rows: int,
    buckets: int | None,
    expected: tuple[str, ...],
) -> None:
    assert iceberg_partitioning(merge_facts(groups, key), rows, buckets) == expected
