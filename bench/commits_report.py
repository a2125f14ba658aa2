"""The section "Iceberg commit cost over 1,000 runs", from bench/commits.py's results.

At runs 1, 10, 100, 250, 500, 750 and 1,000 (those the run reached, and its last): the medians of
a window of 10 runs around each, for both lake formats, then what the Iceberg table holds after
that run. Written to bench/COMMITS.md, which bench/report.py puts into BENCHMARKS.md.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

CHECKPOINTS = (1, 10, 100, 250, 500, 750, 1000)
WINDOW = 10


def checkpoints(last: int) -> list[int]:
    """The checkpoints the run reached, and its last run."""
    reached = [c for c in CHECKPOINTS if c <= last]
    return reached if last in reached or last < 1 else [*reached, last]


def window(run: int, last: int) -> range:
    """WINDOW runs around `run` (from run-5 to run+4), moved inside 1..last."""
    start = max(1, min(run - WINDOW // 2, last - WINDOW + 1))
    return range(start, min(last, start + WINDOW - 1) + 1)


def _by_run(
    results: list[dict[str, Any]], lake_format: str, table: str
) -> dict[int, dict[str, Any]]:
    """One format's runs of one table (results from before the merge table: `orders` only)."""
    return {
        r["run"]: r
        for r in results
        if r["format"] == lake_format and r.get("table", "orders") == table
    }


def _median(runs: dict[int, dict[str, Any]], around: range, key: str) -> float | None:
    values = [runs[i][key] for i in around if i in runs and runs[i].get(key) is not None]
    return median(values) if values else None


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.2f}"


# The tables the benchmark runs, by mode, in the order the section shows them.
TABLES = {"orders": "append", "orders_merge": "merge"}


def commits_section(loaded: dict[str, Any]) -> list[str]:
    """The section's lines: the method, then for each table the time per run at each checkpoint
    and what the table holds."""
    meta, results = loaded["meta"], loaded["runs"]
    tables = [t for t in TABLES if _by_run(results, "iceberg", t)]
    if not tables:
        return []
    last = max(_by_run(results, "iceberg", tables[0]))
    if meta.get("lake_only"):
        lines = _lake_only_method(meta, last)
        for table in tables:
            lines += _table_lines(results, table, LAKE_ONLY_TIMES)
        return lines
    load = meta.get("load", {})
    updates = meta.get("updates", 0)
    lines = [
        f"## Iceberg commit cost over {meta['runs']:,} runs",
        "",
        f"`{meta['command']}` (run on {meta['started'][:19]}Z, {meta.get('seconds', 0) / 60:.0f} "
        f"minutes; load average {load.get('start', '?')} at the start, {load.get('end', '?')} at "
        f"the end; {meta['machine']}). `bench.orders` of {meta['rows']:,} rows loaded once into "
        + ("an append and a merge table" if len(tables) > 1 else "an append table")
        + f", then {last:,} runs in one process, each after {meta['inserts']} new rows"
        + (f" and {updates} updated ones" if updates else "")
        + ": "
        "the Dagster asset materialized in process as `ours` is above (one warm local Spark "
        "session, a persistent Dagster instance per format), on an Iceberg lake (the default SQL "
        f"catalog on SQLite, `keep_snapshots: {meta.get('keep_snapshots', '?')}`) and, right "
        f"after it on the same rows, for the first {meta['parquet_runs']:,} runs on a plain "
        "Parquet lake. Each run adds one data file to the append table, and replaces the files "
        "of the buckets it touched in the merge table. Times are medians of the "
        f"{WINDOW} runs around each checkpoint (runs 1-10 for run 1; plain Parquet's window ends "
        "at its last run). *Wall*: the "
        "materialization, Dagster's run included. *Write*: the run's `write_seconds`, from the "
        "end of Spark's write of the staged files to the end of the commit. *Commit*: the lake's "
        "commit alone (moving the files in; for Iceberg the catalog's swap, then the expiry of "
        "snapshots beyond `keep_snapshots` and the deletion of files only they held). *Facts*: "
        "the reads of the table's state in the run (for Iceberg its manifests), every call summed.",
    ]
    for table in tables:
        lines += _table_lines(results, table, RUN_TIMES)
    return lines


# The times a section shows per checkpoint: the key in the results, and the column's name.
RUN_TIMES = (
    ("wall", "wall"),
    ("write_seconds", "write"),
    ("commit_seconds", "commit"),
    ("facts_seconds", "facts"),
)
LAKE_ONLY_TIMES = (("commit_seconds", "commit"), ("facts_seconds", "facts"))


def _lake_only_method(meta: dict[str, Any], last: int) -> list[str]:
    load = meta.get("load", {})
    return [
        f"## Iceberg commit cost over {last:,} commits",
        "",
        f"`{meta['command']}` (run on {meta['started'][:19]}Z, {meta.get('seconds', 0) / 60:.0f} "
        f"minutes; load average {load.get('start', '?')} at the start, {load.get('end', '?')} at "
        f"the end; {meta['machine']}). The lake's commit alone, without Spark, Dagster or a "
        "database (bench/commits_lake.py): each format's lake table commits what a run's Spark "
        f"job would have staged, Parquet files of {meta['rows']} rows written by pyarrow, "
        f"{last:,} times after a first load, on an Iceberg lake (the default SQL catalog on "
        f"SQLite, `keep_snapshots: {meta.get('keep_snapshots', '?')}`) and, for the first "
        f"{meta['parquet_runs']:,} commits, on a plain Parquet lake. The append table adds one "
        "file per commit; the merge table, 16 hash buckets, replaces the files of the one or two "
        f"buckets each commit touches. Medians of the {WINDOW} commits around each checkpoint. "
        "*Commit*: moving the files in, then for Iceberg the catalog's swap (with the expiry of "
        "snapshots beyond `keep_snapshots`) and the deletion of the files only expired snapshots "
        "held; for plain Parquet the journaled commit. *Facts*: the read of the table's state "
        "before the commit (for Iceberg, its current snapshot's manifests), as every run does. "
        "What a whole run costs besides is in the tables above (S0 to S4): these are the part "
        "that could grow with the table's age.",
    ]


def _table_lines(
    results: list[dict[str, Any]], table: str, times: tuple[tuple[str, str], ...]
) -> list[str]:
    iceberg, parquet = _by_run(results, "iceberg", table), _by_run(results, "parquet", table)
    last = max(iceberg)
    last_parquet = max(parquet, default=0)
    points = checkpoints(last)
    lines = [
        "",
        f"### `{table}` ({TABLES[table]} mode)",
        "",
        "| runs (window) | "
        + " | ".join(f"{label} s, {f}" for _, label in times for f in ("Iceberg", "Parquet"))
        + " |",
        "|---|" + "---:|" * (2 * len(times)),
    ]
    for point in points:
        around = window(point, last)
        # Plain Parquet's window stays within its own runs; past its last run it shows nothing.
        windows = {
            "iceberg": around,
            "parquet": window(point, last_parquet) if point <= last_parquet else range(0),
        }
        cells = [
            _s(_median(runs, windows[name], key))
            for key, _ in times
            for name, runs in (("iceberg", iceberg), ("parquet", parquet))
        ]
        lines.append(
            f"| {point:,} ({around.start}-{around.stop - 1}) | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "What each table holds after the run (files and sizes on disk, the files of the "
        "snapshots kept included):",
        "",
        "| after run | snapshots kept | metadata.json files | manifests (of them, the current "
        "snapshot's) | manifest lists | data files | Iceberg folder MB | catalog KB "
        "| Parquet data files | Parquet folder MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for point in points:
        i, p = iceberg[point], parquet.get(point, {})
        lines.append(
            f"| {point:,} | {i['snapshots']} | {i['metadata_files']} | "
            f"{i['manifests']} ({i.get('manifests_current', '-')}) | "
            f"{i['manifest_lists']} | {i['data_files']} | {_mb(i['folder_bytes'])} | "
            f"{i['catalog_bytes'] / 1024:,.0f} | {p.get('data_files', '-')} | "
            f"{_mb(p.get('folder_bytes'))} |"
        )
    lines += ["", *_growth(iceberg, parquet, last, last_parquet, times), ""]
    return lines


def _growth(
    iceberg: dict[int, dict[str, Any]],
    parquet: dict[int, dict[str, Any]],
    last: int,
    last_parquet: int,
    times: tuple[tuple[str, str], ...],
) -> list[str]:
    """One sentence: the last window against the one at run 10, for both formats."""
    if last < 2 * WINDOW:
        return []
    early = window(10, last)
    parts = []
    for name, runs, end in (("Iceberg", iceberg, last), ("plain Parquet", parquet, last_parquet)):
        if end < 2 * WINDOW:
            continue
        late = window(end, end)
        shown = []
        for key, what in times:
            a, b = _median(runs, early, key), _median(runs, late, key)
            if a and b is not None:
                shown.append(f"{what} {a:.3f} -> {b:.3f} s ({b / a:.2f}x)")
        parts.append(f"{name}, run {end:,} against run 10: " + ", ".join(shown))
    return ["; ".join(parts) + "."] if parts else []


def write_commits_report(loaded: dict[str, Any], path: Path) -> None:
    path.write_text("\n".join(commits_section(loaded)).rstrip() + "\n")
