"""The model-based test within `make test`'s budget: a few short examples per mode family, on
PostgreSQL and on MariaDB, and families whose settings change and whose lake is disturbed between
runs, on a plain Parquet and on an Iceberg lake, each on both databases; a files source (maps
and arrays of structs) on an Iceberg lake; and `capture: log` tables on PostgreSQL and on MariaDB
into Iceberg, merge and append (`log_machine.py`), their lake disturbed and maintained between
runs.

Fixed seeds keep it reproducible; `make soak` runs the same machine for as long as asked (and
with runs killed in subprocesses in every family). A failure prints the steps that reproduce it,
not shrunk here to stay within the budget (the soak shrinks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.lake_events import LAKE_EVENTS
from incremental_assets_tests.model.log_machine import LOG_LAKE_EVENTS, LogEnv, run_log_machine
from incremental_assets_tests.model.machine import MODES, Env, run_machine
from incremental_assets_tests.model.runner import Runner
from incremental_assets_tests.model.source_files import FilesRoot
from incremental_assets_tests.model.table import (
    CURSOR_TYPES,
    KEY_TYPES,
    MERGE_WRITES,
    TableConfig,
    collated,
)
from incremental_assets_tests.support.mariadb import MariaDbServer, fresh_database
from incremental_assets_tests.support.postgres import PostgresServer


@dataclass(frozen=True)
class Family:
    database: str  # the server fixture: postgres | mariadb; files: a folder of Parquet files
    modes: tuple[str, ...]
    seed: int
    examples: int
    steps: int  # per example
    kills: int = 0  # killed runs per example (they need the Spark Connect server)
    cursor_types: tuple[str, ...] = tuple(CURSOR_TYPES)
    key_types: tuple[str, ...] = KEY_TYPES
    # Merges patch each touched bucket in a job of its own, as they do once buckets' files are
    # large; on these tiny tables they otherwise rewrite them in one shuffle.
    patch: bool = False
    lake_format: str = "parquet"
    settings_changes: int = 0  # per example
    lake_events: int = 0  # per example
    lake_event_kinds: tuple[str, ...] = LAKE_EVENTS
    merge_writes: tuple[str, ...] = ()  # Iceberg merge tables: the values drawn besides unset
    maintenance: int = 0  # Iceberg: maintenance between runs per example
    keep_snapshots: tuple[int, ...] = (1, 2, 3)  # the retentions maintenance sets
    # Runs through `dagster asset materialize` per example (with kills: the Connect server).
    cli_runs: int = 0
    # cursor: the cursor machine; log: `capture: log` tables (`log_machine.py`; an Iceberg
    # lake, merge and append, as `modes` says).
    capture: str = "cursor"
    purges: int = 0  # log tables on MariaDB: binary logs purged under the position per example


# Iceberg families: merge tables draw merge_writes (settings changes switch it), and maintenance
# runs between runs, keeping 1 to 3 snapshots.
ICEBERG_UPKEEP: dict[str, Any] = {"merge_writes": MERGE_WRITES, "maintenance": 2}

# `capture: log` families: runs killed, an Iceberg lake disturbed and maintained once at most.
LOG_FAMILY: dict[str, Any] = {
    "kills": 1,
    "lake_format": "iceberg",
    "capture": "log",
    "lake_events": 1,
    "maintenance": 1,
}

# Under a minute each on two busy cores (make test's whole budget is 15 minutes); only the
# PostgreSQL merge families and the Iceberg one start the Spark Connect server killed runs (and
# runs through `dagster asset materialize`) need, and one of them patches merged buckets a job
# each. On MariaDB, one family draws every mode and type, the other text cursors and keys only:
# the values that differ only in case or trailing spaces. Every PostgreSQL table holds arrays and
# composites; keys are drawn among every type, sparse bigints included.
FAMILIES = {
    "merge": Family("postgres", ("merge",), 20251101, 1, 14, kills=1),
    "merge_patch": Family("postgres", ("merge",), 20251104, 1, 14, kills=1, patch=True),
    "append": Family("postgres", ("append",), 20251102, 2, 14),
    "full_refresh": Family("postgres", ("full_refresh",), 20251103, 1, 10),
    "mariadb": Family("mariadb", MODES, 20251115, 1, 12),
    "mariadb_text": Family(
        "mariadb", ("merge", "append"), 20251116, 1, 12, cursor_types=("text",), key_types=("text",)
    ),
    # Settings changed and the lake disturbed between runs. Hypothesis's first example is its
    # simplest (a run of inserts), so these take two or three: a key named again and again, a
    # mode changed, transactions left open (PostgreSQL); a lake restored (MariaDB).
    "settings": Family("postgres", MODES, 20251142, 3, 14, settings_changes=3, lake_events=2),
    "mariadb_settings": Family(
        "mariadb", MODES, 20251122, 2, 12, settings_changes=3, lake_events=2
    ),
    # The same on an Iceberg lake, on each database: the source's key recreated, a run killed
    # past its commit, then the table's maintenance and the run that recovers, a run through
    # `dagster asset materialize`, a lake moved (PostgreSQL); a lake restored, maintenance, a
    # soft delete (MariaDB).
    "iceberg": Family(
        "postgres",
        MODES,
        20251131,
        3,
        12,
        kills=1,
        cli_runs=1,
        lake_format="iceberg",
        settings_changes=2,
        lake_events=2,
        **ICEBERG_UPKEEP,
    ),
    "mariadb_iceberg": Family(
        "mariadb",
        MODES,
        20251153,
        3,
        12,
        lake_format="iceberg",
        settings_changes=2,
        lake_events=2,
        **ICEBERG_UPKEEP,
    ),
    # A folder of Parquet files, the one source with maps and arrays of structs, on an Iceberg
    # lake: its maps rewritten in another entry order (no change), the key recreated with a soft
    # and a hard delete in the same window.
    "files": Family(
        "files",
        ("merge", "append"),
        20251130,
        2,
        12,
        lake_format="iceberg",
        settings_changes=1,
        **ICEBERG_UPKEEP,
    ),
    # `capture: log` tables (PostgreSQL, Iceberg): hard deletes, updates that leave `cur` as it
    # was, key changes, TRUNCATE, transactions left open across runs, columns added, widened and
    # dropped (refused, then a full refresh), a run killed at a pause point, runs that stop at a
    # limit of changes. The first example is Hypothesis's simplest (a few columns added, rows
    # inserted, keys changed), cheap once Spark runs; the others are drawn: a transaction
    # committed while a run waits at its session, a run stopped at its limit, a TRUNCATE
    # (merge); a column dropped, refused, rebuilt (append). Each disturbs its lake once and
    # maintains it once at most: a new Dagster instance; the lake removed after a killed run,
    # refused, rebuilt, then maintained (merge); the lake removed, and copied (append).
    # MariaDB's binary log: a new Dagster instance, keys changed (merge); another writer's
    # delete refused, a column dropped, a TRUNCATE (append); the lake moved, refused, rebuilt.
    "log_merge": Family("postgres", ("merge",), 20251213, 3, 10, **LOG_FAMILY),
    "log_append": Family("postgres", ("append",), 20251214, 3, 10, **LOG_FAMILY),
    "log_mariadb": Family("mariadb", ("merge", "append"), 20251215, 3, 10, **LOG_FAMILY, purges=1),
}


@pytest.mark.parametrize(
    "family",
    # Families with killed runs share the Spark Connect server of the tests in its group.
    [
        pytest.param(name, marks=pytest.mark.xdist_group("connect")) if f.kills else name
        for name, f in FAMILIES.items()
    ],
)
def test_random_sequences_keep_the_lake_true_to_the_source(
    family: str,
    tmp_path: Path,
    spark_resource: IncrementalSparkResource,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = FAMILIES[family]
    if f.patch:  # plain merges patch each touched bucket, as they do once buckets are large
        monkeypatch.setattr(Runner, "lake_settings", {"merge_tuning": {"patch_min_bytes": 0}})
    server = (
        FilesRoot(tmp_path / "landing")
        if f.database == "files"
        else request.getfixturevalue(f.database)
    )
    connect = request.getfixturevalue("connect") if f.kills else None
    if f.capture == "log":
        assert isinstance(server, PostgresServer | MariaDbServer)
        # Runs in this process read at most 8 changes in some examples: they stop part way.
        log_env = LogEnv(
            server,
            spark_resource,
            tmp_path,
            connect=connect,
            modes=f.modes,
            kills=f.kills,
            limits=(None, 8),
            lake_events=f.lake_events,
            lake_event_kinds=LOG_LAKE_EVENTS,
            purges=f.purges,
            maintenance=f.maintenance,
        )
        log_env.verbose = True
        run_log_machine(
            log_env, seed_value=f.seed, examples=f.examples, steps=f.steps, shrink=False
        )
        return
    env = Env(
        server,
        spark_resource,
        tmp_path,
        connect=connect,
        modes=f.modes,
        cursor_types=f.cursor_types,
        key_types=f.key_types,
        kills=f.kills,
        lake_format=f.lake_format,
        settings_changes=f.settings_changes,
        lake_events=f.lake_events,
        lake_event_kinds=f.lake_event_kinds,
        merge_writes=f.merge_writes,
        maintenance=f.maintenance,
        keep_snapshots=f.keep_snapshots,
        cli_runs=f.cli_runs,
        verbose=True,
    )
    run_machine(env, seed_value=f.seed, examples=f.examples, steps=f.steps, shrink=False)


def test_the_model_orders_text_as_mariadb_does(mariadb: MariaDbServer) -> None:
    """`collated`, which the reference model compares MariaDB's text with, agrees with the server
    on the spellings the machine writes: equal where it says equal, in the order it sorts."""
    config = TableConfig("mariadb", "merge", ("id",), "text", "text")
    spellings = [
        f"{c}{n:09d}{' ' * pad}" for n in (9, 10, 100) for c in "cC" for pad in (0, 1, 2)
    ] + [f"{k}{n:05d}{' ' * pad}" for n in (1, 2) for k in "kK" for pad in (0, 2)]
    with fresh_database(mariadb) as db:
        db.execute("CREATE TABLE s (v varchar(100) NOT NULL)")
        db.execute("INSERT INTO s VALUES " + ", ".join(["(%s)"] * len(spellings)), params=spellings)
        pairs = db.query("SELECT a.v, b.v, a.v = b.v, a.v < b.v FROM s a, s b")
    wrong = [
        (a, b, equal, less)
        for a, b, equal, less in pairs
        if (collated(config, a) == collated(config, b)) != bool(equal)
        or (collated(config, a) < collated(config, b)) != bool(less)
    ]
    assert not wrong, wrong[:10]
