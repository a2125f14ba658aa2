"""`merge_writes`: how an Iceberg merge table's merges write the rows they change.

position_deletes (the default) writes format v2 delete files; deletion_vectors makes the table
format v3 and writes one vector per data file (in Puffin files); copy_on_write rewrites the data
files the changed rows are in and writes no deletes. Each holds the source's rows; a change of the
setting applies from the next write, and a setting the table's format can't take is refused
before the source is read.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.orders import (
    ICEBERG,
    ORDERS_TABLE,
    change_orders,
    create_orders,
    orders_held,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import iceberg_table, rows_by
from incremental_assets_tests.support.readers import duckdb_reader

MERGE = {**ORDERS_TABLE, "mode": "merge"}
ROWS = 400


def _table(loads: Loads, spark: SparkSession, suffix: str = "") -> DataFrame:
    """The table (or its metadata table `suffix`) through the lake's catalog."""
    lake = IcebergLake(loads.project.lake, "orders", "incremental_assets.orders")
    return lake.session(spark).table(lake.reference() + suffix)


def delete_files(loads: Loads, spark: SparkSession) -> list[tuple[str, int]]:
    """(file format, records) of each delete file the table's current snapshot reads with."""
    found = _table(loads, spark, ".delete_files").select("file_format", "record_count")
    return sorted((str(r.file_format), int(r.record_count)) for r in found.collect())


def held(loads: Loads, spark: SparkSession) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in _table(loads, spark).select("id", "note").collect())


def merged_once(loads: Loads, pg: Schema, writes: str | None, **lake: Any) -> dict[str, Any]:
    """The table loaded, then a twentieth of its rows changed and merged; that run's metadata."""
    create_orders(pg, ROWS)
    settings: dict[str, Any] = {} if writes is None else {"merge_writes": writes}
    loads.configure(pg, MERGE, lake={**ICEBERG, **lake}, **settings)
    assert loads.run().success
    change_orders(pg, 1, new=5, every=20)
    result = loads.run()
    assert result.success, result.failure
    return result.metadata


@pytest.mark.parametrize(
    ("writes", "version", "deletes"),
    [(None, 2, "PARQUET"), ("deletion_vectors", 3, "PUFFIN"), ("copy_on_write", 2, None)],
)
def test_each_setting_writes_its_kind_of_change_and_holds_the_sources_rows(
    loads: Loads,
    pg: Schema,
    spark: SparkSession,
    writes: str | None,
    version: int,
    deletes: str | None,
) -> None:
    metadata = merged_once(loads, pg, writes)

    table = iceberg_table(loads.lake_dir, "orders")
    assert table.metadata.format_version == version
    found = delete_files(loads, spark)
    changed = ROWS // 20
    if deletes is None:
        assert found == []
        assert metadata["rows_rewritten"] > changed  # the files the changed rows are in
        assert (metadata["delete_files"], metadata["deleted_fraction"]) == (0, 0.0)
    else:
        assert {f for f, _ in found} == {deletes}
        assert sum(n for _, n in found) == changed
        assert metadata["rows_rewritten"] == changed + 5  # the changed rows and the new ones
        # The old versions stay in their files, removed by the deletes the table now holds.
        held_in_files = ROWS + changed + 5
        assert metadata["delete_files"] == len(found)
        assert metadata["deleted_fraction"] == round(changed / held_in_files, 4)
    assert (metadata["rows_inserted"], metadata["rows_updated"]) == (5, changed)
    assert held(loads, spark) == orders_held(pg)
    # Every reader docs/lake-format.md names reads the table's changes, v3's vectors included.
    assert rows_by(table.scan().to_arrow(), ["id", "note"]) == orders_held(pg)
    location = str(metadata["iceberg_metadata_location"]).removeprefix("file:")
    scanned = duckdb_reader().execute(f"SELECT id, note FROM iceberg_scan('{location}')")
    assert sorted(scanned.fetchall()) == orders_held(pg)


def test_a_changed_setting_applies_from_the_next_write(
    loads: Loads, pg: Schema, spark: SparkSession
) -> None:
    merged_once(loads, pg, None)
    config = loads.config(pg, MERGE, lake=ICEBERG, merge_writes="deletion_vectors")
    loads.write(config)

    change_orders(pg, 2, new=5, every=20)
    result = loads.run()

    assert result.success, result.failure
    assert iceberg_table(loads.lake_dir, "orders").metadata.format_version == 3
    assert "PUFFIN" in {f for f, _ in delete_files(loads, spark)}
    assert held(loads, spark) == orders_held(pg)


def test_position_deletes_on_a_format_v3_table_are_refused_before_the_source_is_read(
    loads: Loads, pg: Schema
) -> None:
    before = merged_once(loads, pg, "deletion_vectors")
    loads.write(loads.config(pg, MERGE, lake=ICEBERG))  # the default: position_deletes
    change_orders(pg, 2, new=5, every=20)

    refused = loads.run()

    assert not refused.success
    assert refused.failure is not None
    assert "format v3" in refused.failure and "merge_writes" in refused.failure
    assert "set merge_writes: deletion_vectors" in refused.failure
    assert loads.metadata()["cursor"] == before["cursor"]


@pytest.mark.parametrize("before", [None, "deletion_vectors"])
def test_after_a_switch_to_copy_on_write_the_table_counts_its_rows_right(
    loads: Loads, pg: Schema, spark: SparkSession, before: str | None
) -> None:
    """The review's finding: a copy-on-write merge rewrote the data files earlier merges had
    written deletes for, and those deletes, left behind, were still subtracted: the run reported
    fewer rows than the table held."""
    merged_once(loads, pg, before)
    assert delete_files(loads, spark)
    loads.write(loads.config(pg, MERGE, lake=ICEBERG, merge_writes="copy_on_write"))
    change_orders(pg, 2, new=5, every=7)

    result = loads.run()

    assert result.success, result.failure
    assert held(loads, spark) == orders_held(pg)
    assert result.metadata["dagster/row_count"] == len(orders_held(pg))
    assert delete_files(loads, spark) == []  # the switch applied them: none left to miscount
