"""The Iceberg commit's cost over many runs: does a table committed every few minutes slow down?

    python -m bench.commits --runs 1000                  # the full benchmark
    python -m bench.commits --runs 30 --out /tmp/c.json --report /tmp/c.md   # the quick check
    python -m bench.commits --render bench/results/commits-<time>.json        # COMMITS.md again

A small `bench.orders` in PostgreSQL (--rows, 10,000 by default; bench/run.py's `postgres()`) is
loaded once into two tables on each lake format, `orders` in append mode and `orders_merge` in
merge mode, `ours` of bench/engines.py in this process (one Spark session, one Dagster instance
per format, the default `keep_snapshots`). Then each of --runs runs inserts --inserts new rows
(5), updates --updates rows spread over the ids (5), and materializes both tables in process on
the Iceberg lake and, for the first --parquet-runs runs, on the plain Parquet one right after, so
both read the same rows. The append table adds one data file per run: after 1,000 runs it holds
1,000 files. The merge table rewrites the buckets the run touched, replacing files each run.
Iceberg expires snapshots beyond `keep_snapshots` in each commit.

Per run, timed: the materialization's wall time; `write_seconds` from its metadata (from the end of
Spark's write of the staged files to the end of the commit: moving the files into the table,
for Iceberg the catalog's swap and the snapshot expiry, for plain Parquet the journaled commit);
and, by wrapping the lake classes' methods in this process, the commit itself (`commit`) and the
reads of the table's state (`facts`: for Iceberg, the manifests; every call in the run). After
the run, outside the clock: snapshots kept, metadata.json files, manifests and manifest lists,
data files, the manifests the current snapshot lists (what the next run reads), and the size of
the table's folder and of the catalog's SQLite file.

The report (bench/commits_report.py) shows, at runs 1, 10, 100, 250, 500, 750 and 1,000, the
medians of a window of 10 runs around each. Results go to bench/results/commits-<time>.json and
the section to bench/COMMITS.md, which BENCHMARKS.md includes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import data
from bench.commits_report import write_commits_report

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("iceberg", "parquet")
# The tables each run materializes, by mode.
TABLES = {"orders": "append", "orders_merge": "merge"}


class Stopwatch:
    """Seconds spent in chosen methods of the lake classes, summed per label until `reset`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, cls: type, method: str, label: str) -> None:
        original: Callable[..., Any] = getattr(cls, method)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started

        setattr(cls, method, timed)

    def reset(self) -> dict[str, float]:
        taken, self.seconds = dict(self.seconds), defaultdict(float)
        return taken


def _stopwatch() -> Stopwatch:
    from incremental_assets.lake.iceberg import IcebergLake
    from incremental_assets.lake.parquet import ParquetLake

    watch = Stopwatch()
    for cls in (IcebergLake, ParquetLake):
        watch.wrap(cls, "commit", "commit")
        watch.wrap(cls, "facts", "facts")
    return watch


def table_state(
    lake: Path, table_name: str, lake_format: str, identifier: str, catalog: Any
) -> dict[str, Any]:
    """What the table holds on disk after a run (and, for Iceberg, the snapshots it keeps)."""
    folder = lake / table_name
    files = [p for p in folder.rglob("*") if p.is_file()]
    state: dict[str, Any] = {
        "data_files": sum(
            1 for p in files if p.name.startswith("part-") and "_staging" not in p.parts
        ),
        "folder_bytes": sum(p.stat().st_size for p in files),
    }
    if lake_format == "iceberg":
        metadata = [p for p in files if p.parent.name == "metadata"]
        table = catalog.load_table(identifier)
        current = table.current_snapshot()
        state.update(
            snapshots=len(table.metadata.snapshots),
            # What the next run's facts read: the current snapshot's manifests.
            manifests_current=len(current.manifests(table.io)) if current is not None else 0,
            metadata_files=sum(1 for p in metadata if p.name.endswith(".metadata.json")),
            manifest_lists=sum(1 for p in metadata if p.name.startswith("snap-")),
            manifests=sum(
                1 for p in metadata if p.suffix == ".avro" and not p.name.startswith("snap-")
            ),
            catalog_bytes=(lake / "_catalog.db").stat().st_size,
        )
    return state


class Lake:
    """One format's `ours`: runs the table, and reads what its folder holds afterwards."""

    def __init__(self, lake_format: str, workdir: Path, pg_url: str, jdbc: dict[str, str]) -> None:
        from bench.engines import Ours

        self.format = lake_format
        name = "ours" if lake_format == "parquet" else f"ours_{lake_format}"
        settings = {"lake": {"format": lake_format}}
        (workdir / lake_format).mkdir(parents=True, exist_ok=True)
        self.ours = Ours(workdir / lake_format, pg_url, jdbc, settings, name=name)
        self.namespace = self.ours.project.lake.namespace
        self._catalog: Any = None

    @property
    def catalog(self) -> Any:
        """The Iceberg catalog, opened once the first run has created the lake (None: Parquet)."""
        if self._catalog is None and self.format == "iceberg":
            from pyiceberg.catalog import load_catalog

            # A SQL catalog keeps its tables under its name: the one the lake uses (iceberg.py).
            properties = self.ours.project.lake.catalog_properties()
            name = properties.pop("name", "incremental_assets")
            self._catalog = load_catalog(name, **properties)
        return self._catalog

    def run(self, watch: Stopwatch, table: str, full_refresh: bool = False) -> dict[str, Any]:
        watch.reset()
        started = time.perf_counter()
        metadata = self.ours.materialize(table, full_refresh)
        wall = time.perf_counter() - started
        inside = watch.reset()
        return {
            "wall": wall,
            "write_seconds": metadata["write_seconds"],
            "extract_seconds": metadata["extract_seconds"],
            "commit_seconds": inside.get("commit", 0.0),
            "facts_seconds": inside.get("facts", 0.0),
            "rows": metadata["rows_extracted"],
            "spark_jobs": metadata.get("spark_jobs"),
            "spark_stages": metadata.get("spark_stages"),
            "snapshot_id": metadata.get("iceberg_snapshot_id"),
            "merge_strategy": metadata.get("merge_strategy"),
            "rows_rewritten": metadata.get("rows_rewritten"),
            **table_state(
                self.ours.lake, table, self.format, f"{self.namespace}.{table}", self.catalog
            ),
        }


@contextmanager
def _source(rows: int) -> Iterator[tuple[Any, str, dict[str, str]]]:
    import psycopg

    from bench.run import postgres

    with postgres() as (pg_url, jdbc), psycopg.connect(pg_url, autocommit=True) as conn:
        print(f"generating {rows:,} rows ...", flush=True)
        data.create_orders(conn, rows)
        yield conn, pg_url, jdbc


def run_commits(
    args: argparse.Namespace, everything: dict[str, Any], save: Callable[[], None]
) -> None:
    """The first loads, then `args.runs` runs of a few new rows each; every run recorded."""
    results: list[dict[str, Any]] = everything["runs"]
    with (
        _source(args.rows) as (conn, pg_url, jdbc),
        tempfile.TemporaryDirectory(prefix="ia-bench-commits-") as tmp,
    ):
        lakes = {f: Lake(f, Path(tmp), pg_url, jdbc) for f in FORMATS}
        everything["meta"]["keep_snapshots"] = lakes["iceberg"].ours.project.lake.keep_snapshots
        watch = _stopwatch()
        for lake in lakes.values():
            for table in TABLES:
                first = lake.run(watch, table, full_refresh=True)
                everything["first_load"][f"{lake.format} {table}"] = first
                print(
                    f"first load, {lake.format} {table}: {first['wall']:.2f}s, "
                    f"{first['rows']} rows",
                    flush=True,
                )
        started = time.perf_counter()
        for run in range(1, args.runs + 1):
            data.apply_changes(
                conn, args.rows, inserted=args.inserts, updated=args.updates, recent=False
            )
            for lake in lakes.values():
                if lake.format == "parquet" and run > args.parquet_runs:
                    continue
                for table in TABLES:
                    outcome = lake.run(watch, table)
                    outcome.update(format=lake.format, table=table, run=run)
                    results.append(outcome)
            if run % 10 == 0 or run == args.runs:
                _progress(results, run, time.perf_counter() - started)
            if run % 50 == 0:
                save()


def _progress(results: list[dict[str, Any]], run: int, elapsed: float) -> None:
    last = {f"{r['format']} {r['table']}": r for r in results if r["run"] == run}
    shown = ", ".join(
        f"{f} {r['wall']:.2f}s (write {r['write_seconds']:.2f}s"
        + (f", {r['snapshots']} snapshots" if "snapshots" in r else "")
        + ")"
        for f, r in last.items()
    )
    print(f"run {run} ({elapsed / 60:.1f} min): {shown}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commits", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=1000, help="runs on the Iceberg lake")
    parser.add_argument(
        "--parquet-runs",
        type=int,
        default=None,
        help="runs on the plain Parquet lake, for comparison (default: --runs)",
    )
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
    if args.parquet_runs is None:
        args.parquet_runs = args.runs
    started = datetime.now(UTC)
    out = args.out or ROOT / "bench" / "results" / f"commits-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    from bench.run import _machine

    everything: dict[str, Any] = {
        "meta": {
            "runs": args.runs,
            "parquet_runs": min(args.parquet_runs, args.runs),
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
