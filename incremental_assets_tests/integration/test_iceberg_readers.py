"""Readers of a merge table the runs wrote merge-on-read (position deletes beside the data):
Spark by the catalog, now and `VERSION AS OF` a recorded `iceberg_snapshot_id`; PyIceberg and
Polars; DuckDB offline, from the metadata file a run recorded. Each reads exactly the source's
rows as of the run it asks for."""

from __future__ import annotations

import polars as pl
import pytest
from pyspark.sql import SparkSession

from incremental_assets.config import LakeSpec
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.project import iceberg_table, rows_by
from incremental_assets_tests.support.readers import History, duckdb_reader


@pytest.fixture
def loads(merge_lake: tuple[Loads, History]) -> Loads:
    return merge_lake[0]


@pytest.fixture
def history(merge_lake: tuple[Loads, History]) -> History:
    """The module's one lake: its tests only read it."""
    return merge_lake[1]


def test_spark_reads_the_table_by_its_catalog_now_and_as_of_each_run(
    loads: Loads, spark: SparkSession, history: History
) -> None:
    lake = IcebergLake(LakeSpec(path=str(loads.lake_dir)), "orders", "incremental_assets.orders")
    session = lake.session(spark)
    table = lake.reference()

    now = session.sql(f"SELECT id, note FROM {table}").collect()

    assert sorted((r.id, r.note) for r in now) == history[-1][1]
    assert history[-1][0]["merge_strategy"] == "merge on read"
    assert history[-1][0]["files_written"] >= 1
    for metadata, rows in history:
        snapshot = metadata["iceberg_snapshot_id"]
        then = session.sql(f"SELECT id, note FROM {table} VERSION AS OF {snapshot}").collect()
        assert sorted((r.id, r.note) for r in then) == rows
    deletes = session.sql(f"SELECT count(*) FROM {table}.delete_files").first()
    assert deletes is not None and deletes[0] >= 1  # merge-on-read: the rows read are exact


def test_pyiceberg_and_polars_read_it_as_of_each_run(loads: Loads, history: History) -> None:
    table = iceberg_table(loads.lake_dir, "orders")

    assert rows_by(table.scan().to_arrow(), ["id", "note"]) == history[-1][1]
    polars = pl.scan_iceberg(table).select("id", "note").collect()
    assert sorted(polars.iter_rows()) == history[-1][1]
    for metadata, rows in history:
        as_of = table.scan(snapshot_id=metadata["iceberg_snapshot_id"]).to_arrow()
        assert rows_by(as_of, ["id", "note"]) == rows


def test_duckdb_reads_it_offline_from_the_metadata_file_a_run_recorded(
    history: History,
) -> None:
    """DuckDB's Iceberg extension, from the PyPI packages the docs name (DuckDB would download
    it otherwise), reads the metadata file the materialization recorded, with its deletes."""
    connection = duckdb_reader()
    for metadata, rows in history:
        location = metadata["iceberg_metadata_location"]
        assert location.endswith(".metadata.json")
        read = connection.execute(
            f"SELECT id, note FROM iceberg_scan('{location.removeprefix('file:')}')"
        ).fetchall()
        assert sorted(read) == rows
