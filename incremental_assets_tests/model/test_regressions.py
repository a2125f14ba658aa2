"""Sequences the model-based machine found breaking a guarantee, shrunk, and replayed here step by
step (each step is the machine's rule, as the failing recipe names it; its checks are the model's).

Each test fails until the product is fixed; the docstring says what the soak found, with its seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.machine import Env, LakeMachine, machine_class
from incremental_assets_tests.model.table import TableConfig
from incremental_assets_tests.support.mariadb import MariaDbServer
from incremental_assets_tests.support.postgres import PostgresServer

MERGE = TableConfig("postgres", "merge", ("id",), "integer", "bigint")


@contextmanager
def replayed(env: Env, config: TableConfig) -> Iterator[LakeMachine]:
    """The machine's example for `config`, for a test to take its steps; settled at the end."""
    state = machine_class(env)()
    state.setup(config)
    try:
        yield state
    finally:
        state.teardown()


@pytest.mark.parametrize("event", ["removed", "restored"])
def test_an_iceberg_table_whose_folder_is_removed_or_restored_is_refused_then_rebuilt(
    event: str,
    postgres: PostgresServer,
    spark_resource: IncrementalSparkResource,
    tmp_path: Path,
) -> None:
    """Soak `--format iceberg --seed 10`: with the table's folder deleted, or put back from a
    copy taken after an earlier run, the SQLite catalog still names metadata the folder doesn't
    hold. Every run then fails with "field 'lake.catalog': the Iceberg catalog ... could not be
    used ... Fix: fix the catalog's properties", instead of the refusal naming the stored cursor
    and `incremental-assets run t --full`; and that full refresh fails the same way, so nothing
    rebuilds the table."""
    env = Env(postgres, spark_resource, tmp_path, lake_format="iceberg", lake_events=1)
    with replayed(env, MERGE) as state:
        state.add_row()
        state.run()
        if event == "removed":
            state.remove_lake(new_row=False)
        else:
            state.add_row()
            state.run()
            state.restore_lake(pick=0, with_catalog=False, new_row=False)


def test_an_iceberg_merge_table_first_loaded_from_an_empty_source_stays_readable(
    postgres: PostgresServer,
    spark_resource: IncrementalSparkResource,
    tmp_path: Path,
) -> None:
    """Soak `--format iceberg --seed 12`: a merge's first run over an empty source commits an
    Iceberg table with an empty schema and an empty name mapping; later commits add the columns
    to the schema but not to the mapping, so PyIceberg can't read the table ("Could not find
    field with name: id"). Append tables are not affected."""
    env = Env(postgres, spark_resource, tmp_path, lake_format="iceberg")
    with replayed(env, MERGE) as state:
        state.run()
        state.add_row()
        state.run()


@pytest.mark.parametrize("lake_format", ["parquet", "iceberg"])
def test_a_merge_rereading_unchanged_rows_at_a_collated_text_cursor_writes_nothing(
    lake_format: str,
    mariadb: MariaDbServer,
    spark_resource: IncrementalSparkResource,
    tmp_path: Path,
) -> None:
    """Soak `--database mariadb --format iceberg --seed 7101` (shrunk by hand): a row whose text
    cursor equals the stored one by MariaDB's collation but not byte for byte ('c000000100 ' and
    'C000000100') is read again by every run, as a tie at the bound. Spark's byte order put it
    above the bound, so the merge took it for a new version and rewrote its bucket on every run
    over an unchanged source. Nothing was lost or doubled, but the runs were not idempotent."""
    config = TableConfig(
        "mariadb", "merge", ("id",), "numeric(12,0)", "text", reconcile=True, soft_deletes=True
    )
    env = Env(mariadb, spark_resource, tmp_path, lake_format=lake_format)
    with replayed(env, config) as state:
        state.add_row()
        state.full_refresh_run()
        state.insert_rows(bump=0, count=1)
        state.settle()


def test_an_iceberg_full_refresh_after_a_narrowed_column_takes_its_new_type(
    mariadb: MariaDbServer, spark_resource: IncrementalSparkResource, tmp_path: Path
) -> None:
    """Soak `--database mariadb --format iceberg --seed 7113`: qty widened to bigint, then
    narrowed back to int. The incremental run is refused (the lake holds it wider), and the full
    refresh that rebuilds the table wrote int files, but the Iceberg schema kept bigint: the
    union of schemas keeps a wider type, so readers saw int64 where the plain Parquet lake (and
    the source) has int32."""
    config = TableConfig("mariadb", "merge", ("id",), "integer", "timestamp")
    env = Env(mariadb, spark_resource, tmp_path, lake_format="iceberg")
    with replayed(env, config) as state:
        state.add_row()
        state.widen_column(pick=73)
        state.add_row()
        state.run()
        state.narrow_column()
