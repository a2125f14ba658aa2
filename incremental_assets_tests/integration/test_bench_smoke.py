"""The benchmark harness keeps working: `python -m bench.run --smoke` (10k rows, one run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("ours", "copy", "adbc", "dlt")


def test_the_smoke_benchmark_runs_every_scenario_for_every_engine(tmp_path: Path) -> None:
    out, report = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--smoke", "--out", str(out), "--report", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    results = json.loads(out.read_text())["results"]
    rows = {(r["scenario"], r["engine"]): r["rows"] for r in results}
    for engine in ENGINES:
        assert rows[("S1 first", engine)] == rows[("S1", engine)] == 10_000, engine
        assert ("S0", engine) in rows and ("S3", engine) in rows
    # 0.1% of 10k rows changed: 5 inserted, 5 updated; ours also re-reads the boundary row.
    assert rows[("S2", "adbc")] == 10
    assert rows[("S2", "dlt")] >= 10
    assert 10 <= rows[("S2", "ours")] <= 11
    merges = [r for r in results if r["scenario"].startswith("S4") and r["engine"] == "ours"]
    assert {r["scenario"] for r in merges} == {"S4 clustered", "S4 uniform"}
    assert all(r["rows_changed"] == 100 and r["rows_rewritten"] >= 100 for r in merges)
    # The peers read the same 100 updated rows (dlt also the row tied with its stored cursor).
    for scenario in ("S4 clustered", "S4 uniform"):
        assert rows[(scenario, "adbc")] == 100
        assert 100 <= rows[(scenario, "dlt")] <= 101

    text = report.read_text()
    for heading in ("| S1 |", "| S0 |", "| S2 |", "| S3 |", "| S4 clustered |", "| S4 uniform |"):
        assert heading in text
    assert "S1 within 2x of ADBC -> Parquet" in text

    # End to end: each figure a fresh `dagster asset materialize` (or peer) process, timed outside.
    e2e = {(r["scenario"], r["engine"]): r for r in json.loads(out.read_text())["end_to_end"]}
    assert ("floor", "noop") in e2e
    for case in ("E1", "E2", "E3", "E4", "E5", "E5 cold"):
        assert e2e[(case, "ours")]["wall"] > 0, case
    nothing_new = "not started (nothing new)"
    assert e2e[("E1", "ours")]["spark"] == e2e[("E2", "ours")]["spark"] == nothing_new
    assert e2e[("E3", "ours")]["spark"].startswith("a local session")
    assert e2e[("E4", "ours")]["spark"].startswith("the shared engine")
    assert e2e[("E5", "ours")]["spark"].startswith("the shared engine")
    assert 10 <= e2e[("E3", "ours")]["rows"] <= 11 and 10 <= e2e[("E4", "ours")]["rows"] <= 11
    assert e2e[("E5", "ours")]["rows_changed"] == e2e[("E5 cold", "ours")]["rows_changed"] == 100
    assert e2e[("E1", "adbc")]["rows"] == e2e[("E1", "dlt")]["rows"] == 0
    assert e2e[("E3", "adbc")]["rows"] == 10 and 10 <= e2e[("E3", "dlt")]["rows"] <= 11
    assert text.index("## End to end: what a user pays") < text.index("| S1 |")
    assert "nothing new, cold ≤ 1.5x the no-op asset" in text
    assert "S4 uniform merge ≤ 0.8x S1 full load" in text

    # MySQL: S1 and S0 on MariaDB, ours beside ConnectorX (when installed) and dlt.
    mysql = {(r["scenario"], r["engine"]): r["rows"] for r in json.loads(out.read_text())["mysql"]}
    for engine in {e for _, e in mysql}:
        assert mysql[("S1 first", engine)] == mysql[("S1", engine)] == 10_000, engine
        assert mysql[("S0", engine)] == 0, engine
    assert {"ours", "dlt"} <= {e for _, e in mysql}
    assert "## MySQL: S1 and S0 on MariaDB" in text
