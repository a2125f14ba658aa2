"""Many rows sharing the boundary cursor value, across runs and across parallel partitions."""

from __future__ import annotations

import re

from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema

T = "TIMESTAMPTZ '2025-01-01 12:00:00+00'"


PARTITIONS = {"rows_per_partition": 200, "max_partitions": 4}
DEFAULTS = {
    "name": "events",
    "mode": "append",
    "cursor": "at",
    "primary_key": ["id"],
    "transaction_cap": False,
}


def test_tied_rows_are_neither_lost_nor_loaded_twice(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz NOT NULL)")
    pg.execute(f"INSERT INTO events SELECT i, {T} FROM generate_series(1, 1000) i")
    pg.execute(
        f"INSERT INTO events SELECT i, {T} - INTERVAL '1 second' FROM generate_series(1001, 1010) i"
    )
    loads.configure(pg, DEFAULTS, source=PARTITIONS)

    first = loads.run()
    # More rows land on the same value after the first run, from another connection.
    pg.execute(f"INSERT INTO events SELECT i, {T} FROM generate_series(1011, 1500) i")
    pg.execute(f"INSERT INTO events VALUES (1501, {T} + INTERVAL '1 second')")
    second = loads.run()
    third = loads.run()

    assert first.success and second.success and third.success
    assert first.metadata["boundary_rows"] == 1000
    assert (
        first.metadata["rows_written"],
        second.metadata["rows_written"],
        third.metadata["rows_written"],
    ) == (1010, 491, 0)
    versions = loads.rows(["id", "at"])
    assert len(versions) == len(set(versions)) == 1501


def test_an_unusually_large_tie_is_reported(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz NOT NULL)")
    pg.execute(f"INSERT INTO events SELECT i, {T} FROM generate_series(1, 10001) i")

    loads.configure(pg, DEFAULTS, source=PARTITIONS)
    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["boundary_rows"] == 10001
    assert (
        "10001 rows share the cursor value 2025-01-01T12:00:00.000000+00:00"
        in run.metadata["warnings"]
    )


def test_ties_on_the_edges_of_cursor_ranges_are_read_once_by_one_partition(
    loads: Loads,
    pg: Schema,
) -> None:
    """Without an integer key the read is split on the cursor; every cut falls on a tied value."""
    pg.execute("CREATE TABLE events (key text PRIMARY KEY, at timestamptz NOT NULL)")
    loads.configure(pg, DEFAULTS, primary_key=["key"], source=PARTITIONS)
    log = pg.server.log_text

    def add(run: int, offsets: range) -> None:
        # 300 rows on each of a few consecutive microseconds: 4 partitions of one value each.
        for offset in offsets:
            pg.execute(
                f"INSERT INTO events SELECT 'r{run}-{offset}-' || i, "
                f"{T} + INTERVAL '{offset} microseconds' "
                "FROM generate_series(1, 300) i"
            )

    def cuts(since: int) -> list[int]:
        """Where the partitions of the reads logged since `since` split the cursor's range."""
        lines = [line for line in log()[since:].splitlines() if pg.name in line]
        reads = [line for line in lines if re.search(r"\) AS src\s+WHERE", line)]
        return sorted(int(c) for line in reads for c in re.findall(r'"at" <=? (\d+)', line))

    add(1, range(4))
    first = loads.run()
    seen = len(log())
    add(2, range(3, 7))  # more ties on the last cursor value, then new values
    second = loads.run()
    third = loads.run()

    assert first.success and second.success and third.success
    assert (
        first.metadata["rows_written"],
        second.metadata["rows_extracted"],
        second.metadata["rows_written"],
        third.metadata["rows_written"],
    ) == (1200, 1500, 1200, 0)
    keys = loads.rows(["key"])
    assert len(keys) == len(set(keys)) == 2400
    # Four partitions in the second run, each cut on a tied value (which only one side reads).
    micros = pg.query(f"SELECT CAST(EXTRACT(EPOCH FROM {T}) * 1000000 AS BIGINT)")[0][0]
    assert cuts(seen) == [micros + 4, micros + 5, micros + 6]
