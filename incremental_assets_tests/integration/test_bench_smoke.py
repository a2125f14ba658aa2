"""The benchmark harnesses keep working, at smoke sizes: `python -m bench.run --smoke` (10k rows,
one run of each scenario) on every in-process engine, its A50 phase (3 merges) on the Iceberg
engines, the MySQL phase, the commit benchmarks over a few commits, and the report on a
published run.

The tests split the harness so that each takes about a minute on a quiet machine (they run side
by side under xdist). The end-to-end phase (fresh `dagster asset materialize` processes, the
shared engine: several minutes even at 10k rows) is left out of `make test`; `python -m bench.run
--smoke --only-end-to-end` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The object-store engine (Iceberg on moto's S3) runs in the A50 phase's test only: the same
# writers as `ours_iceberg`, so the in-process phase runs the others.
ENGINES = ("ours", "ours_iceberg", "copy", "adbc", "dlt")
OURS = ("ours", "ours_iceberg")  # plain Parquet, Iceberg
S3 = "ours_iceberg_s3"
PUBLISHED = ROOT / "bench" / "results" / "20261125T114040.json"  # 1M rows, with end to end


def _bench(module: str, *args: str, timeout: float = 900) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _by(results: list[dict[str, Any]], scenario: str, engine: str) -> list[dict[str, Any]]:
    return [r for r in results if r["scenario"] == scenario and r["engine"] == engine]


def test_the_smoke_benchmark_runs_every_in_process_scenario_for_every_engine(
    tmp_path: Path,
) -> None:
    out, report = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    _bench(
        "bench.run",
        *("--smoke", "--no-end-to-end", "--no-mysql", "--no-a50", "--out", str(out)),
        *("--engines", ",".join(ENGINES)),
    )

    results = json.loads(out.read_text())["results"]
    rows = {(r["scenario"], r["engine"]): r["rows"] for r in results}
    for engine in ENGINES:
        assert rows[("S1 first", engine)] == rows[("S1", engine)] == 10_000, engine
        assert {("S4 clustered", engine), ("S4 uniform", engine)} <= set(rows), engine
        assert ("S0", engine) in rows and ("S3", engine) in rows, engine
    # 0.1% of 10k rows changed: 5 inserted, 5 updated; ours also re-reads the boundary row.
    assert rows[("S2", "adbc")] == 10
    assert rows[("S2", "dlt")] >= 10
    for engine in OURS:
        assert 10 <= rows[("S2", engine)] <= 11
        merges = [r for r in results if r["scenario"].startswith("S4") and r["engine"] == engine]
        assert {r["scenario"] for r in merges} == {"S4 clustered", "S4 uniform"}
        assert all(r["rows_changed"] == 100 and r["rows_rewritten"] >= 100 for r in merges)
        # Each run of ours records its Spark jobs and stages (in the metadata's internals), and
        # the worker reads what the table holds after the clock.
        ours = [r for r in results if r["engine"] == engine]
        assert all(r["spark_jobs"] is not None and r["spark_stages"] is not None for r in ours)
        assert all(r["spark_jobs"] >= 1 for r in merges), engine
        assert all(r["table"]["data_files"] >= 1 for r in ours), engine
    merges = [
        r for r in results if r["scenario"].startswith("S4") and r["engine"] == "ours_iceberg"
    ]
    assert {r["merge_strategy"] for r in merges} == {"merge on read"}
    # Merge-on-read: the 100 changed rows written, and their old versions deleted.
    assert all(r["rows_rewritten"] == 100 for r in merges)
    assert all(r["table"]["delete_files"] >= 1 for r in merges)
    assert all(r["table"]["metadata_bytes"] > 0 for r in merges)
    # The peers read the same 100 updated rows (dlt also the row tied with its stored cursor).
    for scenario in ("S4 clustered", "S4 uniform"):
        assert rows[(scenario, "adbc")] == 100
        assert 100 <= rows[(scenario, "dlt")] <= 101

    _bench("bench.report", str(out), "--report", str(report), "--previous", str(PUBLISHED))
    text = report.read_text()
    for heading in ("| S1 |", "| S0 |", "| S2 |", "| S3 |", "| S4 clustered |", "| S4 uniform |"):
        assert heading in text
    for section in (
        "## In-process targets",
        "### Iceberg against plain Parquet (same run)",
        "## Iceberg: this layer against the previous one",
    ):
        assert section in text, section
    for target in (
        "S1 within 10% of the previous run",
        "S4 uniform merge ≤ 0.5x S1 full load",
        "moonshot: S4 uniform merge ≤ 2x S4 clustered",
        "S4 clustered merge ≤ 0.3x S1 full load",
        "S4 clustered: at most 2 rows written per changed row",
    ):
        assert target in text, target


def test_the_read_amplification_phase_scans_the_merged_table_and_the_compacted_one(
    tmp_path: Path,
) -> None:
    """A50 alone on the object-store engine (the local Iceberg engine runs the same writers):
    three merges of a different 1% (maintenance not yet due), then the scans around the
    benchmark's compaction, which leaves no delete file; the object store's requests counted."""
    out, report = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    _bench(
        "bench.run",
        *("--smoke", "--only-a50", "--engines", S3, "--out", str(out), "--report", str(report)),
    )

    results = json.loads(out.read_text())["results"]
    (setup,) = _by(results, "A50 setup", S3)
    assert setup["rows"] == 10_000
    merges = _by(results, "A50", S3)
    assert [r["merge"] for r in merges] == [1, 2, 3]
    assert all(r["rows_changed"] == 100 for r in merges)
    assert [r["table"]["position_deletes"] for r in merges] == [100, 200, 300]
    for scan in ("A50 scan", "A50 scan compacted"):
        (done,) = _by(results, scan, S3)
        assert done["rows"] == 10_000, scan
        assert len(done["spark_seconds"]) == len(done["pyiceberg_seconds"]) == 1
    (compacted,) = _by(results, "A50 compact", S3)
    assert compacted["table"]["delete_files"] == 0
    # The object store's requests are counted per run, the table's own read excluded.
    assert all(r["s3_requests"].get("PUT", 0) > 0 for r in merges)
    text = report.read_text()
    assert "## Read amplification: 3 uniform 1% merges (A50)" in text
    assert "## Object store: the Iceberg lake on moto's S3 server" in text
    assert "| Iceberg on moto's S3 | PyIceberg |" in text


def test_the_mysql_phase_runs_ours_beside_its_peers(tmp_path: Path) -> None:
    """S1 and S0 on MariaDB, ours beside ConnectorX (when installed) and dlt."""
    out, report = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    _bench("bench.run", "--smoke", "--only-mysql", "--out", str(out), "--report", str(report))

    mysql = {(r["scenario"], r["engine"]): r["rows"] for r in json.loads(out.read_text())["mysql"]}
    for engine in {e for _, e in mysql}:
        assert mysql[("S1 first", engine)] == mysql[("S1", engine)] == 10_000, engine
        assert mysql[("S0", engine)] == 0, engine
    assert {"ours", "dlt"} <= {e for _, e in mysql}
    assert "## MySQL: S1 and S0 on MariaDB" in report.read_text()


def test_the_commit_benchmarks_run_through_the_writers_and_through_materializations(
    tmp_path: Path,
) -> None:
    lake_only, report = tmp_path / "lake.json", tmp_path / "COMMITS.md"
    _bench("bench.commits_lake", "--commits", "2", "--out", str(lake_only), "--report", str(report))

    runs = json.loads(lake_only.read_text())["runs"]
    assert sorted((r["table"], r["run"]) for r in runs) == [
        ("orders", 1),
        ("orders", 2),
        ("orders_merge", 1),
        ("orders_merge", 2),
    ]
    for r in runs:  # after the first load's: one snapshot an append, two a merge (its delete and
        # its append); the metadata file grows
        per_run = 2 if r["table"] == "orders_merge" else 1
        assert r["snapshots"] == 1 + per_run * r["run"], r
        assert r["metadata_bytes"] > 0 and r["commit_seconds"] > 0, r
    merged = [r for r in runs if r["table"] == "orders_merge"]
    assert all(r["delete_files"] >= 1 for r in merged)
    text = report.read_text()
    assert "## Iceberg commit cost over 2 commits" in text
    assert "### `orders_merge` (merge mode)" in text

    whole = tmp_path / "runs.json"
    _bench(
        "bench.commits",
        *("--runs", "1", "--rows", "1000", "--out", str(whole), "--report", str(report)),
    )
    runs = json.loads(whole.read_text())["runs"]
    assert {(r["table"], r["run"]) for r in runs} == {("orders", 1), ("orders_merge", 1)}
    # The first load's snapshot, then the run's: one for an append, a merge's delete and append.
    assert all(
        r["snapshots"] == 1 + (2 if r["table"] == "orders_merge" else 1) and r["rows"] >= 10
        for r in runs
    ), runs
    assert "## Iceberg commit cost over 1 commits" in report.read_text()


def test_the_report_renders_a_published_run_with_its_targets(tmp_path: Path) -> None:
    """A published run's results render with the end-to-end targets of each lake format."""
    report = tmp_path / "BENCHMARKS.md"
    _bench("bench.report", str(PUBLISHED), "--report", str(report), timeout=120)

    text = report.read_text()
    assert "| E1: nothing new, cold ≤ 1.5x the no-op asset |" in text
    assert "| E1: nothing new, cold ≤ 1.5x the no-op asset, *Iceberg lake* |" in text
    assert "| E4: 0.1% delta of 1,000,000 rows with the engine up ≤ 3.0 s wall |" in text
    # The published run is the 1M previous run itself: S1 is judged against its own figures.
    assert "S1 within 10% of the previous run (`bench/results/20261125T114040.json`" in text
