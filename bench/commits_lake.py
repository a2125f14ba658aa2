"""An Iceberg table committed again and again: does a commit, and the metadata file, stay flat?

    python -m bench.commits_lake --commits 1000            # the benchmark, bench/COMMITS.md
    python -m bench.commits_lake --commits 20 --out /tmp/c.json --report /tmp/c.md

No Dagster and no database: the package's own writers (`incremental_assets.writers`), driven as
a run drives them, on one local Spark session (4 shuffle partitions: `SPARK_CONF`), commit to two
tables of one Iceberg lake (the default SQLite catalog, `keep_snapshots` and `keep_snapshots_for` at
their defaults, 100 and a day): `orders` in append mode, 100 new rows a commit, and `orders_merge`
in merge mode, 100 rows a commit (50 updates in one or two of its key ranges, `truncate(1000, id)`,
and 50 new ids), after a first load of 10,000 rows each. Commits come faster than one a minute, so
no snapshot is old enough to expire: the table keeps every snapshot, as one committed every minute
would for its first day (1,440 commits; a merge's makes two snapshots).

Per commit, timed: the table's facts read before it (`facts`: its current metadata, as every
run reads it), the writer's stage (`stage`: for append the batch written on the run's branch,
for merge each key's latest version), its commit (`commit`: for merge the changed keys' rows deleted
and their new versions appended on the branch, then `main` fast-forwarded to the branch and the
branch dropped), and the maintenance a run does after it (`maintenance`: compaction, expiry,
orphans, when due). After the commit, outside the clock (bench/lake_state.py): the snapshots kept,
the size of the current metadata file (what every commit rewrites, several times, and every reader
parses), the live data and delete files, and the objects in the table's folder.
bench/commits_report.py shows medians of 10 commits around commits 1, 10, 100, 250, 500 and 1,000.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bench.commits_report import duration, write_commits_report
from bench.lake_state import iceberg_state
from incremental_assets.config import LakeSpec, Mode, SparkSpec
from incremental_assets.lake.facts import LakeFacts
from incremental_assets.lake.iceberg import IcebergLake
from incremental_assets.lake.names import new_txn
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import WritePlan

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"orders": Mode.APPEND, "orders_merge": Mode.MERGE}
SCHEMA = "id long, note string, c long"
FIRST_ROWS = 10_000  # each table's first load
ROWS = 100  # each later commit's rows: append, new ones; merge, half updates, half new ids
RANGE_ROWS = 1_000  # the merge table's key ranges (`bucket_rows`): truncate(1000, id)
Rows = list[tuple[int, str, int]]
# A session for commits of 100 rows: Spark's default of 200 shuffle partitions (which the package
# leaves as it is) about doubles a small merge's time here without changing how it ages.
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.shuffle.partitions": "4",
}


def rows_of(mode: Mode, commit: int) -> Rows:
    """What commit `commit` (0: the first load) writes."""
    if commit == 0:
        return [(i, "first", 0) for i in range(FIRST_ROWS)]
    if mode is Mode.APPEND:
        first = FIRST_ROWS + (commit - 1) * ROWS
        return [(i, f"commit {commit}", commit) for i in range(first, first + ROWS)]
    half = ROWS // 2
    ranges = sorted({commit % 10, commit * 7 % 10})  # one or two of the first ten ranges
    updated = [
        r * RANGE_ROWS + (commit * 13 + i * 37) % RANGE_ROWS
        for r in ranges
        for i in range(half // len(ranges))
    ]
    first_new = FIRST_ROWS + (commit - 1) * half
    new = list(range(first_new, first_new + half))
    return [(i, f"commit {commit}", commit) for i in [*updated, *new]]


def plan_of(lake: IcebergLake, facts: LakeFacts, commit: int) -> WritePlan:
    """The write plan of commit `commit`, as a run of the table would make it."""
    return WritePlan(
        lake=lake,
        facts=facts,
        txn=new_txn(),
        batch=commit + 1,
        cursor=str(commit),
        replace_all=commit == 0,
        primary_key=("id",),
        cursor_column="c",
        delete_column=None,
        buckets=None,
        bucket_rows=RANGE_ROWS,
        compression="zstd",
        max_rows_per_file=5_000_000,
    )


def _timed(step: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = step()
    return value, time.perf_counter() - started


def commit_once(spark: SparkSession, lake: IcebergLake, mode: Mode, commit: int) -> dict[str, Any]:
    """One commit as a run makes it (facts, stage, commit, maintenance), each step timed."""
    session = lake.session(spark)
    frame: DataFrame = session.createDataFrame(rows_of(mode, commit), SCHEMA)
    facts, facts_seconds = _timed(lake.facts)
    plan = plan_of(lake, facts, commit)
    writer = writer_for(mode, session, lake)
    staged, stage_seconds = _timed(lambda: writer.stage(frame, plan))
    outcome, commit_seconds = _timed(lambda: writer.commit(staged, plan))
    maintenance: str | None = None
    maintenance_seconds = 0.0
    if outcome.head is not None:
        maintenance, maintenance_seconds = _timed(lambda: lake.maintain(session))
    return {
        "facts_seconds": facts_seconds,
        "stage_seconds": stage_seconds,
        "commit_seconds": commit_seconds,
        "maintenance_seconds": maintenance_seconds,
        "maintenance": maintenance,
        "wall": facts_seconds + stage_seconds + commit_seconds + maintenance_seconds,
        "rows_written": outcome.rows_written,
        "files_written": outcome.files_written,
    }


def run_commits(
    args: argparse.Namespace, everything: dict[str, Any], save: Callable[[], None]
) -> None:
    results: list[dict[str, Any]] = everything["runs"]
    resource = IncrementalSparkResource.from_spec(
        SparkSpec(master="local[*]", conf={**SPARK_CONF, **dict(args.spark_conf)})
    )
    spark = resource.spark_session
    try:
        with tempfile.TemporaryDirectory(prefix="ia-bench-commits-lake-") as tmp:
            spec = LakeSpec(path=tmp, format="iceberg")
            everything["meta"]["keep_snapshots"] = spec.keep_snapshots
            everything["meta"]["keep_snapshots_for"] = duration(spec.keep_snapshots_for)
            lakes = {t: IcebergLake(spec, t, f"{spec.namespace}.{t}") for t in TABLES}
            started = time.perf_counter()
            for commit in range(args.commits + 1):  # commit 0 is the first load
                for table, lake in lakes.items():
                    outcome = commit_once(spark, lake, TABLES[table], commit)
                    outcome.update(iceberg_state(lake), format="iceberg", table=table, run=commit)
                    if commit == 0:
                        everything["first_load"][table] = outcome
                    else:
                        results.append(outcome)
                if commit % 50 == 0 or commit == args.commits:
                    _progress(results, commit, time.perf_counter() - started)
                    save()
    finally:
        resource.stop()


def _progress(results: list[dict[str, Any]], commit: int, elapsed: float) -> None:
    last = [r for r in results if r["run"] == commit]
    shown = ", ".join(
        f"{r['table']} {r['wall']:.2f}s ({r['snapshots']} snapshots, "
        f"metadata {r['metadata_bytes'] / 1024:,.0f} KB)"
        for r in last
    )
    print(f"commit {commit} ({elapsed / 60:.1f} min): {shown}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commits_lake", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--commits", type=int, default=1000, help="commits after the first load")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        type=lambda item: tuple(item.split("=", 1)),
        metavar="KEY=VALUE",
        help="a setting of the session (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=None, help="the results file (JSON)")
    parser.add_argument("--report", type=Path, default=ROOT / "bench" / "COMMITS.md")
    args = parser.parse_args()
    from bench.run import _machine

    started = datetime.now(UTC)
    out = args.out or ROOT / "bench" / "results" / f"commits-lake-{started:%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    everything: dict[str, Any] = {
        "meta": {
            "lake_only": True,
            "runs": args.commits,
            "rows": ROWS,
            "first_rows": FIRST_ROWS,
            "started": started.isoformat(),
            "machine": _machine(),
            "command": " ".join(["python -m bench.commits_lake", *sys.argv[1:]]),
            "load": {"start": round(os.getloadavg()[0], 1)},
            "spark_conf": {**SPARK_CONF, **dict(args.spark_conf)},
        },
        "first_load": {},
        "runs": [],
    }

    def save() -> None:
        """Write the results so far: a run stopped later still leaves the commits it made."""
        meta = everything["meta"]
        meta["load"]["end"] = round(os.getloadavg()[0], 1)
        meta["finished"] = datetime.now(UTC).isoformat()
        meta["seconds"] = round((datetime.now(UTC) - started).total_seconds(), 1)
        out.write_text(json.dumps(everything, indent=1))

    run_commits(args, everything, save)
    save()
    print(f"results: {out}")
    write_commits_report(everything, args.report)
    print(f"report: {args.report}")


if __name__ == "__main__":
    main()
