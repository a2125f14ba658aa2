"""Dagster's instance stored in PostgreSQL: the cursors survive the loss of the machine."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import PostgresServer, Schema

ROOT = Path(__file__).resolve().parents[2]


def _instance_home(directory: Path) -> Path:
    """A DAGSTER_HOME holding the shipped dagster.yaml with its `storage:` block uncommented."""
    home = directory / "home"
    home.mkdir(parents=True)
    lines = (ROOT / "dagster.yaml").read_text().splitlines()
    start = lines.index("# storage:")
    block = [line.removeprefix("# ") for line in lines[start : start + 4]]
    (home / "dagster.yaml").write_text("\n".join([*block, *lines[start + 4 :]]) + "\n")
    assert "postgres" in yaml.safe_load((home / "dagster.yaml").read_text())["storage"]
    return home


def test_the_cursor_carries_over_through_an_instance_in_postgres(
    loads: Loads,
    tmp_path: Path,
    pg: Schema,
    postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    database = f"dagster_{uuid.uuid4().hex[:8]}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE DATABASE {database}")
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO orders SELECT i, i FROM generate_series(1, 10) i")
    loads.configure(pg, "orders", mode="append", cursor="at")
    # SQLAlchemy 2.1 reads plain postgresql:// as psycopg 3, which dagster-postgres's NOTIFY
    # doesn't support: the URL names the psycopg2 driver, as dagster.yaml says.
    url = f"postgresql+psycopg2://{postgres.user}:{postgres.password}@{postgres.host}:{postgres.port}/{database}"
    monkeypatch.setenv("DAGSTER_PG_URL", url)
    try:
        # Two instance objects, as two machines would open them, over the same database.
        with dg.DagsterInstance.from_config(str(_instance_home(tmp_path / "a"))) as first_machine:
            first = loads.run(instance=first_machine)
        pg.execute("INSERT INTO orders VALUES (11, 11)")
        with dg.DagsterInstance.from_config(str(_instance_home(tmp_path / "b"))) as second_machine:
            second = loads.run(instance=second_machine)

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
