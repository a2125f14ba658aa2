"""The end-to-end phase: what a user pays per run, each run a fresh process timed from outside.

Every figure is one `dagster asset materialize` (or a peer's one-run process) from launch to exit,
in a project of its own (bench/commands.py) on the same `bench.orders` the in-process scenarios
use; the medians are of `repeats` runs each:

  floor    the same command on an asset that does nothing (bench/noop_defs.py): Dagster's floor
  E1       nothing new, cold (no engine running): the run proves it without starting a JVM
  E2       nothing new, with the shared engine up
  E3       0.1% of the rows changed (half inserted, half updated), cold: the run starts its own
           local Spark session
  E4       the same with the engine up (`incremental-assets engine start` before, `stop` after)
  E5       a merge of 1% updates spread uniformly over the ids, engine up; `E5 cold` without it
           (at most COLD_MERGES runs)
  peers    ADBC -> Parquet and dlt's incremental `sql_table`, a fresh process per run, for
           nothing new (recorded as E1) and the 0.1% delta (recorded as E3)

The project's lake is plain Parquet (`ours`). With `ours_iceberg` among the engines, a second
project on an Iceberg lake (the same tables under the key prefix `iceberg`, sharing the first
one's DAGSTER_HOME and so its engine) runs E1 and E4 too, each run right after the plain one's on
the same source (recorded as engine `ours_iceberg`).

Every timed run reads exactly its own delta: what it doesn't time (first loads, the runs that
catch a table up on changes made for another case, the first run through a freshly started engine,
the engine's start and stop) is recorded with `one_off: true`, outside the medians.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from bench import data
from bench.commands import TABLES, Project

PEERS = ("adbc", "dlt")
ICEBERG = "ours_iceberg"
# A cold merge of 10M rows is the slowest case and no target reads it: three runs are enough.
COLD_MERGES = 3


def run_end_to_end(
    conn: psycopg.Connection,
    rows: int,
    repeats: int,
    pg_url: str,
    jdbc: dict[str, str],
    folder: Path,
    peers: list[str],
) -> list[dict[str, Any]]:
    """Run every case in order (cold first, then with the engine up); one result per process."""
    project = Project.create(folder, pg_url, jdbc)
    iceberg = None
    if ICEBERG in peers:
        iceberg = Project.create(
            folder / "iceberg", pg_url, jdbc, "iceberg", sharing=project, key_prefix=("iceberg",)
        )
    peers = [name for name in PEERS if name in peers]
    results: list[dict[str, Any]] = []

    def record(scenario: str, engine: str, outcome: dict[str, Any], one_off: bool = False) -> None:
        outcome.update(scenario=scenario, engine=engine, one_off=one_off)
        results.append(outcome)
        spark = f", spark: {outcome['spark']}" if outcome.get("spark") else ""
        print(
            f"  {scenario} {engine}: {outcome['wall']:.2f}s, {outcome['rows']} rows{spark}",
            flush=True,
        )

    def small_delta() -> None:  # 0.1%: half new ids, half updates spread over the table
        changed = max(1, round(rows * 0.001))
        data.apply_changes(
            conn, rows, inserted=changed // 2, updated=changed - changed // 2, recent=False
        )

    def merge_delta() -> None:  # 1% updates, uniform: every bucket of the merge table is touched
        data.apply_changes(conn, rows, inserted=0, updated=max(1, rows // 100), recent=False)

    if project.engine_up():
        raise RuntimeError(f"an engine is already running under {project.home}")
    print("end to end, cold (no engine running):", flush=True)
    record("first load", "ours", project.materialize(*TABLES), one_off=True)
    if iceberg is not None:
        record("first load", ICEBERG, iceberg.materialize("orders"), one_off=True)
    if "dlt" in peers:  # dlt's incremental pipeline needs its own first load
        record("first load", "dlt", project.peer("dlt", ""), one_off=True)
    record("floor first", "noop", project.noop(), one_off=True)
    for _ in range(repeats):  # interleaved, so that the machine's drift hits all alike
        since = data.newest(conn)
        record("floor", "noop", project.noop())
        record("E1", "ours", project.materialize("orders"))
        if iceberg is not None:
            record("E1", ICEBERG, iceberg.materialize("orders"))
        for name in peers:
            record("E1", name, project.peer(name, since))
    for _ in range(repeats):
        since = data.newest(conn)
        small_delta()
        record("E3", "ours", project.materialize("orders"))
        for name in peers:
            record("E3", name, project.peer(name, since))
    record("catch-up", "ours", project.materialize("orders_merge"), one_off=True)
    for _ in range(min(repeats, COLD_MERGES)):
        merge_delta()
        record("E5 cold", "ours", project.materialize("orders_merge"))

    print("end to end, engine up:", flush=True)
    record("engine start", "engine", project.engine("start"), one_off=True)
    try:
        if not project.engine_up():
            raise RuntimeError("`incremental-assets engine start` returned, but no engine is up")
        # The first run through a new engine loads the JDBC driver and warms the JIT; it also
        # reads the updates made for E5 cold.
        record("E4 first", "ours", project.materialize("orders"), one_off=True)
        if iceberg is not None:  # its first run through the engine catches up on E3's changes
            record("E4 first", ICEBERG, iceberg.materialize("orders"), one_off=True)
        for _ in range(repeats):
            record("E2", "ours", project.materialize("orders"))
        for _ in range(repeats):
            small_delta()
            record("E4", "ours", project.materialize("orders"))
            if iceberg is not None:
                record("E4", ICEBERG, iceberg.materialize("orders"))
        record("E5 first", "ours", project.materialize("orders_merge"), one_off=True)
        for _ in range(repeats):
            merge_delta()
            record("E5", "ours", project.materialize("orders_merge"))
    finally:
        record("engine stop", "engine", project.engine("stop"), one_off=True)
    return results
