"""A50: what many merges cost the table's readers, and what keeping them fast costs the runs.

On each Iceberg engine (`ours_iceberg`, and `ours_iceberg_s3` when it runs), in the engine's
worker, after the S4 scenarios:

  A50 setup           the merge table loaded whole again (a full refresh): a fresh snapshot
  A50                 `merges` runs (50 by default), each after 1% of the rows were updated,
                      spread uniformly over the ids and a different 1% each time (ids at another
                      offset of the stride), so the merges' deletes pile up over the table's
                      files; each run as a user's, maintenance on its default schedule after
                      its commit (what ran, and its seconds, are in the run's `maintenance`)
  A50 scan            the whole table read `repeats` times, every row and column with the
                      deletes applied: by Spark (into its `noop` sink) and by PyIceberg
                      (`load_table`, then `scan().to_arrow()`)
  A50 compact         the same table compacted whole by the benchmark (every data file
                      rewritten with its deletes applied, then the manifests): the reference
  A50 scan compacted  the reads again, on the compacted table

The target: each scan after the merges at most 1.5x the same scan of the compacted table. The
worker records what the table holds after every step (`table`: files, delete files, snapshots,
the metadata file's size, the objects under its location).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import psycopg

from bench import data
from bench.engines import ICEBERG

SCENARIOS = ("A50 setup", "A50", "A50 scan", "A50 compact", "A50 scan compacted")
TARGET = 1.5  # a scan after the merges, against the compacted table's


class Runs(Protocol):
    def run(self, op: str, since: str, **args: Any) -> dict[str, Any]: ...


Record = Callable[[str, str, dict[str, Any]], None]


def run_read_amplification(
    conn: psycopg.Connection,
    rows: int,
    merges: int,
    repeats: int,
    workers: Mapping[str, Runs],
    record: Record,
) -> None:
    """The phase on every Iceberg engine among `workers`, interleaved merge by merge."""
    engines = [name for name in ICEBERG if name in workers]
    if not engines:
        return
    for name in engines:
        record("A50 setup", name, workers[name].run("merge_setup", ""))
    for merge in range(1, merges + 1):
        since = data.newest(conn)
        updated = max(1, rows // 100)
        data.apply_changes(conn, rows, inserted=0, updated=updated, recent=False, offset=merge)
        for name in engines:
            outcome = workers[name].run("merge", since)
            outcome["merge"] = merge
            record("A50", name, outcome)
    for name in engines:
        record("A50 scan", name, workers[name].run("scan", "", repeats=repeats))
        record("A50 compact", name, workers[name].run("compact", ""))
        record("A50 scan compacted", name, workers[name].run("scan", "", repeats=repeats))
