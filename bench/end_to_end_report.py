"""The report's first section: what a user pays per run, from the end-to-end phase's results.

One table of medians (each a fresh process timed from outside), with the ratios that matter: the
nothing-new runs against Dagster's floor (the no-op asset), every case against the peers run the
same way, and the in-process figure of the same case; then the one-offs kept outside the medians,
and the end-to-end targets.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import median
from typing import Any

from bench.engines import OURS
from bench.targets import FORMATS, at_most

CASES = {
    "E1": "E1: nothing new, cold (no engine running)",
    "E2": "E2: nothing new, engine up",
    "E3": "E3: 0.1% delta, cold (the run starts its own local Spark)",
    "E4": "E4: 0.1% delta, engine up",
    "E5": "E5: 1% uniform merge, engine up",
    "E5 cold": "E5 cold: 1% uniform merge, cold",
}
# The peers have no engine: the engine-up cases compare with their one figure for the same work.
PEER_CASE = {"E1": "E1", "E2": "E1", "E3": "E3", "E4": "E3"}
NOTHING_NEW = ("E1", "E2")
IN_PROCESS = {"E1": "S0", "E2": "S0", "E3": "S2", "E4": "S2", "E5": "S4 uniform"}
ONE_OFFS = {
    ("first load", "ours"): "first load of both tables, one cold process",
    ("first load", "ours_iceberg"): "Iceberg lake: first load of orders, one cold process",
    ("first load", "dlt"): "dlt's first load (full table, fresh process)",
    ("floor first", "noop"): "the no-op asset's first run",
    ("catch-up", "ours"): "orders_merge catching up on E3's changes, cold",
    ("engine start", "engine"): "`incremental-assets engine start` (until it takes sessions)",
    ("E4 first", "ours"): "the first run through the new engine (orders, E5 cold's updates)",
    (
        "E4 first",
        "ours_iceberg",
    ): "Iceberg lake: orders' first run through the engine (E3's and E5 cold's changes)",
    ("E5 first", "ours"): "orders_merge's first run through the engine (E4's changes)",
    ("engine stop", "engine"): "`incremental-assets engine stop`",
}
E1_BOUND = 1.5  # E1 at most this many times the no-op asset's wall time
E4_SECONDS, E4_ROWS = 3.0, 1_000_000  # E4 at most this wall time, judged at this size


def e2e_medians(end_to_end: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for result in end_to_end:
        if not result.get("one_off"):
            grouped[(result["scenario"], result["engine"])].append(result)
    return {
        key: {
            "runs": len(runs),
            "wall": median(r["wall"] for r in runs),
            "rows": median(r["rows"] or 0 for r in runs),
            "spark": _spark(runs),
            "engine_seconds": median(r.get("engine_seconds") or 0.0 for r in runs),
        }
        for key, runs in grouped.items()
    }


def _spark(runs: list[dict[str, Any]]) -> str:
    """Which Spark the runs say they used, shortened; a mix is shown with its counts."""
    seen = Counter(str(r.get("spark") or "-").split(" at sc://")[0] for r in runs)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{name} ({count} of {len(runs)})" for name, count in seen.items())


def _runs(m: dict[tuple[str, str], dict[str, Any]], case: str, engine: str) -> str:
    entry = m.get((case, engine))
    return str(entry["runs"]) if entry else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def end_to_end_section(
    meta: dict[str, Any],
    end_to_end: list[dict[str, Any]],
    in_process: dict[tuple[str, str], dict[str, float]],
) -> list[str]:
    """The section's lines: method, the table, the one-offs, the targets."""
    m = e2e_medians(end_to_end)

    def wall(case: str, engine: str) -> float | None:
        entry = m.get((case, engine))
        return entry["wall"] if entry else None

    floor = wall("floor", "noop")
    runs = max((e["runs"] for e in m.values()), default=0)
    lines = [
        "## End to end: what a user pays",
        "",
        "Each figure is a fresh `dagster asset materialize --select <table>` process, timed from "
        "outside: the wall clock from launching it until it has exited (the interpreter, the "
        "imports, loading the definitions, the run and its event log, and Spark if the run needs "
        f"it). Medians of {runs} runs (fewer where the runs column says so), on the same "
        "`bench.orders` as below. The project has its own `incremental_assets.yaml` (`spark: "
        "{engine: shared}`, local[*], 4 GB driver) and its own DAGSTER_HOME (SQLite). *Cold*: no "
        "engine is running, so a run that needs Spark starts a local session (a JVM) of its own. "
        "*Engine up*: `incremental-assets engine start` ran first, and the runs connect to it. The "
        "floor is the same command on an asset that does nothing (bench/noop_defs.py): what any "
        "Dagster asset pays per run. The peers run the same way, a fresh `python -m "
        "bench.fresh_peer` process per run: ADBC -> Parquet reading `updated_at > <the newest "
        "before the changes>`, and dlt's incremental `sql_table` (pyarrow backend, Parquet). They "
        "have no engine to keep up: the engine-up rows compare with their figures for the same "
        "work. *Extract + write* is the load's own time as the run records it (`extract_seconds` + "
        "`write_seconds`); the rest of the wall time is the process, Dagster and the Spark "
        "session. The project's lake is plain Parquet (`lake: {format: parquet}`); the rows marked "
        "*Iceberg lake* are a second project on `lake: {format: iceberg}` (Spark writing through "
        "Iceberg's runtime, the default SQLite catalog), the same tables under the key prefix "
        "`iceberg`, sharing the first project's DAGSTER_HOME and engine; each of its runs comes "
        "right after the plain one's, on the same source changes.",
        "",
        "| case | runs | rows | ours, median wall s | of it, extract + write s | "
        "Spark, as the runs report it | vs the no-op asset | ADBC -> Parquet s | ours vs ADBC | "
        "dlt s | ours vs dlt | in process (same case) |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        f"| the no-op asset (Dagster's floor) | {_runs(m, 'floor', 'noop')} | - | "
        f"{_seconds(floor)} | - | - | 1.00x | - | - | - | - | - |",
    ]
    for case, title in CASES.items():
        for engine in OURS:
            ours = m.get((case, engine))
            if ours is None:
                continue
            peer = PEER_CASE.get(case)
            adbc = wall(peer, "adbc") if peer else None
            dlt = wall(peer, "dlt") if peer else None
            vs_floor = _ratio(ours["wall"], floor) if case in NOTHING_NEW else "-"
            same = IN_PROCESS.get(case)
            inside = in_process.get((same, engine)) if same else None
            in_proc = f"{inside['wall']:.2f} s ({same})" if inside else "-"
            shown = title if engine == "ours" else f"{title}, *Iceberg lake*"
            lines.append(
                f"| {shown} | {ours['runs']} | {int(ours['rows']):,} | {ours['wall']:.2f} | "
                f"{ours['engine_seconds']:.2f} | "
                f"{ours['spark']} | {vs_floor} | "
                f"{_seconds(adbc)} | {_ratio(ours['wall'], adbc)} | {_seconds(dlt)} | "
                f"{_ratio(ours['wall'], dlt)} | {in_proc} |"
            )
    lines += _iceberg_against_parquet(m)
    lines += ["", *_one_offs(end_to_end), *_targets(meta, m), ""]
    return lines


def _iceberg_against_parquet(m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """One sentence: what the Iceberg lake's runs cost over the plain ones, case by case."""
    pairs = []
    for case in CASES:
        parquet, iceberg = m.get((case, "ours")), m.get((case, "ours_iceberg"))
        if parquet and iceberg and parquet["wall"]:
            extra = iceberg["wall"] - parquet["wall"]
            pairs.append(
                f"{case} {iceberg['wall']:.2f} s against {parquet['wall']:.2f} s "
                f"({iceberg['wall'] / parquet['wall']:.2f}x, {extra:+.2f} s)"
            )
    if not pairs:
        return []
    return [
        "",
        "Iceberg lake against plain Parquet, same runs (medians): " + "; ".join(pairs) + ".",
    ]


def _one_offs(end_to_end: list[dict[str, Any]]) -> list[str]:
    kept = [r for r in end_to_end if r.get("one_off")]
    if not kept:
        return []
    lines = [
        "Once, outside the medians:",
        "",
        "| what | rows | wall s | Spark |",
        "|---|---:|---:|---|",
    ]
    for r in kept:
        what = ONE_OFFS.get((r["scenario"], r["engine"]), f"{r['scenario']} ({r['engine']})")
        rows = "-" if r.get("rows") is None else f"{int(r['rows']):,}"
        spark = str(r.get("spark") or "-").split(" at sc://")[0] if r["engine"] in OURS else "-"
        lines.append(f"| {what} | {rows} | {r['wall']:.2f} | {spark} |")
    return [*lines, ""]


def _targets(meta: dict[str, Any], m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """E1 at most 1.5x the no-op asset; E4 at most 3.0 s at 1M rows (judged at that size only);
    on each lake format."""
    lines = ["### End-to-end targets", "", "| target | measured | met |", "|---|---|---|"]
    floor = m.get(("floor", "noop"))
    rows = int(meta["rows"])
    for engine in OURS:
        lake = "" if engine == "ours" else f", *{FORMATS[engine]} lake*"
        cold, warm = m.get(("E1", engine)), m.get(("E4", engine))
        if floor and cold:
            ratio = cold["wall"] / floor["wall"]
            lines.append(
                f"| E1: nothing new, cold ≤ {E1_BOUND}x the no-op asset{lake} | "
                f"{cold['wall']:.2f} s vs {floor['wall']:.2f} s ({ratio:.2f}x) | "
                f"{at_most(cold['wall'], E1_BOUND * floor['wall'])} |"
            )
        if warm:
            met = at_most(warm["wall"], E4_SECONDS)
            if rows != E4_ROWS:
                met = f"not judged ({rows:,} rows here; {met} at this size)"
            lines.append(
                f"| E4: 0.1% delta of {E4_ROWS:,} rows with the engine up ≤ {E4_SECONDS} s wall"
                f"{lake} | {warm['wall']:.2f} s (a 0.1% delta of {rows:,} rows) | {met} |"
            )
    return [*lines, ""]
