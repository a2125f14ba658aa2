"""A run's progress lines over Spark Connect, as the `incremental-assets` command prints them
from the run's log: the phase and the bytes the server reports read (and the stages' tasks when
one is running as a line is written)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets.progress import INTERVAL_ENV
from incremental_assets.progress_lines import MARK
from incremental_assets_tests.support.cli import cli_env, run_command, write_cli_config

# A phase, then (where Spark reported bytes read) "so far ... KiB read".
_LINE = re.compile(rf"orders: {MARK} [a-z][^;]* for \d+ s; .*so far .*\d (B|KiB|MiB) read")


@pytest.mark.xdist_group("connect")
def test_a_run_over_spark_connect_logs_its_phase_and_bytes_read(
    tmp_path: Path, connect: str
) -> None:
    landing = tmp_path / "landing" / "orders"
    landing.mkdir(parents=True)
    # A read of several Spark jobs (the files' schema, the cursor's range, the rows) over a
    # second or more, each reporting the bytes it read.
    for part in range(6):
        ids = list(range(part * 5_000, (part + 1) * 5_000))
        pq.write_table(pa.table({"id": ids, "at": ids}), landing / f"part-{part}.parquet")
    table = {"name": "orders", "source": "landing", "table": "orders", "mode": "append"}
    table |= {"cursor": "at"}
    sources = {"landing": {"type": "files", "path": str(tmp_path / "landing")}}
    config = write_cli_config(tmp_path, sources, [table], remote=connect)
    env = cli_env(config, tmp_path / "home", **{INTERVAL_ENV: "0.3"})

    run = run_command(tmp_path, env, "run", "orders")

    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = [line for line in run.stdout.splitlines() if f"orders: {MARK}" in line]
    # A stage's tasks show only when one runs at the moment a line is written: under load a
    # short run's lines may all fall between stages, so they are not required here.
    assert any(_LINE.search(line) for line in lines), lines
