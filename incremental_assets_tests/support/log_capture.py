"""What the `capture: log` tests share: a table's slot, dropped after the test (slots are the
server's, not the test schema's), and writes that wait for the log's flush."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from incremental_assets.sources.pg_slot import names_of
from incremental_assets_tests.support.cli import cli_env
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema

LOGGED: dict[str, Any] = {"name": "items", "mode": "merge", "capture": "log", "primary_key": ["id"]}
ICEBERG = {"format": "iceberg"}
# The suite's server commits without waiting for the log's flush, and a run reads the log to its
# flush point: each test's writes wait for it, as a server's with synchronous_commit on do.
DURABLE = "SET synchronous_commit = on"


def slot_of(loads: Loads, table: str = "items") -> str:
    """The slot (and publication) name of the project's table."""
    return names_of(loads.project.table(table)).slot


def drop_slot(pg: Schema, slot: str) -> None:
    """The slot and its publication gone, if they were made."""
    pg.execute(
        DURABLE,
        f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        f"WHERE slot_name = '{slot}'",
    )
    pg.execute(DURABLE, f"DROP PUBLICATION IF EXISTS {slot}")


def slot_made(pg: Schema, slot: str) -> bool:
    """Whether the server has the slot."""
    return bool(pg.query(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{slot}'"))


def ia(loads: Loads, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`incremental-assets ...` in a subprocess, on the test's instance and project."""
    program = str(Path(sys.executable).with_name("incremental-assets"))
    env = cli_env(loads.cli_config(), loads.home)
    return subprocess.run(
        [program, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
