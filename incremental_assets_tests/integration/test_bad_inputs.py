"""Broken sources and bad state: a message naming the table and the cause, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.harness import (
    Schema,
    lake_files,
    latest_metadata,
    materialize,
    write_project,
)


def _config(
    tmp_path: Path, pg: Schema, source: dict[str, Any] | None = None, **table: Any
) -> dict[str, Any]:
    entry = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "merge",
        "cursor": "updated_at",
        "primary_key": ["id"],
        "transaction_cap": False,
        **table,
    }
    if "query" in table:
        entry.pop("table")
    return {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"shop": {**pg.source(), **(source or {})}},
        "tables": [entry],
    }


def _break(pg: Schema, case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Source and table settings that break the load in the named way."""
    if case == "unreachable":
        return {"url": "jdbc:postgresql://127.0.0.1:1/postgres"}, {}
    if case == "credentials":
        return {"password": "wrong"}, {}
    if case == "missing table":
        return {}, {"table": f"{pg.name}.no_such_table"}
    if case == "missing column":
        pg.execute("ALTER TABLE orders RENAME COLUMN updated_at TO changed_at")
        return {}, {}
    if case == "application name in properties":
        return {"properties": {"ApplicationName": "nightly-etl"}}, {}
    if case == "application name in url":
        return {"url": f"{pg.server.jdbc_url}?ApplicationName=nightly-etl"}, {}
    if case == "bad query":
        return {}, {"query": f"SELECT id, updated_at, 1 / (id - id) AS boom FROM {pg.name}.orders"}
    raise AssertionError(case)


CASES = [
    ("unreachable", ["Connection to 127.0.0.1:1 refused", "check that the database is running"]),
    (
        "credentials",
        [
            "password authentication failed for user",
            "check the user (postgres) and password of source 'shop'",
        ],
    ),
    (
        "missing table",
        ["does not exist", "`table:` of table 'orders' names a table the database doesn't have"],
    ),
    (
        "missing column",
        ["field 'cursor': column 'updated_at' is not in", "(columns: id, changed_at)"],
    ),
    ("bad query", ["division by zero", "the `query:` of table 'orders' must run on its own"]),
    *(
        (
            f"application name in {place}",
            ["source 'shop' sets ApplicationName", "remove ApplicationName from the properties"],
        )
        for place in ("properties", "url")
    ),
]


@pytest.mark.parametrize(("case", "expected"), CASES, ids=[c for c, _ in CASES])
def test_a_broken_source_fails_clearly_and_moves_nothing(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    case: str,
    expected: list[str],
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, '2025-01-01'), (2, '2025-01-02')")
    first = materialize(
        write_project(tmp_path, _config(tmp_path, pg)), "orders", instance, spark_resource
    )
    files = lake_files(tmp_path / "lake", "orders")
    pg.execute("INSERT INTO orders VALUES (3, '2025-01-03')")
    source, table = _break(pg, case)

    run = materialize(
        write_project(tmp_path, _config(tmp_path, pg, source, **table)),
        "orders",
        instance,
        spark_resource,
    )

    assert not run.success
    assert (run.failure or "").startswith(
        "dagster._core.definitions.events.Failure: Table 'orders'"
    )
    for words in expected:
        assert words in (run.failure or "")
    assert "Traceback" not in (run.failure or "")
    assert lake_files(tmp_path / "lake", "orders") == files
    assert latest_metadata(instance, "orders")["cursor"] == first.metadata["cursor"]


def test_a_stored_cursor_that_cannot_be_parsed_is_refused_until_a_full_refresh(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, '2025-01-01')")
    project = write_project(tmp_path, _config(tmp_path, pg))
    assert materialize(project, "orders", instance, spark_resource).success
    files = lake_files(tmp_path / "lake", "orders")
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key="orders",
            metadata={
                "cursor": "next tuesday",
                "cursor_column": "updated_at",
                "cursor_type": "timestamptz",
                "batch": 1,
            },
        )
    )

    run = materialize(project, "orders", instance, spark_resource)
    untouched = lake_files(tmp_path / "lake", "orders") == files
    refresh = materialize(project, "orders", instance, spark_resource, full_refresh=True)

    assert not run.success
    assert "Table 'orders': the stored cursor 'next tuesday'" in (run.failure or "")
    assert "can't be read as the timestamptz column 'updated_at'" in (run.failure or "")
    assert "run a full refresh" in (run.failure or "")
    assert untouched
    assert refresh.success and refresh.metadata["cursor"] == "2025-01-01T00:00:00.000000+00:00"
