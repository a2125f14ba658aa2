"""Rows that commit late: `updated_at DEFAULT now()` is the transaction's start, not its commit.

A writer opens a transaction and inserts (its rows are stamped with the transaction's start);
meanwhile another writer commits newer rows and a load runs. When the first transaction finally
commits, its rows sit below the loaded cursor. Each test drives the writers over separate
connections, as production databases see them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.harness import Schema, materialize, read_lake, rows_by, write_project
from incremental_assets_tests.postgres import PostgresServer

TABLE = "CREATE TABLE events (id bigint PRIMARY KEY, note text, updated_at timestamptz NOT NULL DEFAULT now())"


def _project(tmp_path: Path, pg: Schema, user: dict[str, str] | None = None, **table: Any) -> Any:
    source = {**pg.source(), **(user or {})}
    tables = [
        {
            "name": "events",
            "source": "shop",
            "table": f"{pg.name}.events",
            "mode": "append",
            "cursor": "updated_at",
            "primary_key": ["id"],
            **table,
        }
    ]
    return write_project(
        tmp_path,
        {"lake": {"path": str(tmp_path / "lake")}, "sources": {"shop": source}, "tables": tables},
    )


def _open_late_writer(postgres: PostgresServer, pg: Schema) -> psycopg.Connection:
    """A transaction that inserts now and commits later; its row is stamped with its start."""
    late = postgres.connect(autocommit=False)
    late.execute(f"INSERT INTO {pg.name}.events (id, note) VALUES (1000, 'late')")
    late.execute("SELECT pg_sleep(0.05)")
    return late


def _ids(tmp_path: Path) -> list[int]:
    return [row[0] for row in rows_by(read_lake(tmp_path / "lake", "events"), ["id"])]


@pytest.mark.parametrize("cap", [True, False])
def test_the_transaction_cap_keeps_the_cursor_below_open_transactions(
    tmp_path: Path,
    pg: Schema,
    postgres: PostgresServer,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    cap: bool,
) -> None:
    pg.execute(TABLE)
    project = _project(tmp_path, pg, transaction_cap=cap)
    late = _open_late_writer(postgres, pg)
    pg.execute(
        "INSERT INTO events (id, note) SELECT i, 'on time' FROM generate_series(1, 5) i"
    )  # committed, newer

    first = materialize(project, "events", instance, spark_resource)
    late.commit()
    late.close()
    second = materialize(project, "events", instance, spark_resource)

    assert first.success and second.success, (first.failure, second.failure)
    if cap:
        assert first.metadata["transaction_cap_applied"] is True
        assert "open since" in first.metadata["transaction_cap"]
        assert (
            first.metadata["rows_written"] == 0
        )  # everything newer than the open transaction waits
        assert _ids(tmp_path) == [1, 2, 3, 4, 5, 1000]
        assert second.metadata["transaction_cap_applied"] is False
    else:
        # The control: without the cap the late row is below the cursor and is never read.
        assert "transaction_cap" not in first.metadata
        assert _ids(tmp_path) == [1, 2, 3, 4, 5]


def test_a_lookback_window_catches_late_rows_and_append_keeps_each_once(
    tmp_path: Path,
    pg: Schema,
    postgres: PostgresServer,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute(TABLE)
    project = _project(tmp_path, pg, transaction_cap=False, lookback="10m")
    late = _open_late_writer(postgres, pg)
    pg.execute("INSERT INTO events (id, note) SELECT i, 'on time' FROM generate_series(1, 5) i")
    assert materialize(project, "events", instance, spark_resource).success
    late.commit()
    late.close()

    second = materialize(project, "events", instance, spark_resource)
    third = materialize(project, "events", instance, spark_resource)

    assert second.success and third.success
    assert second.metadata["rows_extracted"] == 6  # the lookback re-read the five loaded rows
    assert second.metadata["rows_written"] == 1  # and kept only the late one
    assert third.metadata["rows_written"] == 0
    assert _ids(tmp_path) == [1, 2, 3, 4, 5, 1000]


def test_the_cap_says_when_the_role_cannot_see_other_sessions(
    tmp_path: Path,
    pg: Schema,
    postgres: PostgresServer,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute(TABLE)
    role = f"reader_{pg.name}"
    pg.execute(
        f"CREATE ROLE {role} LOGIN PASSWORD 'pw'",
        f"GRANT USAGE ON SCHEMA {pg.name} TO {role}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg.name} TO {role}",
    )
    try:
        project = _project(tmp_path, pg, user={"user": role, "password": "pw"})
        late = _open_late_writer(postgres, pg)  # a superuser session the reader can't inspect
        run = materialize(project, "events", instance, spark_resource)
        late.rollback()
        late.close()
    finally:
        pg.execute(f"DROP OWNED BY {role}", f"DROP ROLE {role}")

    assert run.success, run.failure
    assert run.metadata["transaction_cap"].startswith("partial (")
    assert "GRANT pg_read_all_stats" in run.metadata["warnings"]
