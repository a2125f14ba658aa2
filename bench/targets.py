"""The in-process targets, judged on each local lake format (`ours` on plain Parquet, `ours_iceberg`
on Iceberg) against the peers' and its own figures of the same run, each met or missed and by how
much; then what Iceberg may cost over plain Parquet in the same run.

The merge targets of the merge-on-read issue:

    S4 uniform merge       at most 0.5x S1 at 1M rows, 0.3x at 10M (the 1M bound below 10M)
    moonshot               S4 uniform at most 2x S4 clustered
    S4 clustered           at most 0.3x S1, and at most 2 rows written per changed row
    S1                     within 10% of the previous run of the same size (bench/previous.py)

`ours_iceberg_s3` is judged nowhere: moto is not S3 (its section says what it shows).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.medians import Medians

JUDGED = ("ours", "ours_iceberg")
FORMATS = {
    "ours": "plain Parquet",
    "ours_iceberg": "Iceberg",
    "ours_iceberg_s3": "Iceberg on moto's S3",
}
# The bounds on what the Iceberg format may cost over plain Parquet, same run.
ICEBERG_RATIO = 1.10  # S1, S4 clustered, S4 uniform: wall time at most 10% more
ICEBERG_S2_SECONDS = 0.3  # S2: at most this much more wall time
LARGE = 10_000_000  # the size at which S4 uniform's tighter bound applies
S1_PREVIOUS = 1.10

# A target's figure as shown and whether it is met with by how much ("yes (0.2 s to spare)"),
# or the figure alone where there is no target; None when not measured.
Judged = tuple[str, str] | None
Get = Callable[[str, str, str], float | None]


def uniform_bound(rows: int) -> float:
    """S4 uniform's bound as a share of S1: 0.3 at 10M rows and more, else 0.5 (1M's)."""
    return 0.3 if rows >= LARGE else 0.5


def at_most(value: float, limit: float, unit: str = " s") -> str:
    """ "yes (... to spare)" or "no (over by ...)", for a figure that should stay under `limit`."""
    gap = abs(limit - value)
    return f"yes ({gap:.2f}{unit} to spare)" if value <= limit else f"no (over by {gap:.2f}{unit})"


def at_least(value: float, limit: float, unit: str) -> str:
    gap = abs(value - limit)
    return f"yes ({gap:,.0f}{unit} over)" if value >= limit else f"no (short by {gap:,.0f}{unit})"


def getter(m: Medians) -> Get:
    def get(scenario: str, engine: str, key: str = "wall") -> float | None:
        entry = m.get((scenario, engine))
        value = entry.get(key) if entry else None
        return float(value) if value is not None else None

    return get


def in_process_targets(
    m: Medians, rows: int, previous: Medians | None = None, previous_name: str = ""
) -> list[str]:
    """The section's lines: one row per target, a pair of columns per local lake format."""
    get = getter(m)
    ours = [e for e in JUDGED if (("S1", e) in m)]
    if not ours:
        return []
    targets = _targets(get, rows, getter(previous) if previous else None, previous_name)
    head = " | ".join(f"{FORMATS[e]} (`{e}`) | met" for e in ours)
    lines = [
        "## In-process targets",
        "",
        "Each target judged on both local lake formats, against the figures of the same run "
        "(the object-store engine is not judged: moto is not S3).",
        "",
        f"| target | {head} |",
        "|---|" + "---|---|" * len(ours),
    ]
    for title, judge in targets:
        cells = [judge(e) for e in ours]
        if all(c is None for c in cells):
            continue
        shown = " | ".join("- | -" if c is None else f"{c[0]} | {c[1]}" for c in cells)
        lines.append(f"| {title} | {shown} |")
    lines.append("")
    if set(JUDGED) <= set(ours):
        lines += iceberg_against_parquet(get)
    return lines


def _targets(
    get: Get, rows: int, before: Get | None, previous_name: str
) -> list[tuple[str, Callable[[str], Judged]]]:
    dlt_s1, adbc_s1, dlt_s2 = (
        get("S1", "dlt", "rows_per_s"),
        get("S1", "adbc", "wall"),
        get("S2", "dlt", "wall"),
    )

    def s1_rate(e: str) -> Judged:
        rate = get("S1", e, "rows_per_s")
        if not rate or not dlt_s1:
            return None
        shown = f"{rate:,.0f} vs {dlt_s1:,.0f} rows/s ({rate / dlt_s1:.2f}x)"
        return shown, at_least(rate, dlt_s1, " rows/s")

    def s1_adbc(e: str) -> Judged:
        wall = get("S1", e, "wall")
        if not wall or not adbc_s1:
            return None
        return f"{wall / adbc_s1:.2f}x ADBC's wall time", at_most(wall, 2 * adbc_s1)

    def s1_previous(e: str) -> Judged:
        now, then = get("S1", e, "wall"), before("S1", e, "wall") if before else None
        if not now or not then:
            return None
        return f"{now:.2f} s vs {then:.2f} s ({now / then:.2f}x)", at_most(now, S1_PREVIOUS * then)

    def s2_dlt(e: str) -> Judged:
        s2 = get("S2", e, "wall")
        if not s2 or not dlt_s2:
            return None
        return f"{s2:.2f} s vs {dlt_s2:.2f} s ({s2 / dlt_s2:.2f}x)", at_most(s2, 2 * dlt_s2)

    def s2_s0(e: str) -> Judged:
        s0, s2 = get("S0", e, "wall"), get("S2", e, "wall")
        if not s0 or not s2:
            return None
        return f"{s2:.2f} s vs {s0:.2f} s ({s2 / s0:.2f}x)", at_most(s2, 1.5 * s0)

    def s0_engine(e: str) -> Judged:
        seconds = get("S0", e, "engine_seconds")
        return None if seconds is None else (f"{seconds:.2f} s", at_most(seconds, 3.0))

    def ratio(scenario: str, of: str, bound: float) -> Callable[[str], Judged]:
        def judged(e: str) -> Judged:
            base, value = get(of, e, "wall"), get(scenario, e, "wall")
            if not base or not value:
                return None
            shown = f"{value:.2f} s vs {base:.2f} s ({value / base:.2f}x)"
            return shown, at_most(value, bound * base)

        return judged

    def written(scenario: str, bound: float | None) -> Callable[[str], Judged]:
        def judged(e: str) -> Judged:
            value = get(scenario, e, "rewritten_per_changed")
            if value is None:
                return None
            return f"{value:.1f}", "-" if bound is None else at_most(value, bound, " rows")

        return judged

    uniform = uniform_bound(rows)
    where = "at 10M rows and more" if rows >= LARGE else "the bound at 1M rows; 0.3x at 10M"
    targets: list[tuple[str, Callable[[str], Judged]]] = [
        ("S1 throughput at least dlt's", s1_rate),
        ("S1 within 2x of ADBC -> Parquet", s1_adbc),
    ]
    if before is not None:
        targets.append(
            (f"S1 within 10% of the previous run ({previous_name}, same engine)", s1_previous)
        )
    return [
        *targets,
        ("S2 ≤ 2x dlt's wall time", s2_dlt),
        ("S2 within 1.5x of S0", s2_s0),
        ("S0 at most 3 s of engine time, session reused", s0_engine),
        (
            f"S4 uniform merge ≤ {uniform}x S1 full load ({where})",
            ratio("S4 uniform", "S1", uniform),
        ),
        ("moonshot: S4 uniform merge ≤ 2x S4 clustered", ratio("S4 uniform", "S4 clustered", 2.0)),
        ("S4 clustered merge ≤ 0.3x S1 full load", ratio("S4 clustered", "S1", 0.3)),
        ("S4 clustered: at most 2 rows written per changed row", written("S4 clustered", 2.0)),
        ("S4 uniform: rows written per changed row (no target)", written("S4 uniform", None)),
    ]


def iceberg_against_parquet(get: Get) -> list[str]:
    """Iceberg's cost over plain Parquet: at most 10% more wall time on S1 and S4, at most 0.3 s
    more on S2; both formats' medians are of the same run, interleaved run by run."""
    lines = [
        "### Iceberg against plain Parquet (same run)",
        "",
        "| target | plain Parquet s | Iceberg s | Iceberg costs | met |",
        "|---|---:|---:|---:|---|",
    ]
    for scenario in ("S1", "S2", "S4 clustered", "S4 uniform"):
        parquet, iceberg = get(scenario, "ours", "wall"), get(scenario, "ours_iceberg", "wall")
        if not parquet or iceberg is None:
            continue
        extra = iceberg - parquet
        if scenario == "S2":
            title = f"S2: at most {ICEBERG_S2_SECONDS} s more wall time"
            met = at_most(extra, ICEBERG_S2_SECONDS)
        else:
            title = f"{scenario}: at most {ICEBERG_RATIO - 1:.0%} more wall time"
            met = at_most(iceberg, ICEBERG_RATIO * parquet)
        lines.append(
            f"| {title} | {parquet:.2f} | {iceberg:.2f} | "
            f"{extra:+.2f} s ({iceberg / parquet:.2f}x) | {met} |"
        )
    return [*lines, ""]
