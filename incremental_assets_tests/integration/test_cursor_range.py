"""Cursor values PostgreSQL holds but Python can't: the run fails clearly, never reads a wrong window."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import lake_files, materialize, write_project


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("'infinity'", "infinity"),
        ("'0044-03-15 10:00:00 BC'", "outside years 1-9999"),
    ],
)
def test_a_wall_clock_cursor_beyond_python_years_fails_the_run(
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    value: str,
    message: str,
) -> None:
    pg.execute(
        "CREATE TABLE events (id int PRIMARY KEY, at timestamp NOT NULL)",
        f"INSERT INTO events VALUES (1, {value})",
    )
    project = write_project(
        tmp_path,
        {
            "lake": {"path": str(tmp_path / "lake")},
            "sources": {"shop": pg.source()},
            "tables": [
                {
                    "name": "events",
                    "source": "shop",
                    "table": f"{pg.name}.events",
                    "mode": "append",
                    "cursor": "at",
                    # An open transaction elsewhere would hold the row back, and the run with it.
                    "transaction_cap": False,
                }
            ],
        },
    )

    run = materialize(project, "events", instance, spark_resource)

    assert not run.success, f"the run succeeded with a wrong window: {run.metadata}"
    assert message in (run.failure or ""), run.failure
    assert "Table 'events'" in (run.failure or ""), run.failure
    assert lake_files(tmp_path / "lake", "events") == []
