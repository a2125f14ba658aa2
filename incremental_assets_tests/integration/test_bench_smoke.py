"""The benchmark harness keeps working: `python -m bench.run --smoke` (10k rows, one run).

Its end-to-end phase (fresh processes, the shared engine: about six minutes even at 10k rows) is
left out here to keep `make test` within its budget; `python -m bench.run --smoke` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ("ours", "ours_iceberg", "copy", "adbc", "dlt")
OURS = ("ours", "ours_iceberg")  # the same asset on a plain Parquet lake and on an Iceberg one


def test_the_smoke_benchmark_runs_every_scenario_for_every_engine(tmp_path: Path) -> None:
    out, report = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.run", "--smoke", "--no-end-to-end"),
            *("--out", str(out), "--report", str(report)),
        ],
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
    for engine in OURS:
        assert 10 <= rows[("S2", engine)] <= 11
        merges = [r for r in results if r["scenario"].startswith("S4") and r["engine"] == engine]
        assert {r["scenario"] for r in merges} == {"S4 clustered", "S4 uniform"}
        assert all(r["rows_changed"] == 100 and r["rows_rewritten"] >= 100 for r in merges)
        # Each run of ours records the Spark jobs and stages it started, for the report.
        ours = [r for r in results if r["engine"] == engine]
        assert all(r["spark_jobs"] is not None and r["spark_stages"] is not None for r in ours)
        assert all(r["spark_jobs"] >= 1 for r in merges), engine
    # The peers read the same 100 updated rows (dlt also the row tied with its stored cursor).
    for scenario in ("S4 clustered", "S4 uniform"):
        assert rows[(scenario, "adbc")] == 100
        assert 100 <= rows[(scenario, "dlt")] <= 101

    text = report.read_text()
    for heading in ("| S1 |", "| S0 |", "| S2 |", "| S3 |", "| S4 clustered |", "| S4 uniform |"):
        assert heading in text
    assert "S1 within 2x of ADBC -> Parquet" in text
    assert "### Iceberg against plain Parquet (same run)" in text

    # MySQL: S1 and S0 on MariaDB, ours beside ConnectorX (when installed) and dlt.
    mysql = {(r["scenario"], r["engine"]): r["rows"] for r in json.loads(out.read_text())["mysql"]}
    for engine in {e for _, e in mysql}:
        assert mysql[("S1 first", engine)] == mysql[("S1", engine)] == 10_000, engine
        assert mysql[("S0", engine)] == 0, engine
    assert {"ours", "dlt"} <= {e for _, e in mysql}
    assert "## MySQL: S1 and S0 on MariaDB" in text
