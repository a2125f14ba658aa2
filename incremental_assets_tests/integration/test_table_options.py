"""Per-table options against real PostgreSQL: lag, soft deletes, queries, no cursor, bad columns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import (
    ProjectBuilder,
    materialize,
    read_lake,
    rows_by,
    write_project,
)


def test_safety_lag_leaves_recent_rows_for_the_next_run(
    make_project: ProjectBuilder,
    tmp_path: Path,
    db: SourceDb,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    now = datetime.now(UTC)
    ages = [timedelta(hours=2), timedelta(minutes=10), timedelta(0)]
    db.execute("CREATE TABLE items (id int PRIMARY KEY, at {tstz})")
    db.execute(
        "INSERT INTO items VALUES "
        + ", ".join(f"({i}, {db.utc(now - age)})" for i, age in enumerate(ages, 1))
    )
    project = make_project(db, "items", mode="append", cursor="at", safety_lag="30m")

    run = materialize(project, "items", instance, spark_resource)

    assert run.success, run.failure
    assert rows_by(read_lake(tmp_path / "lake", "items"), ["id"]) == [(1,)]
    assert run.metadata["cursor"] == (now - ages[0]).isoformat(timespec="microseconds")


def test_merge_removes_rows_whose_delete_column_is_set(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute(
        "CREATE TABLE items (id int PRIMARY KEY, v text, at int NOT NULL, deleted_at timestamptz)"
    )
    pg.execute("INSERT INTO items SELECT i, 'v', i, NULL FROM generate_series(1, 10) i")
    project = make_project(
        pg, "items", mode="merge", cursor="at", primary_key=["id"], delete_column="deleted_at"
    )
    assert materialize(project, "items", instance, spark_resource).success
    pg.execute("UPDATE items SET deleted_at = now(), at = 20 WHERE id IN (2, 3)")

    run = materialize(project, "items", instance, spark_resource)

    assert run.success, run.failure
    assert run.metadata["rows_deleted"] == 2
    assert [r[0] for r in rows_by(read_lake(tmp_path / "lake", "items"), ["id"])] == [
        1,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
    ]
    assert run.metadata["dagster/row_count"] == 8


def test_a_query_source_is_windowed_on_its_output_columns(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, price numeric(10, 2), at bigint NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i, i FROM generate_series(1, 10) i")
    query = f"SELECT id, price * 2 AS doubled, at AS seq FROM {pg.name}.items WHERE id % 2 = 0"
    project = make_project(
        pg, "items", query=query, mode="append", cursor="seq", primary_key=["id"]
    )
    assert materialize(project, "items", instance, spark_resource).success
    pg.execute("INSERT INTO items VALUES (12, 6, 12), (13, 6, 13)")

    run = materialize(project, "items", instance, spark_resource)

    assert run.success, run.failure
    assert run.metadata["extract_filter"] == '"seq" >= 10 AND "seq" <= 12'
    assert run.metadata["rows_written"] == 1
    assert rows_by(read_lake(tmp_path / "lake", "items"), ["id"])[-1] == (12,)


def test_a_table_without_a_cursor_is_fully_refreshed_every_run(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE items (code text PRIMARY KEY, label text)")
    pg.execute("INSERT INTO items VALUES ('fr', 'France'), ('de', 'Germany')")
    project = make_project(pg, "items", mode="full_refresh")
    assert materialize(project, "items", instance, spark_resource).success
    pg.execute("DELETE FROM items WHERE code = 'de'")
    pg.execute("INSERT INTO items VALUES ('it', 'Italy')")

    run = materialize(project, "items", instance, spark_resource)

    assert run.success, run.failure
    assert run.metadata["full_refresh"] is True
    assert run.metadata["cursor"] is None
    assert rows_by(read_lake(tmp_path / "lake", "items"), ["code"]) == [("fr",), ("it",)]


def test_a_column_that_cannot_be_a_cursor_is_a_configuration_error(
    make_project: ProjectBuilder,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, score double precision)")
    project = make_project(pg, "items", mode="append", cursor="score")

    run = materialize(project, "items", instance, spark_resource)

    assert not run.success
    assert run.failure is not None
    assert "Table 'items', field 'cursor': column 'score' is double" in run.failure
    assert "can't serve as an exact cursor" in run.failure


def test_a_missing_column_names_the_table_the_field_and_the_columns_there_are(
    make_project: ProjectBuilder,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, at int)")
    project = make_project(pg, "items", mode="merge", cursor="at", primary_key=["item_id"])

    run = materialize(project, "items", instance, spark_resource)

    assert not run.success
    assert (
        f"Table 'items', field 'primary_key': column 'item_id' is not in {pg.name}.items (columns: id, at)"
        in (run.failure or "")
    )


@pytest.mark.parametrize(
    ("column_type", "step"), [("timestamptz", "INTERVAL '1 minute'"), ("date", "1")]
)
def test_without_an_integer_key_the_read_is_split_on_the_cursor(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    postgres: Any,
    column_type: str,
    step: str,
) -> None:
    pg.execute(
        f"CREATE TABLE items (code uuid PRIMARY KEY DEFAULT gen_random_uuid(), at {column_type} NOT NULL)"
    )
    start = (
        "TIMESTAMPTZ '2025-01-01 00:00:00+00'"
        if column_type == "timestamptz"
        else "DATE '2020-01-01'"
    )
    pg.execute(f"INSERT INTO items (at) SELECT {start} + i * {step} FROM generate_series(1, 400) i")
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"shop": pg.source(rows_per_partition=100, max_partitions=4)},
        "tables": [
            {
                "name": "items",
                "source": "shop",
                "table": f"{pg.name}.items",
                "mode": "merge",
                "cursor": "at",
                "primary_key": ["code"],
                "transaction_cap": False,
            }
        ],
    }
    run = materialize(write_project(tmp_path, config), "items", instance, spark_resource)

    assert run.success, run.failure
    reads = [
        line
        for line in postgres.log_text().splitlines()
        if f"FROM {pg.name}.items WHERE" in line and "AS src" in line and "1=0" not in line
    ]
    assert len(reads) == 4
    lake = rows_by(read_lake(tmp_path / "lake", "items"), ["code", "at"])
    assert lake == sorted(pg.query("SELECT code::text, at FROM items"))


def test_each_run_logs_its_window_counts_and_durations(
    make_project: ProjectBuilder,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO items SELECT i, i FROM generate_series(1, 30) i")
    run = materialize(
        make_project(pg, "items", mode="append", cursor="at"), "items", instance, spark_resource
    )

    messages = [entry.user_message for entry in instance.all_logs(run.run_id) if entry.user_message]
    assert any(
        'items: window "at" <= 30; 30 rows up to the frozen bound, 1 on the bound itself' in m
        for m in messages
    )
    assert any(
        "items: 30 rows read, 30 written, 30 in the lake; extract " in m and "s, write " in m
        for m in messages
    )
