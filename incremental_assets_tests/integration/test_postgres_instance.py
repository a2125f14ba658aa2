"""Dagster's instance stored in PostgreSQL: the cursors survive the loss of the machine."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import yaml

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.harness import Schema, materialize, write_project
from incremental_assets_tests.postgres import PostgresServer


def _instance_home(directory: Path, postgres: PostgresServer, database: str) -> Path:
    """A DAGSTER_HOME whose dagster.yaml keeps runs, events and schedules in PostgreSQL."""
    home = directory / "home"
    home.mkdir(parents=True)
    # SQLAlchemy 2.1 reads plain postgresql:// as psycopg 3, which dagster-postgres's NOTIFY
    # doesn't support: name the psycopg2 driver in the URL, as the README's dagster.yaml does.
    url = f"postgresql+psycopg2://{postgres.user}:{postgres.password}@{postgres.host}:{postgres.port}/{database}"
    storage = {"storage": {"postgres": {"postgres_url": url}}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(storage))
    return home


def test_the_cursor_carries_over_through_an_instance_in_postgres(
    tmp_path: Path, pg: Schema, postgres: PostgresServer, spark_resource: IncrementalSparkResource
) -> None:
    database = f"dagster_{uuid.uuid4().hex[:8]}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE DATABASE {database}")
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO orders SELECT i, i FROM generate_series(1, 10) i")
    entry = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "append",
        "cursor": "at",
    }
    project = write_project(
        tmp_path,
        {
            "lake": {"path": str(tmp_path / "lake")},
            "sources": {"shop": pg.source()},
            "tables": [entry],
        },
    )
    try:
        # Two instance objects, as two machines would open them, over the same database.
        with dg.DagsterInstance.from_config(
            str(_instance_home(tmp_path / "a", postgres, database))
        ) as first_machine:
            first = materialize(project, "orders", first_machine, spark_resource)
        pg.execute("INSERT INTO orders VALUES (11, 11)")
        with dg.DagsterInstance.from_config(
            str(_instance_home(tmp_path / "b", postgres, database))
        ) as second_machine:
            second = materialize(project, "orders", second_machine, spark_resource)

        assert first.success and second.success, (first.failure, second.failure)
        assert second.metadata["previous_cursor"] == first.metadata["cursor"] == "10"
        assert second.metadata["rows_written"] == 1
        with postgres.connect(dbname=database) as conn:
            stored = conn.execute(
                "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'"
            ).fetchone()
        assert stored is not None and stored[0] == 2
    finally:
        with postgres.connect() as conn:
            conn.execute(f"DROP DATABASE {database} WITH (FORCE)")
