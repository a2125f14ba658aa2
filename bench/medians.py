"""The medians of the in-process results, by scenario and engine: what every report table reads.

Each entry holds the medians of the runs of one scenario by one engine: wall time, rows, CPU,
peak memory, files; for ours the engine's own seconds, the Spark jobs and stages, the rows
written per changed row and the merge path the runs recorded; and the maintenance the runs did
after their commits (how many ran it, the median of its seconds where it ran, and the tasks).
Results of earlier runs (without some of these) give what they have.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

from bench.recorded import maintenance_tasks

Medians = dict[tuple[str, str], dict[str, Any]]
# The in-process scenarios, in the order the report shows them.
ORDER = ("S1 first", "S1", "S0", "S2", "S3", "S4 clustered", "S4 uniform")


def medians_of(results: list[dict[str, Any]]) -> Medians:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        grouped[(result["scenario"], result["engine"])].append(result)
    return {key: _entry(runs) for key, runs in grouped.items()}


def _entry(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rows = median(r["rows"] or 0 for r in runs)
    wall = median(r["wall"] for r in runs)
    cpu = median(r["cpu_client"] + r["cpu_server"] for r in runs)
    entry: dict[str, Any] = {
        "runs": len(runs),
        "rows": rows,
        "wall": wall,
        "rows_per_s": rows / wall if wall else 0.0,
        "cpu": cpu,
        "cpu_per_m": cpu / (rows / 1e6) if rows else 0.0,
        "peak_mb": median(r["peak_rss"] for r in runs) / 2**20,
        "files": median(r.get("files") or 0 for r in runs),
    }
    strategies = sorted({str(r["merge_strategy"]) for r in runs if r.get("merge_strategy")})
    if strategies:
        entry["merge_strategy"] = "; ".join(strategies)
    for key in ("engine_seconds", "write_seconds", "commit_seconds"):
        if runs[0].get(key) is not None:
            entry[key] = median(r.get(key) or 0.0 for r in runs)
    for work in ("spark_jobs", "spark_stages"):  # ours only; None where not counted
        counted = [r[work] for r in runs if r.get(work) is not None]
        if counted:
            entry[work] = median(counted)
    if runs[0].get("rows_rewritten") is not None and runs[0].get("rows_changed"):
        entry["rewritten_per_changed"] = median(
            r["rows_rewritten"] / max(r["rows_changed"], 1) for r in runs
        )
    maintained = [r for r in runs if r.get("maintenance")]
    if maintained:
        seconds = [r["maintenance_seconds"] for r in maintained if r.get("maintenance_seconds")]
        entry["maintenance_runs"] = len(maintained)
        entry["maintenance_seconds"] = median(seconds) if seconds else None
        entry["maintenance_tasks"] = sorted(
            {t for r in maintained for t in maintenance_tasks(r["maintenance"])}
        )
    return entry
