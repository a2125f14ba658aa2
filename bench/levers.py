"""Each lever of the full load (S1), measured on its own against the defaults in the same run.

    python -m bench.levers                  # 1M rows, 5 repetitions per variant
    python -m bench.levers --rows 10000 --repeats 1

Every variant runs in a fresh worker process (so Spark settings apply), loads the whole table once
to warm up (the JVM's JIT, PostgreSQL's buffers), then `--repeats` times, and is compared with the
defaults by median wall time. The defaults run first and again last: the gap between those two is
the noise of the run, and a lever pays only if it beats both by more than that. The worker's
start-up (the Spark session and its first job) and its first load are reported too: they are what
reusing one session saves.
Results go to bench/results/levers-<time>.json and bench/LEVERS.md, which the report includes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

from bench import data
from bench.run import ROOT, Worker, postgres, postmaster_pid

ZSTD_LEVEL = "spark.hadoop.parquet.compression.codec.zstd.level"
DEFAULTS = "defaults (fetchsize 10000, one partition per core, zstd level 3, 5M rows per file)"
VARIANTS: dict[str, dict[str, Any]] = {
    DEFAULTS: {},
    "fetchsize 1000": {"source": {"fetchsize": 1000}},
    "fetchsize 50000": {"source": {"fetchsize": 50000}},
    # pgjdbc sends results as text unless the statement is server-prepared; -1 forces binary.
    "binary transfer (prepareThreshold -1)": {"source": {"properties": {"prepareThreshold": "-1"}}},
    "1 partition": {"source": {"max_partitions": 1}},
    "4 partitions (2 per core)": {"source": {"max_partitions": 4}},
    "8 partitions (4 per core)": {"source": {"max_partitions": 8}},
    "zstd level 1": {"spark_conf": {ZSTD_LEVEL: "1"}},
    "zstd level 9": {"spark_conf": {ZSTD_LEVEL: "9"}},
    "snappy": {"lake": {"compression": "snappy"}},
    "files of at most 250k rows": {"lake": {"max_rows_per_file": 250_000}},
    "defaults, again": {},
}


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(prog="python -m bench.levers")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    started = datetime.now(UTC)
    results: dict[str, dict[str, Any]] = {}
    with (
        postgres() as (pg_url, jdbc),
        psycopg.connect(pg_url, autocommit=True) as conn,
        tempfile.TemporaryDirectory(prefix="ia-levers-") as directory,
    ):
        data.create_orders(conn, args.rows)
        server = postmaster_pid(conn)
        for i, (variant, settings) in enumerate(VARIANTS.items()):
            worker = Worker("ours", Path(directory) / f"v{i}", pg_url, server, jdbc, settings)
            try:
                first = worker.run("full", "")
                runs = [worker.run("full", "") for _ in range(args.repeats)]
            finally:
                worker.close()
            results[variant] = {"startup": worker.startup, "first": first["wall"], "runs": runs}
            print(f"{variant}: {median(r['wall'] for r in runs):.2f}s", flush=True)
    out = ROOT / "bench" / "results" / f"levers-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"rows": args.rows, "repeats": args.repeats, "started": started.isoformat()}
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (ROOT / "bench" / "LEVERS.md").write_text(render(meta, results))
    print(f"results: {out}\nreport: bench/LEVERS.md")


def render(meta: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    baseline = median(r["wall"] for r in results[DEFAULTS]["runs"])
    lines = [
        "## Levers",
        "",
        f"`python -m bench.levers --rows {meta['rows']} --repeats {meta['repeats']}` "
        f"(run on {meta['started'][:19]}Z): S1, a full load of {meta['rows']:,} rows by ours, one "
        f"lever changed at a time, each variant in a fresh process; medians of {meta['repeats']} "
        "runs after one warm-up load. Session start is the Spark session and its first job; first "
        "load is the warm-up load in a new session.",
        "",
        "| variant | median wall s | vs defaults | engine s | CPU s (engine + PostgreSQL) | "
        "peak MB | files | lake MB | session start s | first load s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, entry in results.items():
        runs = entry["runs"]
        wall = median(r["wall"] for r in runs)
        lines.append(
            f"| {variant} | {wall:.2f} | {wall / baseline:.2f}x | "
            f"{median(r['engine_seconds'] for r in runs):.2f} | "
            f"{median(r['cpu_client'] + r['cpu_server'] for r in runs):.1f} | "
            f"{median(r['peak_rss'] for r in runs) / 2**20:,.0f} | "
            f"{median(r['files'] for r in runs):.0f} | "
            f"{median(_lake_bytes(r) for r in runs) / 2**20:,.1f} | {entry['startup']:.1f} | "
            f"{entry['first']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _lake_bytes(result: dict[str, Any]) -> int:
    """The table's bytes after the run: what the worker read after the clock (`table`), or, in
    results from before it did, the run's own `bytes`."""
    return int(result.get("table", {}).get("bytes", result.get("bytes", 0)))


if __name__ == "__main__":
    main()
