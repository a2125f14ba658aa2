"""The Iceberg commit's cost over many whole runs: the product's own path, Dagster included.

    python -m bench.commits --runs 1000                  # hours: see below
    python -m bench.commits --runs 30 --out /tmp/c.json --report /tmp/c.md   # the quick check
    python -m bench.commits --render bench/results/commits-<time>.json        # COMMITS.md again

bench/commits_lake.py measures the commit through the writers alone; this measures
it through whole materializations, as `ours_iceberg` runs them (bench/engines.py: one warm local
Spark session and a persistent Dagster instance, in this process), on a small `bench.orders` in
PostgreSQL (--rows, 10,000 by default; bench/run.py's `postgres()`): `orders` in append mode and
`orders_merge` in merge mode are loaded once, then each of --runs runs inserts --inserts new rows
(5) and updates --updates rows spread over the ids (5), and materializes both tables. A run costs
a few seconds a table (Dagster's run, the JDBC read, the commit, the checks, on Spark's default
200 shuffle partitions): 1,000 runs take two to three hours on two cores, against about an hour
for commits_lake.py's 1,000 commits.

Per run, from what it recorded (bench/recorded.py): its wall time, `extract_seconds`, the write
without the maintenance after the commit (`commit_seconds`), and the maintenance; then, outside
the clock, what the table holds (bench/lake_state.py). The report is bench/commits_report.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import data
from bench.commits_report import TABLES, duration, write_commits_report
from bench.engines import Ours, OursIceberg

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def _source(rows: int) -> Iterator[tuple[Any, str, dict[str, str]]]:
    import psycopg

    from bench.run import postgres

    with postgres() as (pg_url, jdbc), psycopg.connect(pg_url, autocommit=True) as conn:
        print(f"generating {rows:,} rows ...", flush=True)
        data.create_orders(conn, rows)
        yield conn, pg_url, jdbc


def _run(ours: Ours, table: str, full_refresh: bool = False) -> dict[str, Any]:
    """One materialization of `table`: the wall time, what it recorded, what the table holds."""
    started = time.perf_counter()
    outcome = ours.run_table(table, full_refresh)
    outcome["wall"] = time.perf_counter() - started
    outcome.update(ours.table_state())
    return outcome


def run_commits(
    args: argparse.Namespace, everything: dict[str, Any], save: Callable[[], None]
) -> None:
    """The first loads, then `args.runs` runs of a few changed rows each; every run recorded."""
    results: list[dict[str, Any]] = everything["runs"]
    with (
        _source(args.rows) as (conn, pg_url, jdbc),
        tempfile.TemporaryDirectory(prefix="ia-bench-commits-") as tmp,
    ):
        ours = OursIceberg(Path(tmp), pg_url, jdbc)
        everything["meta"]["keep_snapshots"] = ours.project.lake.keep_snapshots
        everything["meta"]["keep_snapshots_for"] = duration(ours.project.lake.keep_snapshots_for)
        for table in TABLES:
            everything["first_load"][table] = _run(ours, table, full_refresh=True)
        started = time.perf_counter()
        for run in range(1, args.runs + 1):
            data.apply_changes(
                conn, args.rows, inserted=args.inserts, updated=args.updates, recent=False
            )
            for table in TABLES:
                results.append(
                    {**_run(ours, table), "format": "iceberg", "table": table, "run": run}
                )
            if run % 10 == 0 or run == args.runs:
                elapsed = (time.perf_counter() - started) / 60
                shown = ", ".join(
                    f"{r['table']} {r['wall']:.2f}s ({r['snapshots']} snapshots)"
                    for r in results
                    if r["run"] == run
                )
                print(f"run {run} ({elapsed:.1f} min): {shown}", flush=True)
            if run % 50 == 0:
                save()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commits", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=1000, help="runs after the first loads")
    parser.add_argument("--rows", type=int, default=10_000, help="the source's rows at the start")
    parser.add_argument("--inserts", type=int, default=5, help="rows inserted before each run")
    parser.add_argument("--updates", type=int, default=5, help="rows updated before each run")
    parser.add_argument("--out", type=Path, default=None, help="the results file (JSON)")
    parser.add_argument(
        "--report", type=Path, default=None, help="the section (default: bench/COMMITS.md)"
    )
    parser.add_argument(
        "--render", type=Path, default=None, help="render the section from a results file only"
    )
    args = parser.parse_args()
    report = args.report or ROOT / "bench" / "COMMITS.md"
    if args.render is not None:
        write_commits_report(json.loads(args.render.read_text()), report)
        print(f"report: {report}")
        return
    started = datetime.now(UTC)
    out = args.out or ROOT / "bench" / "results" / f"commits-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    from bench.run import _machine

    everything: dict[str, Any] = {
        "meta": {
            "runs": args.runs,
            "rows": args.rows,
            "inserts": args.inserts,
            "updates": args.updates,
            "started": started.isoformat(),
            "machine": _machine(),
            "command": " ".join(["python -m bench.commits", *sys.argv[1:]]),
            "load": {"start": round(os.getloadavg()[0], 1)},
        },
        "first_load": {},
        "runs": [],
    }

    def save() -> None:
        """Write the results so far: a run stopped later still leaves the runs it finished."""
        meta = everything["meta"]
        meta["finished"] = datetime.now(UTC).isoformat()
        meta["load"]["end"] = round(os.getloadavg()[0], 1)
        meta["seconds"] = round((datetime.now(UTC) - started).total_seconds(), 1)
        out.write_text(json.dumps(everything, indent=1))

    run_commits(args, everything, save)
    save()
    print(f"results: {out}")
    write_commits_report(everything, report)
    print(f"report: {report}")


if __name__ == "__main__":
    main()
