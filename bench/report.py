"""Write BENCHMARKS.md from one run's results: medians, ratios against every peer, the targets.

The end-to-end section (bench/end_to_end_report.py) comes first, then the in-process figures and
targets (bench/targets.py), the previous Iceberg layer beside this one (bench/previous.py), read
amplification (bench/read_amplification_report.py), the object store
(bench/object_store_report.py), each scenario's table, MySQL, other sizes, and the sections other
harnesses write (COMMITS.md, LEVERS.md) with the notes (NOTES.md).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.end_to_end_report import end_to_end_section
from bench.engines import OURS
from bench.medians import ORDER, Medians, medians_of
from bench.object_store_report import object_store_section
from bench.previous import load_previous, previous_layer_section
from bench.read_amplification_report import read_amplification_section
from bench.targets import FORMATS, in_process_targets

SCHEMA_MYSQL = "bench.orders"
TITLES = {
    "S1 first": (
        "S1 first: the first full load in a fresh process (cold JIT and caches; one run, not in "
        "the S1 medians)"
    ),
    "S1": "S1: full load",
    "S0": "S0: incremental run, no changes (fixed cost)",
    "S2": "S2: incremental run, 0.1% of rows changed",
    "S3": "S3: incremental run, 10% of rows changed",
    "S4 clustered": (
        "S4: merge of 1% updates, clustered on the most recent ids (the peers, with no merge into "
        "plain Parquet, extract the same delta and append it)"
    ),
    "S4 uniform": (
        "S4: merge of 1% updates, spread uniformly (the peers extract the same delta and append it)"
    ),
}
ENGINES = ("ours", "ours_iceberg", "ours_iceberg_s3", "copy", "adbc", "dlt")


def _scenario_table(
    scenario: str,
    medians: Medians,
    engines: list[str],
    server: str = "PostgreSQL",
    title: str | None = None,
) -> list[str]:
    ours = medians.get((scenario, "ours"))
    lines = [
        f"### {title or TITLES[scenario]}",
        "",
        f"| engine | rows | median wall s | rows/s | CPU s per M rows (engine + {server}) | "
        "peak MB | files | Spark jobs / stages | wall vs ours |",
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
            "Ours, engine time (extract + write, without Dagster's run overhead): "
            f"median {engine_time}.",
        ]
    if rewritten := each("rewritten_per_changed", lambda v: f"{v:.1f}"):
        lines += [
            "",
            f"Rows written per changed row (`rows_rewritten` / rows changed): median {rewritten}.",
        ]
    if strategy := each("merge_strategy", str, "; "):
        lines += ["", f"Merge path, as the runs record it (`merge_strategy`): {strategy}."]
    maintained = [
        f"{FORMATS[e]}: after {m['maintenance_runs']} of {m['runs']} runs"
        + (f", median {m['maintenance_seconds']:.2f} s" if m.get("maintenance_seconds") else "")
        + f" ({', '.join(m['maintenance_tasks'])})"
        for e, m in ourselves
        if m.get("maintenance_runs")
    ]
    if maintained:
        lines += [
            "",
            "Maintenance after the commit, part of the wall time (`maintenance`): "
            + "; ".join(maintained)
            + ".",
        ]
    return [*lines, ""]


def _spark_work(m: dict[str, Any]) -> str:
    """Median Spark jobs / stages a run of ours started (its checks included); `-` for peers."""
    if "spark_jobs" not in m:
        return "-"
    return f"{m['spark_jobs']:g} / {m.get('spark_stages', 0):g}"


def _mysql_section(meta: dict[str, Any], mysql: list[dict[str, Any]]) -> list[str]:
    """S1 and S0 on MariaDB: ours beside ConnectorX and dlt, from the same run."""
    facts = meta.get("mysql") or {}
    medians = medians_of(mysql)
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


def _summary(medians: Medians, engines: list[str]) -> list[str]:
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
    return summary if len(summary) > 2 else ["(No scenario of `ours` ran.)"]


def _demoted(lines: list[str], size: str) -> list[str]:
    """A section's lines one heading level down, its title saying the size."""
    return [
        f"#{line}, at {size}"
        if line.startswith("## ")
        else f"#{line}"
        if line.startswith("### ")
        else line
        for line in lines
    ]


def _measured_sections(
    meta: dict[str, Any],
    results: list[dict[str, Any]],
    medians: Medians,
    previous: dict[str, Any] | None,
    end_to_end: list[dict[str, Any]] | None = None,
) -> list[str]:
    """The targets, the previous layer, read amplification and the object store of one run."""
    before = medians_of(previous["results"]) if previous else None
    named = f"`{previous['meta']['file']}`" if previous else ""
    return [
        *in_process_targets(medians, int(meta["rows"]), before, named),
        *(previous_layer_section(medians, previous, end_to_end) if previous else []),
        *read_amplification_section(meta, results),
        *object_store_section(results, medians),
    ]


def _other_size_section(loaded: dict[str, Any]) -> list[str]:
    """Another run of the harness (at another size): its summary, targets, the previous layer
    of that size, read amplification and the object store."""
    meta = loaded["meta"]
    medians = medians_of(loaded["results"])
    engines = [e for e in ENGINES if any(k[1] == e for k in medians)]
    previous = load_previous(None, int(meta["rows"]))
    size = f"{meta['rows']:,} rows"
    return [
        f"## In process at {size} ({meta['started'][:10]})",
        "",
        f"`{meta['command']}` (run on {meta['started'][:19]}Z; load average "
        + ", ".join(f"{k} {v}" for k, v in meta.get("load", {}).items())
        + f"). Medians of {meta['repeats']} runs; the same method as above. Wall time and its "
        "ratio to ours:",
        "",
        *_summary(medians, engines),
        "",
        *_demoted(_measured_sections(meta, loaded["results"], medians, previous), size),
    ]


def write_report(
    meta: dict[str, Any],
    results: list[dict[str, Any]],
    path: Path,
    end_to_end: list[dict[str, Any]] | None = None,
    mysql: list[dict[str, Any]] | None = None,
    also: tuple[dict[str, Any], ...] = (),
    previous: dict[str, Any] | None = None,
) -> None:
    """`also`: other runs' results (at another size), shown as their summaries and targets;
    `previous`: the earlier run of this size the targets and the previous layer compare with."""
    medians = medians_of(results)
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
                + " (2 cores; compare ratios within this run)."
            ]
            if meta.get("load")
            else []
        ),
        f"- **Data:** `bench.orders` with {meta['rows']:,} rows (id bigint pk, customer_id, "
        "amount numeric(12,2), status, note, created_at, updated_at indexed), PostgreSQL 15 on "
        "the same machine.",
        f"- **Method, in process:** every figure is the median of {meta['repeats']} runs. Engines "
        "run in their own processes; each run is timed from the engine's side. CPU is user + "
        "system time of the engine's process tree (the JVM included) plus the PostgreSQL server's "
        "processes, per million rows read. Peak memory is the engine's process tree, sampled every "
        "50 ms. Each engine sees the same source changes. What a table holds after a run (files, "
        "delete files, snapshots, objects) is read after the clock stopped.",
        "- **Engines, in process:** ours (the Dagster asset, materialized in-process with a "
        "persistent instance; one warm Spark session, local[*]; JDBC reader; a plain Parquet lake, "
        "`lake: {format: parquet}`), ours_iceberg (the same on an Iceberg lake, `lake: {format: "
        "iceberg}`: Spark writes the table through Iceberg's runtime and its SparkCatalog over the "
        "default SQL catalog on SQLite, a run's snapshot on a branch that `main` is fast-forwarded "
        "to, merges merge-on-read, maintenance after a commit when due; its own worker and Spark "
        "session), ours_iceberg_s3 (ours_iceberg with the lake in a bucket of moto's S3 server, S1 "
        "and the merges only), copy (`COPY ... TO STDOUT (FORMAT binary)` to /dev/null: the "
        "floor), adbc (ADBC to Arrow, streamed into a zstd Parquet file), dlt (`sql_table`, "
        "pyarrow backend, Parquet on a filesystem destination, incremental on updated_at).",
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
            *_measured_sections(meta, results, medians, previous, end_to_end),
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
    # Sections other harnesses write: the commit cost over many commits (bench/commits_lake.py),
    # the levers (bench/levers.py), and the notes on this run's figures.
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
    parser.add_argument(
        "--previous",
        type=Path,
        default=None,
        help="the earlier run to compare with (default: bench/previous.py's, by size)",
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
        previous=load_previous(args.previous, int(loaded["meta"]["rows"])),
    )


if __name__ == "__main__":
    main()
