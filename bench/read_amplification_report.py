"""The A50 section: what the merges cost readers (full scans against the same table compacted),
and what the maintenance that keeps them fast cost the runs, per Iceberg engine.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from bench.commits_report import duration
from bench.read_amplification import TARGET
from bench.recorded import maintenance_tasks
from bench.targets import FORMATS, at_most
from incremental_assets.config import LakeSpec
from incremental_assets.lake.iceberg.maintenance import ORPHAN_AGE, Policy

CHECKPOINT_EVERY = 10  # the merges table shows every tenth merge (and the first and last)
MAINTAINED_SHOWN = 12  # ... and each merge after which maintenance ran, when at most this many


def _schedule() -> str:
    """The maintenance's default schedule, from the package's own defaults."""
    lake = LakeSpec(path="/lake")
    policy = Policy(keep_snapshots=lake.keep_snapshots, keep_snapshots_for=lake.keep_snapshots_for)
    return (
        f"compaction once deletes remove {policy.deleted_fraction:.0%} of the rows read, or "
        f"{policy.delete_files} delete files or {policy.small_files} small files pile up; "
        f"expiry only of snapshots past both {policy.keep_snapshots} newer ones and "
        f"{duration(policy.keep_snapshots_for)} of age, so none in a run this short; orphan "
        f"removal once a day past {ORPHAN_AGE.days} days of age, so none here"
    )


def _times(count: int) -> str:
    return "once" if count == 1 else "twice" if count == 2 else f"{count} times"


def _runs(results: list[dict[str, Any]], scenario: str, engine: str) -> list[dict[str, Any]]:
    return [r for r in results if r["scenario"] == scenario and r["engine"] == engine]


def _one(results: list[dict[str, Any]], scenario: str, engine: str) -> dict[str, Any] | None:
    found = _runs(results, scenario, engine)
    return found[-1] if found else None


def read_amplification_section(meta: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    engines = [e for e in FORMATS if _runs(results, "A50", e)]
    if not engines:
        return []
    merges = max(r.get("merge", 0) for r in results if r["scenario"] == "A50")
    lines = [
        f"## Read amplification: {merges} uniform 1% merges (A50)",
        "",
        f"On each Iceberg engine, after the other scenarios: the merge table loaded whole again, "
        f"then {merges} runs of `orders_merge`, each after 1% of the rows "
        f"({meta['rows'] // 100:,}) were updated, spread uniformly over the ids and a different 1% "
        "each time, so that the merges' deletes pile up over the table's files. Each run is a "
        "user's: merge-on-read, maintenance on its default schedule after the commit "
        f"({_schedule()}); its time is in the run's wall and `write_seconds`, and the run records "
        "what ran (`maintenance`). Then the whole table is read, every row and column with the "
        f"deletes applied, {_times(int(meta['repeats']))} by each reader: by Spark "
        "(`spark.read.table(...)` into Spark's `noop` sink, in the engine's warm session) and by "
        "PyIceberg (`load_table`, then `scan().to_arrow()`, in the same process). The reference is "
        "the same table compacted whole by the benchmark (`rewrite_data_files` with `rewrite-all`, "
        "dangling deletes removed, then `rewrite_manifests`), read the same way. Medians.",
        "",
        *_scans(results, engines),
        *_maintenance(results, engines),
    ]
    for engine in engines:
        lines += _merges(results, engine, merges)
    return lines


def _scans(results: list[dict[str, Any]], engines: list[str]) -> list[str]:
    lines = [
        f"| engine | reader | after the merges s | compacted s | ratio | ≤ {TARGET}x met "
        "| live data files / delete files, after | after compaction |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for engine in engines:
        after, compacted = (
            _one(results, "A50 scan", engine),
            _one(results, "A50 scan compacted", engine),
        )
        if after is None or compacted is None:
            continue
        for reader, key in (("Spark", "spark_seconds"), ("PyIceberg", "pyiceberg_seconds")):
            a, c = median(after[key]), median(compacted[key])
            lines.append(
                f"| {FORMATS[engine]} | {reader} | {a:.2f} | {c:.2f} | {a / c:.2f}x | "
                f"{at_most(a, TARGET * c)} | {_files(after)} | {_files(compacted)} |"
            )
    return [*lines, ""]


def _files(result: dict[str, Any]) -> str:
    table = result.get("table") or {}
    return f"{table.get('data_files', '?')} / {table.get('delete_files', '?')}"


def _maintenance(results: list[dict[str, Any]], engines: list[str]) -> list[str]:
    """The maintenance's cost over the merges: how often it ran, what, and its share of the runs'
    time; beside it, the benchmark's own compaction of the reference."""
    lines = []
    for engine in engines:
        runs = _runs(results, "A50", engine)
        ran = [r for r in runs if r.get("maintenance")]
        spent = sum(r.get("maintenance_seconds") or 0.0 for r in ran)
        wall = sum(r["wall"] for r in runs)
        tasks: dict[str, int] = {}
        for r in ran:
            for task in maintenance_tasks(r["maintenance"]):
                tasks[task] = tasks.get(task, 0) + 1
        what = ", ".join(f"{task} {count}x" for task, count in tasks.items()) or "nothing"
        compact = _one(results, "A50 compact", engine)
        reference = (
            f"; the benchmark's full compaction took {compact['wall']:.2f} s" if compact else ""
        )
        lines.append(
            f"**{FORMATS[engine]}**: maintenance ran after {len(ran)} of {len(runs)} merges "
            f"({what}), {spent:.1f} s in all, {spent / wall:.0%} of the merges' {wall:.1f} s of "
            f"wall time (median merge {median(r['wall'] for r in runs):.2f} s){reference}."
        )
    return [*lines, ""] if lines else []


def _merges(results: list[dict[str, Any]], engine: str, merges: int) -> list[str]:
    runs = {r["merge"]: r for r in _runs(results, "A50", engine)}
    points = {1, merges, *range(CHECKPOINT_EVERY, merges + 1, CHECKPOINT_EVERY)}
    maintained = {m for m, r in runs.items() if r.get("maintenance")}
    also = ""
    if 0 < len(maintained) <= MAINTAINED_SHOWN:
        points |= maintained
        also = ", and each after which maintenance ran"
    shown = sorted(points & set(runs))
    lines = [
        f"{FORMATS[engine]}, merge by merge (every {CHECKPOINT_EVERY}th{also}):",
        "",
        "| merge | wall s | commit s | maintenance s (what) | live data files | delete files "
        "| position deletes | snapshots | metadata file KB | objects |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for merge in shown:
        r = runs[merge]
        table = r.get("table") or {}
        what = ", ".join(maintenance_tasks(r.get("maintenance")))
        seconds = r.get("maintenance_seconds")
        maintenance = f"{seconds:.2f} ({what})" if seconds is not None else (what or "-")
        lines.append(
            f"| {merge} | {r['wall']:.2f} | {r.get('commit_seconds') or 0:.2f} | {maintenance} | "
            f"{table.get('data_files', '-')} | {table.get('delete_files', '-')} | "
            f"{table.get('position_deletes', 0):,} | {table.get('snapshots', '-')} | "
            f"{table.get('metadata_bytes', 0) / 1024:,.0f} | {table.get('objects', '-')} |"
        )
    return [*lines, ""]
