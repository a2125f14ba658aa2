"""Every snippet of the docs that reads the lake runs as written, against a lake real runs
wrote, and reads the rows the source held: Spark in a process of its own (the snippet builds its
session), PyIceberg and Polars, DuckDB, the plain format's readers; and the PyIceberg code
`status --history` prints. Only the values the docs tell the reader to put in are replaced."""

from __future__ import annotations

import textwrap

import pytest
from pyspark.sql import SparkSession

from incremental_assets import cli
from incremental_assets.jvm import jar_folder
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.orders import change_orders, create_orders, orders_held
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.readers import History
from incremental_assets_tests.support.snippets import (
    doc_code_blocks,
    doc_snippets,
    filled,
    reads_in_a_process_of_its_own,
    reads_of,
)

COLUMNS = ("id", "note")
SNAPSHOT = "6620398579771156438"  # the docs' example snapshot id
JARS = "/home/me/.cache/incremental_assets/jars"  # the docs' example jar folder
RUN = {"spark-iceberg", "pyiceberg", "duckdb", "parquet"}  # the snippets these tests run
READERS = ("spark.read", "spark.table", "pyiceberg", "duckdb", "polars", "pyarrow.dataset")


def test_every_python_block_in_the_docs_that_reads_the_lake_is_a_snippet_these_tests_run() -> None:
    snippets = doc_snippets()
    readers = [code for code in doc_code_blocks("python") if any(word in code for word in READERS)]

    assert set(snippets) == RUN
    assert readers and all(code in snippets.values() for code in readers)


def _as_of_the_first_run(name: str, merge_lake: tuple[Loads, History]) -> str:
    """The snippet on this lake, its example snapshot the first run's (and its example jar
    folder, if it shows one, this machine's)."""
    loads, history = merge_lake
    code = doc_snippets()[name]
    values = {JARS: str(jar_folder())} if JARS in code else {}
    values |= {"/lake": str(loads.lake_dir), SNAPSHOT: str(history[0][0]["iceberg_snapshot_id"])}
    return filled(code, values)


def test_the_spark_snippet_reads_the_table_now_and_as_of_a_run_in_a_session_of_its_own(
    merge_lake: tuple[Loads, History],
) -> None:
    code = _as_of_the_first_run("spark-iceberg", merge_lake)

    now, then = merge_lake[1][-1][1], merge_lake[1][0][1]
    assert reads_in_a_process_of_its_own(code, COLUMNS) == [now, then]


def test_the_pyiceberg_snippet_reads_the_table_now_as_of_a_run_and_through_polars(
    merge_lake: tuple[Loads, History],
) -> None:
    code = _as_of_the_first_run("pyiceberg", merge_lake)

    now, then = merge_lake[1][-1][1], merge_lake[1][0][1]
    assert reads_of(code, {}, COLUMNS) == [now, then, now]


def test_the_duckdb_snippet_reads_the_metadata_file_a_run_recorded(
    merge_lake: tuple[Loads, History],
) -> None:
    _, history = merge_lake
    location = history[-1][0]["iceberg_metadata_location"]
    code = filled(
        doc_snippets()["duckdb"], {"/lake/orders/metadata/00012-....metadata.json": location}
    )

    assert reads_of(code, {}, COLUMNS) == [history[-1][1]]


def test_the_pyiceberg_code_status_history_prints_reads_the_table_as_of_the_newest_run(
    merge_lake: tuple[Loads, History],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loads, history = merge_lake
    monkeypatch.setenv("DAGSTER_HOME", str(loads.home))

    assert cli.main(["--config", loads.project.path, "status", "--history", "orders"]) == 0

    printed = capsys.readouterr().out
    code = textwrap.dedent(printed.split("in PyIceberg (docs/lake-format.md):\n", 1)[1])
    assert reads_of(code, {}, COLUMNS) == [history[-1][1]]


def test_the_plain_formats_snippet_reads_the_folder_as_the_table(
    loads: Loads, pg: Schema, spark: SparkSession
) -> None:
    create_orders(pg, 100)
    loads.configure(pg, ORDERS_MERGE, lake={"format": "parquet"})
    assert loads.run().success
    change_orders(pg, 1)  # a second run replaces files: the readers skip the old ones
    assert loads.run().success
    code = filled(doc_snippets()["parquet"], {"/lake": str(loads.lake_dir)})

    held = orders_held(pg)
    assert reads_of(code, {"spark": spark}, COLUMNS) == [held, held]
