"""The earlier run a report compares with: the last published run of the same size, whose Iceberg
figures are the previous Iceberg layer's (Spark wrote plain Parquet files, the package committed
them through PyIceberg, merges rewrote buckets copy-on-write).

    S1 within 10% of the previous run     judged per engine, `ours` against `ours`, `ours_iceberg`
                                          against the previous layer's `ours_iceberg`
    the previous Iceberg layer            every scenario (and E1, E4) of `ours_iceberg`, then and
                                          now, beside `ours` then and now: what moved with the
                                          machine and what moved with the layer
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.end_to_end_report import e2e_medians
from bench.medians import ORDER, Medians, medians_of

RESULTS = Path(__file__).with_name("results")
# The last published run of each size, on the previous Iceberg layer (BENCHMARKS.md of
# 2026-11-25): 1M with the end-to-end phase, 10M in process only.
PREVIOUS = {1_000_000: "20261125T114040.json", 10_000_000: "20261125T114954.json"}
S1_BOUND = 1.10  # S1 at most 10% more wall time than in the previous run


def load_previous(path: Path | None, rows: int) -> dict[str, Any] | None:
    """The results of `path`, or of the published run of `rows` rows (None: there is none)."""
    if path is None:
        name = PREVIOUS.get(rows)
        if name is None:
            return None
        path = RESULTS / name
    loaded: dict[str, Any] = json.loads(path.read_text())
    loaded["meta"]["file"] = f"bench/results/{path.name}" if path.parent == RESULTS else str(path)
    return loaded


def describe(previous: dict[str, Any]) -> str:
    """The run, as the report names it."""
    meta = previous["meta"]
    return f"`{meta['command']}`, {meta['started'][:10]} (`{meta['file']}`)"


def previous_layer_section(
    now: Medians,
    previous: dict[str, Any],
    end_to_end: list[dict[str, Any]] | None = None,
) -> list[str]:
    """This run's Iceberg figures beside the previous layer's, scenario by scenario, with plain
    Parquet then and now for scale; then the end-to-end cases both runs have."""
    then = medians_of(previous["results"])
    if not any(k[1] == "ours_iceberg" for k in then):
        return []
    lines = [
        "## Iceberg: this layer against the previous one",
        "",
        f"The previous Iceberg layer is {describe(previous)}: Spark wrote plain Parquet files and "
        "the package committed them through PyIceberg; a merge rewrote the buckets it touched "
        "(copy-on-write). Now Spark writes the table through Iceberg's runtime, a run's snapshot "
        "on a branch that `main` is fast-forwarded to, merges are merge-on-read (`MERGE INTO`, "
        "delete files), and maintenance runs after a commit when it is due (its time is in the "
        "run's). Plain Parquet (`ours`), then and now, shows what moved with the machine and the "
        "rest of the package rather than with the Iceberg layer. Median wall seconds:",
        "",
        "| scenario | Iceberg, previous layer | Iceberg, now | now vs then | plain Parquet, then "
        "| plain Parquet, now | now vs then |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in ORDER:
        cells = []
        for engine in ("ours_iceberg", "ours"):
            a, b = then.get((scenario, engine)), now.get((scenario, engine))
            cells += [
                _seconds(a),
                _seconds(b),
                f"{b['wall'] / a['wall']:.2f}x" if a and b and a["wall"] else "-",
            ]
        if any(c != "-" for c in cells):
            lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    lines += ["", *_merge_lines(then, now), *_end_to_end_lines(previous, end_to_end), ""]
    return lines


def _seconds(entry: dict[str, Any] | None) -> str:
    return "-" if entry is None else f"{entry['wall']:.2f}"


def _merge_lines(then: Medians, now: Medians) -> list[str]:
    """How each layer merged: its path and the rows it wrote per changed row."""
    lines = []
    for scenario in ("S4 clustered", "S4 uniform"):
        a, b = then.get((scenario, "ours_iceberg")), now.get((scenario, "ours_iceberg"))
        if not a or not b:
            continue
        lines.append(
            f"{scenario} on Iceberg: {a.get('merge_strategy', '?')}, "
            f"{a.get('rewritten_per_changed', 0):.1f} rows written per changed row, then; "
            f"{b.get('merge_strategy', '?')}, {b.get('rewritten_per_changed', 0):.1f} now."
        )
    return [" ".join(lines), ""] if lines else []


def _end_to_end_lines(
    previous: dict[str, Any], end_to_end: list[dict[str, Any]] | None
) -> list[str]:
    """E1 and E4 on the Iceberg lake, then and now (fresh `dagster asset materialize` processes)."""
    if not end_to_end or not previous.get("end_to_end"):
        return []
    then, now = e2e_medians(previous["end_to_end"]), e2e_medians(end_to_end)
    shown = []
    for case in ("E1", "E4"):
        a, b = then.get((case, "ours_iceberg")), now.get((case, "ours_iceberg"))
        if a and b:
            shown.append(
                f"{case} {a['wall']:.2f} s then, {b['wall']:.2f} s now "
                f"({b['wall'] / a['wall']:.2f}x)"
            )
    if not shown:
        return []
    return ["End to end on the Iceberg lake (medians): " + "; ".join(shown) + "."]
