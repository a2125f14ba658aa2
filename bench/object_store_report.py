"""The object-store section: the Iceberg lake on moto's S3 server beside the same lake on the local
disk, S1 and S4 (functional figures: moto is not S3), and how each step's time grows with the
objects the table holds over the A50 merges.

The growth of a step is read as an exponent: with `o` the objects under the table's location and
`t` the step's median seconds, over the first and the last window of merges,
`ln(t_last / t_first) / ln(o_last / o_first)`: about 0 for a step that stays flat as objects pile
up, 1 for a step linear in them, 2 for a quadratic one. A step is called quadratic-looking above
1.5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import median
from typing import Any

from bench.medians import Medians
from bench.object_store import ENGINE
from bench.targets import FORMATS

LOCAL = "ours_iceberg"
SCENARIOS = ("S1 first", "S1", "S4 clustered", "S4 uniform")
Measure = Callable[[dict[str, Any]], float | None]


def _key(key: str) -> Measure:
    def measure(run: dict[str, Any]) -> float | None:
        value = run.get(key)
        return None if value is None else float(value)

    return measure


def requests(kind: str | None = None) -> Measure:
    """The S3 requests a run made (of one kind, or all)."""

    def measure(run: dict[str, Any]) -> float | None:
        counts = run.get("s3_requests")
        if counts is None:
            return None
        return float(sum(counts.values()) if kind is None else counts.get(kind, 0))

    return measure


# Each step: its name, what it measures, and its unit.
STEPS: tuple[tuple[str, Measure, str], ...] = (
    ("the run (wall)", _key("wall"), "s"),
    ("extract (read, stage)", _key("extract_seconds"), "s"),
    ("commit (write, publish)", _key("commit_seconds"), "s"),
    ("maintenance, where it ran", _key("maintenance_seconds"), "s"),
    ("S3 requests, all", requests(), "requests"),
    ("S3 LIST requests", requests("LIST"), "requests"),
)
QUADRATIC = 1.5
WINDOW = 10


def object_store_section(results: list[dict[str, Any]], medians: Medians) -> list[str]:
    if not any(k[1] == ENGINE for k in medians):
        return []
    rows = _scenario_rows(results, medians)
    intro = (
        "`ours_iceberg_s3` is `ours_iceberg` with `lake.path` in a bucket of moto's S3 server "
        "(incremental_assets_tests/support/s3.py, on 127.0.0.1, in the harness's process: its "
        "CPU and memory are not counted here) and the catalog a SQLite file on the local disk, "
        "with the `s3.*` properties Iceberg's S3FileIO and PyIceberg take. It runs S1 and the "
        "S4 merges (and A50), interleaved with the other engines on the same source changes. moto "
        "answers from memory on the same machine: these figures show that the lake works on an "
        "object store, and how its steps grow with the objects a table holds, not what S3 "
        "would cost. (A local table's folder also holds Hadoop's `.crc` checksum beside each "
        "file, so it counts about twice the objects of the same table in the bucket.)"
    )
    lines = ["## Object store: the Iceberg lake on moto's S3 server", "", intro, ""]
    if rows:  # none when no scenario ran on both lakes (`--only-a50`)
        lines[-2] += " Medians, seconds:"
        lines += [
            "| scenario | local wall | S3 wall | S3 vs local | local commit | S3 commit "
            "| files written (local / S3) | maintenance runs (local / S3) | S3 requests per run "
            "(of them LIST) | objects after (local / S3) |",
            "|---|---:|---:|---:|---:|---:|---|---|---|---|",
            *rows,
            "",
        ]
    return [*lines, *_growth(results)]


def _scenario_rows(results: list[dict[str, Any]], medians: Medians) -> list[str]:
    rows = []
    for scenario in SCENARIOS:
        local, s3 = medians.get((scenario, LOCAL)), medians.get((scenario, ENGINE))
        if not local or not s3:
            continue
        runs = [r for r in results if r["scenario"] == scenario and r["engine"] == ENGINE]
        rows.append(
            f"| {scenario} | {local['wall']:.2f} | {s3['wall']:.2f} | "
            f"{s3['wall'] / local['wall']:.2f}x | {_s(local.get('commit_seconds'))} | "
            f"{_s(s3.get('commit_seconds'))} | {int(local['files'])} / {int(s3['files'])} | "
            f"{local.get('maintenance_runs', 0)} / {s3.get('maintenance_runs', 0)} | "
            f"{_count(runs, requests())} ({_count(runs, requests('LIST'))}) | "
            f"{_objects_after(results, scenario, LOCAL)} / "
            f"{_objects_after(results, scenario, ENGINE)} |"
        )
    return rows


def _count(runs: list[dict[str, Any]], measure: Measure) -> str:
    values = [v for v in map(measure, runs) if v is not None]
    return f"{median(values):,.0f}" if values else "-"


def _objects_after(results: list[dict[str, Any]], scenario: str, engine: str) -> str:
    """The objects under the table's location after the scenario's last run."""
    runs = [r for r in results if r["scenario"] == scenario and r["engine"] == engine]
    objects = (runs[-1].get("table") or {}).get("objects") if runs else None
    return "-" if objects is None else f"{objects:,}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _growth(results: list[dict[str, Any]]) -> list[str]:
    """Each step's growth with the objects over the A50 merges, per engine."""
    rows = []
    for engine in (LOCAL, ENGINE):
        runs = sorted(
            (r for r in results if r["scenario"] == "A50" and r["engine"] == engine),
            key=lambda r: int(r["merge"]),
        )
        if len(runs) < 2 * WINDOW:
            continue
        first, last = runs[:WINDOW], runs[-WINDOW:]
        o1, o2 = _objects(first), _objects(last)
        for step, measure, unit in STEPS:
            t1, t2 = _median(first, measure), _median(last, measure)
            if t1 is not None or t2 is not None:
                rows.append(_growth_row(FORMATS[engine], step, unit, o1, o2, t1, t2))
    if not rows:
        return [
            f"(How the steps grow with the objects needs at least {2 * WINDOW} A50 merges.)",
            "",
        ]
    return [
        f"How each step grows with the objects under the table's location over the A50 merges: "
        f"the median of the first {WINDOW} merges against the last {WINDOW}, and the exponent "
        "`ln(t_last / t_first) / ln(o_last / o_first)` (0 flat, 1 linear, 2 quadratic in the "
        f"objects; quadratic-looking above {QUADRATIC}); for S3, the requests moto answered "
        "during each run (the worker's state read after the clock excluded):",
        "",
        "| lake | step | objects, first -> last | first -> last | exponent | quadratic-looking |",
        "|---|---|---|---|---:|---|",
        *rows,
        "",
    ]


def _growth_row(
    lake: str,
    step: str,
    unit: str,
    o1: float,
    o2: float,
    t1: float | None,
    t2: float | None,
) -> str:
    shown = f"{_n(t1, unit)} -> {_n(t2, unit)} {unit}"
    if t1 is None or t2 is None or t1 <= 0 or t2 <= 0 or o2 <= o1:
        return f"| {lake} | {step} | {o1:,.0f} -> {o2:,.0f} | {shown} | - | - |"
    exponent = math.log(t2 / t1) / math.log(o2 / o1)
    verdict = "yes" if exponent > QUADRATIC else "no"
    return f"| {lake} | {step} | {o1:,.0f} -> {o2:,.0f} | {shown} | {exponent:.2f} | {verdict} |"


def _n(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if unit == "s" else f"{value:,.0f}"


def _objects(runs: list[dict[str, Any]]) -> float:
    return median(float((r.get("table") or {}).get("objects", 0)) for r in runs)


def _median(runs: list[dict[str, Any]], measure: Measure) -> float | None:
    values = [v for v in map(measure, runs) if v is not None]
    return median(values) if values else None
