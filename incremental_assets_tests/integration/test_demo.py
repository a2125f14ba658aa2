"""`make demo`'s runs: everything the command prints kept in the run's log, its progress lines
shown as they come, and its last lines shown when it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from incremental_assets.demo import run, shown
from incremental_assets_tests.support.cli import cli_env, write_cli_config


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("14:21:45 orders: progress: reading the source for 3 s; so far 2,000 rows read\n", True),
        ("14:21:45 orders: extracting rows with updated_at > 2025-01-01\n", False),
        ("progress: of nothing\n", False),
    ],
)
def test_only_progress_lines_are_shown(line: str, expected: bool) -> None:
    assert shown(line) is expected


def test_a_failed_run_keeps_its_output_and_shows_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = {"landing": {"type": "files", "path": str(tmp_path / "landing")}}
    table = {"name": "orders", "source": "landing", "table": "orders", "cursor": "at"}
    config = write_cli_config(tmp_path, sources, [table])
    for name, value in cli_env(config, tmp_path / "home").items():
        monkeypatch.setenv(name, value)
    log = tmp_path / "run-1.log"

    status = run(log, ["ordrs"])  # no such table: refused before any Spark

    assert status != 0
    kept = log.read_text()
    assert "did you mean 'orders'?" in kept
    assert "did you mean 'orders'?" in capsys.readouterr().out
