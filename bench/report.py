"""Write BENCHMARKS.md from one run's results: medians, ratios against every peer, the targets.

The end-to-end section (bench/end_to_end_report.py) comes first, then the in-process figures.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from bench.end_to_end_report import end_to_end_section
from bench.engines import OURS

SCHEMA_MYSQL = "bench.orders"
ORDER = ["S1 first", "S1", "S0", "S2", "S3", "S4 clustered", "S4 uniform"]
TITLES = {
    "S1 first": "S1 first: the first full load in a fresh process (cold JIT and caches; one run, not in the S1 medians)",
    "S1": "S1: full load",
    "S0": "S0: incremental run, no changes (fixed cost)",
    "S2": "S2: incremental run, 0.1% of rows changed",
    "S3": "S3: incremental run, 10% of rows changed",
    "S4 clustered": "S4: merge of 1% updates, clustered on the most recent ids (the peers, with no merge into plain Parquet, extract the same delta and append it)",
    "S4 uniform": "S4: merge of 1% updates, spread uniformly (the peers extract the same delta and append it)",
}
ENGINES = ("ours", "ours_iceberg", "copy", "adbc", "dlt")
FORMATS = {"ours": "plain Parquet", "ours_iceberg": "Iceberg"}
# The bounds on what the Iceberg format may cost over plain Parquet, same run.
ICEBERG_RATIO = 1.10  # S1, S4 clustered, S4 uniform: wall time at most 10% more
ICEBERG_S2_SECONDS = 0.3  # S2: at most this much more wall time


def _medians(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        grouped[(result["scenario"], result["engine"])].append(result)
    table = {}
    for key, runs in grouped.items():
        rows = median(r["rows"] or 0 for r in runs)
        wall = median(r["wall"] for r in runs)
        cpu = median(r["cpu_client"] + r["cpu_server"] for r in runs)
        entry = {
            "runs": len(runs),
            "rows": rows,
            "wall": wall,
            "rows_per_s": rows / wall if wall else 0.0,
            "cpu": cpu,
            "cpu_per_m": cpu / (rows / 1e6) if rows else 0.0,
            "cpu_server_share": median(
                r["cpu_server"] / max(r["cpu_client"] + r["cpu_server"], 1e-9) for r in runs
            ),
            "peak_mb": median(r["peak_rss"] for r in runs) / 2**20,
            "files": median(r["files"] for r in runs),
        }
        strategies = sorted({str(r["merge_strategy"]) for r in runs if r.get("merge_strategy")})
        if strategies:
            entry["merge_strategy"] = "; ".join(strategies)
        if runs[0].get("engine_seconds") is not None:
            entry["engine_seconds"] = median(r["engine_seconds"] for r in runs)
        for work in ("spark_jobs", "spark_stages"):  # ours only; None where not counted
            counted = [r[work] for r in runs if r.get(work) is not None]
            if counted:
                entry[work] = median(counted)
        if runs[0].get("rows_rewritten") is not None and runs[0].get("rows_changed"):
            entry["rewritten_per_changed"] = median(
                r["rows_rewritten"] / max(r["rows_changed"], 1) for r in runs
            )
        table[key] = entry
    return table


def _scenario_table(
    scenario: str,
    medians: dict[tuple[str, str], dict[str, float]],
    engines: list[str],
    server: str = "PostgreSQL",
    title: str | None = None,
) -> list[str]:
    ours = medians.get((scenario, "ours"))
    lines = [
        f"### {title or TITLES[scenario]}",
        "",
        f"| engine | rows | median wall s | rows/s | CPU s per M rows (engine + {server}) | peak MB | files | "
        "Spark jobs / stages | wall vs ours |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for engine in engines:
        m = medians.get((scenario, engine))
        if m is None:
            continue
        ratio = f"{m['wall'] / ours['wall']:.2f}x" if ours and ours["wall"] else "-"
        cpu = f"{m['cpu_per_m']:.2f}" if m["rows"] >= 1e4 else f"{m['cpu']:.2f} (per run)"
        lines.append(
            f"| {engine} | {int(m['rows']):,} | {m['wall']:.2f} | {m['rows_per_s']:,.0f} | {cpu} | "
            f"{m['peak_mb']:,.0f} | {int(m['files'])} | {_spark_work(m)} | {ratio} |"
        )
    ourselves = [
        (e, medians[(scenario, e)]) for e in engines if e in OURS and (scenario, e) in medians
    ]
    both = len(ourselves) > 1

    def each(key: str, shown: Callable[[Any], str], between: str = ", ") -> str:
        found = [(e, m[key]) for e, m in ourselves if m.get(key) is not None]
        return between.join(f"{shown(v)}" + (f" ({FORMATS[e]})" if both else "") for e, v in found)

    if engine_time := each("engine_seconds", lambda v: f"{v:.2f} s"):
        lines += [
            "",
            f"Ours, engine time (extract + write, without Dagster's run overhead): median {engine_time}.",
        ]
    if rewritten := each("rewritten_per_changed", lambda v: f"{v:.1f}"):
        lines += ["", f"Rows rewritten per changed row: median {rewritten}."]
    if strategy := each("merge_strategy", str, "; "):
        lines += ["", f"Merge path, as the runs record it (`merge_strategy`): {strategy}."]
    return [*lines, ""]


def _spark_work(m: dict[str, float]) -> str:
    """Median Spark jobs / stages a run of ours started (its checks included); `-` for peers."""
    if "spark_jobs" not in m:
        return "-"
    return f"{m['spark_jobs']:g} / {m.get('spark_stages', 0):g}"


# A target's figure as shown, and whether it is met (None: no target); None when not measured.
Judged = tuple[str, bool | None] | None


def _targets(m: dict[tuple[str, str], dict[str, float]]) -> list[str]:
    """The targets, judged on each lake format against the peers' and its own figures of the same
    run; then what Iceberg may cost over plain Parquet, also of the same run."""

    def get(scenario: str, engine: str, key: str = "wall") -> float | None:
        entry = m.get((scenario, engine))
        return entry[key] if entry and key in entry else None

    ours = [e for e in OURS if any(k[1] == e for k in m)]
    dlt_s1, adbc_s1, dlt_s2 = get("S1", "dlt", "rows_per_s"), get("S1", "adbc"), get("S2", "dlt")

    def s1_rate(e: str) -> Judged:
        rate = get("S1", e, "rows_per_s")
        if not rate or not dlt_s1:
            return None
        return f"{rate:,.0f} vs {dlt_s1:,.0f} rows/s ({rate / dlt_s1:.2f}x)", rate >= dlt_s1

    def s1_adbc(e: str) -> Judged:
        wall = get("S1", e)
        if not wall or not adbc_s1:
            return None
        return f"{wall / adbc_s1:.2f}x ADBC's wall time", wall <= 2 * adbc_s1

    def s2_dlt(e: str) -> Judged:
        s2 = get("S2", e)
        if not s2 or not dlt_s2:
            return None
        return f"{s2:.2f} s vs {dlt_s2:.2f} s ({s2 / dlt_s2:.2f}x)", s2 <= 2 * dlt_s2

    def s2_s0(e: str) -> Judged:
        s0, s2 = get("S0", e), get("S2", e)
        if not s0 or not s2:
            return None
        return f"{s2:.2f} s vs {s0:.2f} s ({s2 / s0:.2f}x)", s2 <= 1.5 * s0

    def s0_engine(e: str) -> Judged:
        seconds = get("S0", e, "engine_seconds")
        return None if seconds is None else (f"{seconds:.2f} s", seconds <= 3)

    def merge_vs_s1(scenario: str, bound: float) -> Callable[[str], Judged]:
        def judged(e: str) -> Judged:
            s1, s4 = get("S1", e), get(scenario, e)
            if not s1 or not s4:
                return None
            return f"{s4:.2f} s vs {s1:.2f} s ({s4 / s1:.2f}x)", s4 <= bound * s1

        return judged

    def rewritten(scenario: str, bound: float | None) -> Callable[[str], Judged]:
        def judged(e: str) -> Judged:
            value = get(scenario, e, "rewritten_per_changed")
            if value is None:
                return None
            return f"{value:.1f}", None if bound is None else value <= bound

        return judged

    targets: list[tuple[str, Callable[[str], Judged]]] = [
        ("S1 throughput at least dlt's", s1_rate),
        ("S1 within 2x of ADBC -> Parquet", s1_adbc),
        ("S2 ≤ 2x dlt's wall time", s2_dlt),
        ("S2 within 1.5x of S0", s2_s0),
        ("S0 at most 3 s of engine time, session reused", s0_engine),
        ("S4 uniform merge ≤ 0.8x S1 full load", merge_vs_s1("S4 uniform", 0.8)),
        ("S4 clustered merge ≤ 0.5x S1 full load", merge_vs_s1("S4 clustered", 0.5)),
        (
            "S4 clustered: at most 5.3 rows rewritten per changed row",
            rewritten("S4 clustered", 5.3),
        ),
        (
            "S4 uniform: rows rewritten per changed row (no target; the path is in the notes)",
            rewritten("S4 uniform", None),
        ),
    ]
    head = " | ".join(f"{FORMATS[e]} (`{e}`) | met" for e in ours)
    lines = [
        "## In-process targets",
        "",
        "Each target judged on both lake formats, against the figures of the same run.",
        "",
        f"| target | {head} |",
        "|---|" + "---|---|" * len(ours),
    ]
    for title, judge in targets:
        cells = [judge(e) for e in ours]
        if all(c is None for c in cells):
            continue
        shown = " | ".join("- | -" if c is None else f"{c[0]} | {_met(c[1])}" for c in cells)
        lines.append(f"| {title} | {shown} |")
    lines.append("")
    if set(OURS) <= set(ours):
        lines += _iceberg_targets(get)
    return lines


def _met(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _iceberg_targets(get: Callable[[str, str], float | None]) -> list[str]:
    """Iceberg's cost over plain Parquet: at most 10% more wall time on S1 and S4, at most 0.3 s
    more on S2; both formats' medians are of the same run, interleaved run by run."""
    lines = [
        "### Iceberg against plain Parquet (same run)",
        "",
        "| target | plain Parquet s | Iceberg s | Iceberg costs | met |",
        "|---|---:|---:|---:|---|",
    ]
    for scenario in ("S1", "S2", "S4 clustered", "S4 uniform"):
        parquet, iceberg = get(scenario, "ours"), get(scenario, "ours_iceberg")
        if not parquet or iceberg is None:
            continue
        extra = iceberg - parquet
        if scenario == "S2":
            title = f"S2: at most {ICEBERG_S2_SECONDS} s more wall time"
            met = extra <= ICEBERG_S2_SECONDS
        else:
            title = f"{scenario}: at most {ICEBERG_RATIO - 1:.0%} more wall time"
            met = iceberg <= ICEBERG_RATIO * parquet
        lines.append(
            f"| {title} | {parquet:.2f} | {iceberg:.2f} | {extra:+.2f} s ({iceberg / parquet:.2f}x) "
            f"| {_met(met)} |"
        )
    return [*lines, ""]


def _mysql_section(meta: dict[str, Any], mysql: list[dict[str, Any]]) -> list[str]:
    """S1 and S0 on MariaDB: ours beside ConnectorX and dlt, from the same run."""
    facts = meta.get("mysql") or {}
    medians = _medians(mysql)
    engines = [e for e in ("ours", "connectorx", "dlt") if any(k[1] == e for k in medians)]
    rows = facts.get("rows", 0)
    lines = [
        "## MySQL: S1 and S0 on MariaDB",
        "",
        f"`{SCHEMA_MYSQL}` with {rows:,} rows, the same columns and values as PostgreSQL's "
        "(DATETIME(6) for the two times, `updated_at` indexed), on "
        f"{facts.get('server', 'MariaDB')} started by the harness on this machine "
        "(incremental_assets_tests/support/mariadb.py, 2 GB buffer pool). "
        f"{rows:,} rows, not {meta['rows']:,}: loading MariaDB and dlt's PyMySQL read are slow "
        "enough here that the larger size would not fit the run's time. "
        "Ours reads over JDBC (MariaDB Connector/J in `spark.jars`, a `jdbc:mysql://` URL); "
        "ConnectorX reads into Arrow (two partitions on the id for the full load) and writes one "
        "zstd Parquet file; dlt is `sql_table` over PyMySQL (pyarrow backend, Parquet). "
        f"Medians of {meta['repeats']} runs; the same method as the in-process tables below, with "
        "the MariaDB server's CPU in place of PostgreSQL's.",
        "",
    ]
    if facts.get("note"):
        lines += [facts["note"], ""]
    if facts.get("connectorx"):
        lines += [f"ConnectorX did not run: {facts['connectorx']}.", ""]
    for scenario in ("S1 first", "S1", "S0"):
        if (scenario, "ours") in medians:
            lines += _scenario_table(
                scenario, medians, engines, "MariaDB", f"MySQL {TITLES[scenario]}"
            )
    return lines


def _summary(medians: dict[tuple[str, str], dict[str, float]], engines: list[str]) -> list[str]:
    """Each scenario's median wall time per engine, and its ratio to ours."""
    summary = ["| scenario | " + " | ".join(engines) + " |", "|---|" + "---:|" * len(engines)]
    for scenario in ORDER:
        if (scenario, "ours") not in medians:
            continue
        ours = medians[(scenario, "ours")]["wall"]
        cells = []
        for engine in engines:
            m = medians.get((scenario, engine))
            cells.append("-" if m is None else f"{m['wall']:.2f} s ({m['wall'] / ours:.2f}x)")
        summary.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return summary


def _other_size_section(loaded: dict[str, Any]) -> list[str]:
    """Another run of the harness (at another size): its in-process summary and targets."""
    meta = loaded["meta"]
    medians = _medians(loaded["results"])
    engines = [e for e in ENGINES if any(k[1] == e for k in medians)]
    title = f"## In process at {meta['rows']:,} rows ({meta['started'][:10]})"
    return [
        title,
        "",
        f"`{meta['command']}` (run on {meta['started'][:19]}Z; load average "
        + ", ".join(f"{k} {v}" for k, v in meta.get("load", {}).items())
        + f"). Medians of {meta['repeats']} runs; the same method as above. Wall time and its "
        "ratio to ours:",
        "",
        *_summary(medians, engines),
        "",
        *[
            line.replace("## In-process targets", f"### Targets at {meta['rows']:,} rows")
            for line in _targets(medians)
        ],
    ]


def write_report(
    meta: dict[str, Any],
    results: list[dict[str, Any]],
    path: Path,
    end_to_end: list[dict[str, Any]] | None = None,
    mysql: list[dict[str, Any]] | None = None,
    also: tuple[dict[str, Any], ...] = (),
) -> None:
    """`also`: other runs' results (at another size), shown as their summaries and targets."""
    medians = _medians(results)
    engines = [e for e in ENGINES if any(k[1] == e for k in medians)]
    summary = _summary(medians, engines)
    lines = [
        "# Benchmarks",
        "",
        f"- **Machine:** {meta['machine']}",
        f"- **Command:** `{meta['command']}` (run on {meta['started'][:19]}Z"
        + (f", finished {meta['finished'][11:19]}Z)" if meta.get("finished") else ")"),
        *(
            [
                "- **Other work on the machine:** the 1-minute load average at the start and at "
                "the end of each phase: "
                + ", ".join(f"{k} {v}" for k, v in meta["load"].items())
                + " (2 cores; other test suites ran beside the benchmark, so figures are noisy: "
                "compare ratios within this run)."
            ]
            if meta.get("load")
            else []
        ),
        f"- **Data:** `bench.orders` with {meta['rows']:,} rows (id bigint pk, customer_id, amount numeric(12,2), "
        "status, note, created_at, updated_at indexed), PostgreSQL 15 on the same machine.",
        f"- **Method, in process:** every figure is the median of {meta['repeats']} runs. Engines run in their own processes; "
        "each run is timed from the engine's side. CPU is user + system time of the engine's process tree "
        "(the JVM included) plus the PostgreSQL server's processes, per million rows read. Peak memory is the "
        "engine's process tree, sampled every 50 ms. Each engine sees the same source changes.",
        "- **Engines, in process:** ours (the Dagster asset, materialized in-process with a persistent instance; one warm "
        "Spark session, local[*]; JDBC reader; a plain Parquet lake, `lake: {format: parquet}`), ours_iceberg (the same "
        "on an Iceberg lake, `lake: {format: iceberg}`: Spark writes the files, PyIceberg commits them through the "
        "default SQL catalog on SQLite; its own worker and Spark session), copy (`COPY ... TO STDOUT (FORMAT binary)` to /dev/null: the floor), adbc "
        "(ADBC to Arrow, streamed into a zstd Parquet file), dlt (`sql_table`, pyarrow backend, Parquet on a "
        "filesystem destination, incremental on updated_at).",
        "",
        *(end_to_end_section(meta, end_to_end, medians) if end_to_end else []),
    ]
    if results:
        lines += [
            "## In process: the engine's side",
            "",
            "Wall time, and its ratio to ours (below 1.00x: faster than ours):",
            "",
            *summary,
            "",
            *_targets(medians),
            "## Scenarios",
            "",
        ]
    for scenario in ORDER:
        if (scenario, "ours") in medians:
            lines += _scenario_table(scenario, medians, engines)
    if mysql:
        lines += _mysql_section(meta, mysql)
    for other in also:
        lines += _other_size_section(other)
    # Sections other harnesses write: the commit cost over many runs (bench/commits.py), the
    # levers (bench/levers.py), and the notes on this run's figures.
    for part in ("COMMITS.md", "LEVERS.md", "NOTES.md"):
        extra = Path(__file__).with_name(part)
        if extra.exists():
            lines += [extra.read_text().strip(), ""]
    path.write_text("\n".join(lines))


def main() -> None:
    """Render BENCHMARKS.md again from a results file (after editing bench/NOTES.md)."""
    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("results", type=Path)
    parser.add_argument("--report", type=Path, default=Path(__file__).parents[1] / "BENCHMARKS.md")
    parser.add_argument(
        "--also", type=Path, nargs="*", default=[], help="other runs' results, at other sizes"
    )
    args = parser.parse_args()
    loaded = json.loads(args.results.read_text())
    write_report(
        loaded["meta"],
        loaded["results"],
        args.report,
        loaded.get("end_to_end"),
        loaded.get("mysql"),
        tuple(json.loads(p.read_text()) for p in args.also),
    )


if __name__ == "__main__":
    main()
