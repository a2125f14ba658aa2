"""The section "Iceberg commit cost over N commits", from bench/commits_lake.py's results (the
writers alone) or bench/commits.py's (whole materializations).

For each table: the medians of a window of 10 commits around commits 1, 10, 100, 250, 500 and
1,000 (those the run reached, and its last) of each timed step, then what the table held after
that commit; and whether the commit and the metadata file stay flat: the last window against
the one around commit 10. A step is called flat when it costs at most FLAT times as much at the
end; the metadata file is compared with the snapshots kept, and both are carried on, in a
straight line, to the snapshots a table committed every minute keeps for a day (1,440 commits:
twice as many snapshots for a merge table).
Written to bench/COMMITS.md, which bench/report.py puts into BENCHMARKS.md.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from statistics import median
from typing import Any

CHECKPOINTS = (1, 10, 100, 250, 500, 1000)
WINDOW = 10
FLAT = 1.5  # a step is flat if the last window costs at most this many times commit 10's
A_DAY = 1_440  # commits a table committed once a minute makes in a day
# Snapshots a commit makes, by mode: a merge's delete, then its append.
SNAPSHOTS_PER_COMMIT = {"append": 1, "merge": 2}
# The tables the benchmark commits to, by mode, in the order the section shows them.
TABLES = {"orders": "append", "orders_merge": "merge"}
# The times a section shows per checkpoint: the key in the results, and the column's name.
LAKE_ONLY_TIMES = (
    ("facts_seconds", "facts"),
    ("stage_seconds", "stage"),
    ("commit_seconds", "commit"),
    ("maintenance_seconds", "maintenance"),
    ("wall", "all"),
)
RUN_TIMES = (
    ("wall", "wall"),
    ("extract_seconds", "extract"),
    ("commit_seconds", "commit"),
    ("maintenance_seconds", "maintenance"),
)


def duration(value: timedelta) -> str:
    """A duration as the configuration writes it: `1d`, `12h`, `30m`, `45s`."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def checkpoints(last: int) -> list[int]:
    """The checkpoints the run reached, and its last commit."""
    reached = [c for c in CHECKPOINTS if c <= last]
    return reached if last in reached or last < 1 else [*reached, last]


def window(run: int, last: int) -> range:
    """WINDOW commits around `run` (from run-5 to run+4), moved inside 1..last."""
    start = max(1, min(run - WINDOW // 2, last - WINDOW + 1))
    return range(start, min(last, start + WINDOW - 1) + 1)


def _by_run(results: list[dict[str, Any]], table: str) -> dict[int, dict[str, Any]]:
    return {r["run"]: r for r in results if r.get("table") == table and "snapshots" in r}


def _median(runs: dict[int, dict[str, Any]], around: range, key: str) -> float | None:
    values = [float(runs[i].get(key) or 0.0) for i in around if i in runs]
    return median(values) if values else None


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def commits_section(loaded: dict[str, Any]) -> list[str]:
    """The section's lines: the method, then for each table its times at each checkpoint, what
    it held, and whether it stayed flat."""
    meta, results = loaded["meta"], loaded["runs"]
    tables = [t for t in TABLES if _by_run(results, t)]
    if not tables:
        return []
    last = max(_by_run(results, tables[0]))
    lake_only = bool(meta.get("lake_only"))
    lines = _method(meta, last, lake_only)
    for table in tables:
        lines += _table_lines(results, table, LAKE_ONLY_TIMES if lake_only else RUN_TIMES)
    return lines


def _method(meta: dict[str, Any], last: int, lake_only: bool) -> list[str]:
    load = meta.get("load", {})
    ran = (
        f"`{meta['command']}` (run on {meta['started'][:19]}Z, "
        f"{meta.get('seconds', 0) / 60:.0f} minutes; load average {load.get('start', '?')} at "
        f"the start, {load.get('end', '?')} at the end; {meta['machine']})."
    )
    kept = (
        f"`keep_snapshots: {meta.get('keep_snapshots', '?')}` and `keep_snapshots_for: "
        f"{meta.get('keep_snapshots_for', '?')}` (the defaults): commits come faster than one a "
        "minute, so no snapshot is old enough to expire and the table keeps every one, as a "
        f"table committed every minute would for its first day ({A_DAY:,} commits: as many "
        "snapshots for an append table, twice as many for a merge table)."
    )
    if lake_only:
        how = (
            "The package's writers alone, without Dagster or a database (bench/commits_lake.py): "
            f"on one local Spark session ({_settings(meta)}), each commit made as a run makes it, "
            "to an Iceberg lake (the default SQLite catalog), "
            + kept
            + f" `orders` (append) gets {meta['rows']} new rows a commit; `orders_merge` (merge, "
            f"merge-on-read, partitioned `truncate(1000, id)`) gets {meta['rows']} rows a "
            "commit, half updates in one or two key ranges and half new ids; both after a first "
            f"load of {meta.get('first_rows', 0):,} rows. *Facts*: the table's metadata read "
            "before the commit. *Stage*: the writer's stage (append: the batch written on the "
            "run's branch; merge: each key's latest version). *Commit*: the writer's commit "
            "(merge: the changed keys' rows deleted and their new versions appended on the "
            "branch), `main` fast-forwarded to the branch, the "
            "branch dropped. *Maintenance*: what a run does after its commit, when due. *All*: "
            "their sum."
        )
    else:
        how = (
            "Whole materializations of the Dagster asset in one process (bench/commits.py), as "
            f"`ours_iceberg` runs them above, on `bench.orders` of {meta['rows']:,} rows, each "
            f"run after {meta.get('inserts', 0)} new and {meta.get('updates', 0)} updated rows; "
            + kept
            + " *Wall*: the materialization. *Extract*: the read and the stage. *Commit*: the "
            "write's time without the maintenance. *Maintenance*: after the commit, when due."
        )
    return [
        f"## Iceberg commit cost over {last:,} commits",
        "",
        f"{ran} {how} Medians of the {WINDOW} commits around each checkpoint, seconds. After "
        "each commit, outside the clock: the snapshots kept, the current metadata file's size "
        "(every commit rewrites it, every reader parses it), the live data and delete files, "
        "and the objects in the table's folder.",
    ]


def _settings(meta: dict[str, Any]) -> str:
    """The session's settings the run names, beside local[*]."""
    conf = meta.get("spark_conf") or {}
    return ", ".join(["local[*]", *(f"`{k}={v}`" for k, v in conf.items())])


def _table_lines(
    results: list[dict[str, Any]], table: str, times: tuple[tuple[str, str], ...]
) -> list[str]:
    runs = _by_run(results, table)
    last = max(runs)
    points = checkpoints(last)
    lines = [
        "",
        f"### `{table}` ({TABLES[table]} mode)",
        "",
        "| commits (window) | "
        + " | ".join(f"{label} s" for _, label in times)
        + " | maintenance ran | snapshots | metadata file KB | live data files | delete files "
        "| objects | folder MB |",
        "|---|" + "---:|" * (len(times) + 7),
    ]
    for point in points:
        around = window(point, last)
        cells = [_s(_median(runs, around, key)) for key, _ in times]
        ran = sum(1 for i in around if i in runs and runs[i].get("maintenance"))
        state = runs[point]
        lines.append(
            f"| {point:,} ({around.start}-{around.stop - 1}) | "
            + " | ".join(cells)
            + f" | {ran} of {len(around)} | {state['snapshots']:,} | "
            f"{state['metadata_bytes'] / 1024:,.0f} | {state['data_files']:,} | "
            f"{state['delete_files']:,} | {state['objects']:,} | "
            f"{state['bytes'] / 2**20:,.1f} |"
        )
    return [*lines, "", *_flat(runs, last, A_DAY * SNAPSHOTS_PER_COMMIT[TABLES[table]]), ""]


def _flat(runs: dict[int, dict[str, Any]], last: int, a_day: int) -> list[str]:
    """Whether the commit and the metadata file stay flat: the last window against commit 10's,
    and both carried on to a day of commits once a minute."""
    if last < 2 * WINDOW:
        return [f"(Whether it stays flat needs at least {2 * WINDOW} commits.)"]
    early, late = window(10, last), window(last, last)
    commit_early, commit_late = (
        _median(runs, early, "commit_seconds"),
        _median(runs, late, "commit_seconds"),
    )
    snaps_early, snaps_late = _median(runs, early, "snapshots"), _median(runs, late, "snapshots")
    meta_early, meta_late = (
        _median(runs, early, "metadata_bytes"),
        _median(runs, late, "metadata_bytes"),
    )
    if not (
        commit_early and commit_late and snaps_early and snaps_late and meta_early and meta_late
    ):
        return []
    growth = commit_late / commit_early
    verdict = "stays flat" if growth <= FLAT else "does not stay flat"
    per_snapshot = (meta_late - meta_early) / max(snaps_late - snaps_early, 1)
    seconds_per = (commit_late - commit_early) / max(snaps_late - snaps_early, 1)
    day_bytes = meta_late + max(per_snapshot, 0.0) * (a_day - snaps_late)
    if seconds_per > 0:
        day = f"a commit of about {commit_late + seconds_per * (a_day - snaps_late):.2f} s"
    else:
        day = "a commit that, not having grown, stays where it is"
    return [
        f"The commit {verdict} (at most {FLAT}x commit 10's is flat): {commit_early:.2f} s "
        f"around commit 10, {commit_late:.2f} s around commit {last:,} ({growth:.2f}x), while "
        f"the snapshots kept went from {snaps_early:,.0f} to {snaps_late:,.0f}. The metadata file "
        f"went from {meta_early / 1024:,.0f} KB to {meta_late / 1024:,.0f} KB "
        f"({meta_late / meta_early:.1f}x, about {per_snapshot:,.0f} bytes per snapshot kept): "
        + ("it stays flat. " if meta_late <= FLAT * meta_early else "it grows with the snapshots. ")
        + f"Carried on in a straight line to the {a_day:,} snapshots a table committed every "
        f"minute keeps for a day: a metadata file of about {day_bytes / 2**20:,.1f} MB and "
        f"{day}."
    ]


def write_commits_report(loaded: dict[str, Any], path: Path) -> None:
    path.write_text("\n".join(commits_section(loaded)).rstrip() + "\n")
