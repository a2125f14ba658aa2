"""The lake's commit alone over many commits: does a table committed every minute slow down?

    python -m bench.commits_lake --commits 1000            # the benchmark, COMMITS.md
    python -m bench.commits_lake --commits 50 --out /tmp/c.json --report /tmp/c.md

No Spark, no Dagster, no database: each format's lake table (`incremental_assets.lake`) commits
what a run's Spark job would have staged (Parquet files written by pyarrow, Spark's schema in
their footers), as bench/commits.py's materializations do, but a thousand commits take minutes,
not hours. Per format, an append table adds one file per commit; a merge table of 16 hash buckets
replaces the files of the one or two buckets each commit touches. Iceberg uses the default SQL
catalog on SQLite and the default `keep_snapshots` (100).

Per commit: the table's facts read before it (`facts`: for Iceberg its manifests), the commit
(`commit`: moving the files in, the catalog's swap with the expiry of old snapshots, and the
deletion of files only they held), and after it, outside the clock, what the table holds
(bench/commits.py's `table_state`). The report (bench/commits_report.py) shows medians of 10
commits around commits 1, 10, 100, 250, 500, 750 and 1,000.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from bench.commits import FORMATS, ROOT, TABLES, table_state
from bench.commits_report import write_commits_report
from incremental_assets.config import LakeSpec
from incremental_assets.lake import Commit, LakeTable, open_lake
from incremental_assets.lake.facts import KEY
from incremental_assets.lake.files import SPARK_SCHEMA
from incremental_assets.lake.names import BucketScheme, batch_group, data_file_name, new_txn

BUCKETS = BucketScheme("hash", 16)
ROWS_PER_FILE = 100
_SPARK_SCHEMA = T.StructType(
    [T.StructField("id", T.LongType()), T.StructField("note", T.StringType())]
).json()
_txns = itertools.count()


def _file(path: Path, run: int) -> None:
    ids = pa.array(range(run * ROWS_PER_FILE, (run + 1) * ROWS_PER_FILE), pa.int64())
    table = pa.table({"id": ids, "note": pa.array([f"run {run}"] * ROWS_PER_FILE)})
    pq.write_table(table.replace_schema_metadata({SPARK_SCHEMA: _SPARK_SCHEMA}), path)


def _commit(lake: LakeTable, mode: str, run: int) -> dict[str, float]:
    """Stage what a run of `mode` writes, then commit it: the seconds of the facts and commit."""
    started = time.perf_counter()
    facts = lake.facts()
    read = time.perf_counter() - started
    txn = f"{new_txn()}{next(_txns):06d}"
    staging = Path(lake.staging_uri(txn).removeprefix("file:"))
    staging.mkdir(parents=True)
    if mode == "append":
        groups, removes = [batch_group(run)], []
    else:
        touched = sorted({BUCKETS.group(run % 16), BUCKETS.group(run * 7 % 16)})
        groups = touched if run else [BUCKETS.group(i) for i in range(16)]
        removes = [f.name for f in facts.files if f.group in touched]
    adds = []
    for index, group in enumerate(groups):
        _file(staging / f"{index}.parquet", run)
        adds.append((f"{index}.parquet", data_file_name(group, txn, index)))
    records = {KEY: {"columns": ["id"], "weighed_by": {}}} if mode == "merge" else {}
    commit = Commit(
        txn=txn,
        batch=run + 1,
        replace_all=False,
        cursor=str(run),
        adds=adds,
        removes=removes,
        records=records,
    )
    started = time.perf_counter()
    lake.commit(commit, facts)
    committed = time.perf_counter() - started
    return {"facts_seconds": read, "commit_seconds": committed}


def run_commits(args: argparse.Namespace, everything: dict[str, Any]) -> None:
    results: list[dict[str, Any]] = everything["runs"]
    with tempfile.TemporaryDirectory(prefix="ia-bench-commits-lake-") as tmp:
        lakes: dict[tuple[str, str], tuple[LakeTable, Path, Any]] = {}
        for lake_format in FORMATS:
            spec = LakeSpec(path=str(Path(tmp) / lake_format), format=lake_format)  # type: ignore[arg-type]
            Path(spec.path).mkdir()
            for table in TABLES:
                lake = open_lake(spec, table)
                catalog = _catalog(spec) if lake_format == "iceberg" else None
                lakes[(lake_format, table)] = (lake, Path(spec.path), catalog)
        everything["meta"]["keep_snapshots"] = LakeSpec(path=tmp).keep_snapshots
        started = time.perf_counter()
        for run in range(args.commits + 1):  # commit 0 is the first load
            for (lake_format, table), (lake, root, catalog) in lakes.items():
                if lake_format == "parquet" and run > args.parquet_commits:
                    continue
                timed = _commit(lake, TABLES[table], run)
                outcome = {
                    **timed,
                    "wall": timed["facts_seconds"] + timed["commit_seconds"],
                    "write_seconds": timed["commit_seconds"],
                    **table_state(root, table, lake_format, f"incremental_assets.{table}", catalog),
                    "format": lake_format,
                    "table": table,
                    "run": run,
                }
                if run == 0:
                    everything["first_load"][f"{lake_format} {table}"] = outcome
                else:
                    results.append(outcome)
            if run % 100 == 0:
                print(f"commit {run} ({(time.perf_counter() - started) / 60:.1f} min)", flush=True)


def _catalog(spec: LakeSpec) -> Any:
    from pyiceberg.catalog import load_catalog

    properties = spec.catalog_properties()
    return load_catalog(properties.pop("name", "incremental_assets"), **properties)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commits_lake", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--commits", type=int, default=1000, help="commits after the first")
    parser.add_argument(
        "--parquet-commits", type=int, default=None, help="on plain Parquet (default: --commits)"
    )
    parser.add_argument("--out", type=Path, default=None, help="the results file (JSON)")
    parser.add_argument("--report", type=Path, default=ROOT / "bench" / "COMMITS.md")
    args = parser.parse_args()
    if args.parquet_commits is None:
        args.parquet_commits = args.commits
    from bench.run import _machine

    started = datetime.now(UTC)
    out = args.out or ROOT / "bench" / "results" / f"commits-lake-{started:%Y%m%dT%H%M%S}.json"
    everything: dict[str, Any] = {
        "meta": {
            "lake_only": True,
            "runs": args.commits,
            "parquet_runs": min(args.parquet_commits, args.commits),
            "rows": ROWS_PER_FILE,
            "started": started.isoformat(),
            "machine": _machine(),
            "command": " ".join(["python -m bench.commits_lake", *sys.argv[1:]]),
            "load": {"start": round(os.getloadavg()[0], 1)},
        },
        "first_load": {},
        "runs": [],
    }
    run_commits(args, everything)
    meta = everything["meta"]
    meta["load"]["end"] = round(os.getloadavg()[0], 1)
    meta["finished"] = datetime.now(UTC).isoformat()
    meta["seconds"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(everything, indent=1))
    print(f"results: {out}")
    write_commits_report(everything, args.report)
    print(f"report: {args.report}")


if __name__ == "__main__":
    main()
