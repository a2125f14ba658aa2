"""Two `dagster asset materialize` processes for the same table, started together."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from incremental_assets_tests.harness import (
    Schema,
    cli_env,
    materializations,
    read_lake,
    rows_by,
    start_cli,
    write_cli_config,
)


@pytest.mark.xdist_group("connect")
def test_the_second_run_waits_then_continues_from_the_first_runs_cursor(
    tmp_path: Path, pg: Schema, connect: str
) -> None:
    pg.execute("CREATE TABLE orders (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO orders SELECT i, TIMESTAMPTZ '2025-01-01 00:00:00+00' + i * INTERVAL '1 s' FROM generate_series(1, 200) i"
    )
    table = {
        "name": "orders",
        "source": "shop",
        "table": f"{pg.name}.orders",
        "mode": "append",
        "cursor": "updated_at",
        "primary_key": ["id"],
    }
    env = cli_env(
        write_cli_config(tmp_path, {"shop": pg.source()}, [table], remote=connect),
        tmp_path / "home",
    )
    # Create the instance's storage first: a brand-new DAGSTER_HOME is not safe to initialize twice at once.
    dg.DagsterInstance.from_config(str(tmp_path / "home")).dispose()

    runs = [start_cli(tmp_path, env, "--select", "orders") for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]

    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    first, second = materializations(tmp_path / "home", "orders")
    assert second["previous_cursor"] == first["cursor"]  # the second saw the first's result
    assert second["cursor"] == first["cursor"]
    assert (first["rows_written"], second["rows_written"]) == (200, 0)
    lake = rows_by(read_lake(tmp_path / "lake", "orders"), ["id"])
    assert len(lake) == len(set(lake)) == 200
