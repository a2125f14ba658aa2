"""Run the model-based machine for as long as asked:
`python -m incremental_assets_tests.model.soak`.

    python -m incremental_assets_tests.model.soak --seed 42 --steps 2000
    python -m incremental_assets_tests.model.soak --database mariadb --steps 300
    python -m incremental_assets_tests.model.soak --database files --steps 150
    python -m incremental_assets_tests.model.soak --format iceberg --steps 150
    python -m incremental_assets_tests.model.soak --format iceberg --capture log --steps 150
    python -m incremental_assets_tests.model.soak --format iceberg --capture log --database mariadb
    make soak SEED=42 STEPS=2000 FORMAT=iceberg
    make soak STEPS=2000 FORMAT=iceberg CAPTURE=log DATABASE=mariadb

It starts its own PostgreSQL or MariaDB (or, with --database files, writes folders of Parquet
files: the source with maps and arrays of structs), a local SparkSession and (unless --no-kills)
a Spark Connect server for the runs it kills and the runs it makes through `dagster asset
materialize` (--kills, --cli-runs), then runs batches of examples until STEPS steps have run.
Every Dagster home holds the project's dagster.yaml (--instance), and a run that hasn't ended
after --run-timeout seconds fails its example as hung. Every example may also change its table's
settings between runs (a merge table's source key recreated too, --key-changes) and disturb its
lake (removed, moved, copied with its catalog, restored from a copy, a new Dagster instance), as
often as --settings-changes and --lake-events allow; on an Iceberg lake, a merge table draws its
`merge_writes` (--merge-writes; the settings changes switch it), and its maintenance runs
between runs (after a run killed past its commit too) as often as --maintenance allows. With
--capture log (PostgreSQL or MariaDB, an Iceberg lake) the tables are captured from the server's
log instead (`log_machine.py`: merge and append as --modes draws them, --kills, --schema-changes,
--truncates, --key-types, --lake-events (of --lake-event-kinds, and another writer's commit),
--maintenance, --purges (MariaDB's binary logs purged under the recorded position), --log-limits:
the most changes a run in this process reads, drawn per example; the --no-... flags keep clear of
the failures test_regressions.py holds, to look past them; the cursor machine's other options
don't apply). Batch i uses the seed SEED+i and prints it first
(on a plain Parquet lake, odd seeds patch merged buckets one job each, even seeds shuffle them,
so both ways are tried); a failure prints the shrunk sequence of steps and the command that
replays it (the same batch, alone, from its seed).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from incremental_assets.config import SparkSpec
from incremental_assets.jvm import jar_folder
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.model.lake import LAKE_FORMATS
from incremental_assets_tests.model.lake_events import LAKE_EVENTS
from incremental_assets_tests.model.log_machine import (
    LOG_LAKE_EVENTS,
    LOG_MODES,
    LogEnv,
    run_log_machine,
)
from incremental_assets_tests.model.machine import MODES, Env, run_machine
from incremental_assets_tests.model.runner import RUN_TIMEOUT, SHIPPED_INSTANCE, Runner
from incremental_assets_tests.model.source_files import FilesRoot
from incremental_assets_tests.model.table import CURSOR_TYPES, DATABASES, KEY_TYPES, MERGE_WRITES
from incremental_assets_tests.support.mariadb import mariadb_server
from incremental_assets_tests.support.postgres import postgres_server
from incremental_assets_tests.support.spark import (
    TEST_SPARK_CONF,
    class_archive,
    connect_server,
    jvm_options,
)

# The types of the key's id column (PostgreSQL's names), by the names the config gives such types.
KEY_NAMES = dict(
    zip(KEY_TYPES, ("integer", "decimal", "string", "timestamp", "bigint"), strict=True)
)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.capture == "log":
        if args.database == "files" or args.format != "iceberg":
            raise SystemExit(
                "soak: --capture log needs --database postgres or mariadb, and --format iceberg"
            )
        if args.modes == ",".join(MODES):
            args.modes = ",".join(LOG_MODES)
        if args.lake_event_kinds == ",".join(LAKE_EVENTS):
            args.lake_event_kinds = ",".join(LOG_LAKE_EVENTS)
        unknown = set(args.modes.split(",")) - set(LOG_MODES)
        if unknown:
            raise SystemExit(f"soak: log tables are {list(LOG_MODES)}, not {sorted(unknown)}")
    first_seed = args.seed if args.seed is not None else random.randrange(2**32)
    os.environ["TZ"] = args.timezone
    time.tzset()
    if "SPARK_SUBMIT_OPTS" not in os.environ:  # as the suite's JVMs
        archive = class_archive(sys.executable, jar_folder().parent / "class-archives")
        os.environ["SPARK_SUBMIT_OPTS"] = jvm_options(archive)
    print(
        f"soak: seed {first_seed}, {args.steps} steps, {args.database}, {args.format} lake, "
        f"TZ={args.timezone}",
        flush=True,
    )
    started = time.monotonic()
    with ExitStack() as stack:
        # Every JVM (this session, the Connect server, the runs) gets both databases' drivers
        # from the jar folder (TEST_SPARK_CONF, TEST_JVM_CONF).
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ia-soak-")))
        if args.database == "mariadb":
            server: Any = stack.enter_context(mariadb_server())
        elif args.database == "files":  # folders of Parquet files, in the soak's own folder
            server = FilesRoot(workdir / "landing")
        else:
            server = stack.enter_context(postgres_server())
        connect = None if args.no_kills else stack.enter_context(connect_server())
        spark = IncrementalSparkResource.from_spec(
            SparkSpec(master="local[2]", conf=TEST_SPARK_CONF)
        )
        stack.callback(spark.spark_session.stop)
        log_env = LogEnv(
            server,
            spark,
            workdir,
            connect=connect,
            modes=tuple(args.modes.split(",")),
            key_types=_types(KEY_NAMES, args.key_types),
            kills=args.kills,
            schema_changes=args.schema_changes,
            truncates=args.truncates,
            kill_full_refreshes=not args.no_full_refresh_kills,
            drops_with_changes_waiting=not args.no_drops_with_changes_waiting,
            adds_with_changes_waiting=not args.no_adds_with_changes_waiting,
            limits=tuple(None if n == "none" else int(n) for n in args.log_limits.split(",")),
            lake_events=args.lake_events,
            lake_event_kinds=_choices(LOG_LAKE_EVENTS, args.lake_event_kinds, "lake events"),
            purges=args.purges,
            maintenance=args.maintenance,
            instance=None if args.instance == "none" else Path(args.instance),
            run_timeout=args.run_timeout,
            verbose=True,
        )
        env = Env(
            server,
            spark,
            workdir,
            connect=connect,
            modes=tuple(args.modes.split(",")),
            cursor_types=_types(CURSOR_TYPES, args.cursor_types),
            key_types=_types(KEY_NAMES, args.key_types),
            lake_format=args.format,
            settings_changes=args.settings_changes,
            schema_changes=args.schema_changes,
            lake_events=args.lake_events,
            lake_event_kinds=_choices(
                LOG_LAKE_EVENTS if args.capture == "log" else LAKE_EVENTS,
                args.lake_event_kinds,
                "lake events",
            ),
            merge_writes=_choices(MERGE_WRITES, args.merge_writes, "merge_writes")
            if args.merge_writes
            else (),
            maintenance=args.maintenance,
            keep_snapshots=tuple(int(n) for n in args.keep_snapshots.split(",")),
            kills=args.kills,
            cli_runs=args.cli_runs,
            key_changes=args.key_changes,
            shapes=not args.no_shapes,
            instance=None if args.instance == "none" else Path(args.instance),
            run_timeout=args.run_timeout,
            verbose=True,
        )
        batch = 0
        while (log_env.steps if args.capture == "log" else env.steps) < args.steps:
            seed_value = first_seed + batch
            # Odd seeds patch each touched bucket alone, as plain Parquet merges do once buckets
            # are large (an Iceberg merge is one MERGE INTO either way).
            patch = seed_value % 2 == 1
            Runner.lake_settings = {"merge_tuning": {"patch_min_bytes": 0}} if patch else {}
            how = (
                ""
                if args.format == "iceberg"
                else f", {'patching' if patch else 'shuffling'} merges"
            )
            steps = log_env.steps if args.capture == "log" else env.steps
            print(f"soak: batch {batch}, seed {seed_value}{how} ({steps} steps so far)", flush=True)
            try:
                if args.capture == "log":
                    run_log_machine(
                        log_env,
                        seed_value=seed_value,
                        examples=args.examples_per_batch,
                        steps=args.steps_per_example,
                        shrink=not args.no_shrink,
                    )
                    batch += 1
                    continue
                run_machine(
                    env,
                    seed_value=seed_value,
                    examples=args.examples_per_batch,
                    steps=args.steps_per_example,
                    shrink=not args.no_shrink,
                )
            except BaseException:
                print(f"soak: FAILED in batch {batch}; replay with: {_replay(args, seed_value)}")
                raise
            batch += 1
    minutes = (time.monotonic() - started) / 60
    done = log_env if args.capture == "log" else env
    print(f"soak: passed, {done.steps} steps in {done.examples} examples, {minutes:.1f} min")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="the first batch's seed (default: random)")
    parser.add_argument("--steps", type=int, default=500, help="steps to run, over every example")
    parser.add_argument("--steps-per-example", type=int, default=30)
    parser.add_argument("--examples-per-batch", type=int, default=4)
    parser.add_argument("--database", choices=DATABASES, default="postgres")
    parser.add_argument("--format", choices=LAKE_FORMATS, default="parquet", help="the lake's")
    parser.add_argument(
        "--capture",
        choices=("cursor", "log"),
        default="cursor",
        help="how tables are captured: a cursor column, or (Iceberg) the database server's log",
    )
    parser.add_argument(
        "--schema-changes", type=int, default=3, help="schema changes per example, at most"
    )
    parser.add_argument(
        "--truncates", type=int, default=1, help="log tables: TRUNCATEs per example, at most"
    )
    parser.add_argument(
        "--log-limits",
        default="none,5,12",
        help="log tables: comma-separated most changes a run in this process reads, drawn per "
        "example ('none': the product's own)",
    )
    parser.add_argument(
        "--purges",
        type=int,
        default=1,
        help="log tables on MariaDB: binary logs purged under the recorded position per example",
    )
    parser.add_argument(
        "--no-full-refresh-kills",
        action="store_true",
        help="log tables: kill no full refresh (a known failure: test_regressions.py)",
    )
    parser.add_argument(
        "--no-adds-with-changes-waiting",
        action="store_true",
        help="log tables: read the changes waiting before a column is added (a known failure "
        "with --log-limits: test_regressions.py)",
    )
    parser.add_argument(
        "--no-drops-with-changes-waiting",
        action="store_true",
        help="log tables: read the changes waiting before a column is dropped (a known failure: "
        "test_regressions.py)",
    )
    parser.add_argument(
        "--settings-changes", type=int, default=3, help="changes of settings per example, at most"
    )
    parser.add_argument("--lake-events", type=int, default=2, help="per example, at most")
    parser.add_argument(
        "--lake-event-kinds",
        default=",".join(LAKE_EVENTS),
        help="comma-separated kinds of lake events to draw (log tables: also "
        f"{LOG_LAKE_EVENTS[-1]}, and all by default)",
    )
    parser.add_argument(
        "--merge-writes",
        default=",".join(MERGE_WRITES),
        help="Iceberg merge tables: comma-separated merge_writes values to draw besides unset "
        "('' for none)",
    )
    parser.add_argument(
        "--maintenance",
        type=int,
        default=2,
        help="Iceberg: maintenance runs between runs per example, at most",
    )
    parser.add_argument(
        "--keep-snapshots",
        default="1,2,3",
        help="Iceberg: comma-separated lake.keep_snapshots values maintenance sets (1 to 3)",
    )
    parser.add_argument(
        "--kills",
        type=int,
        default=1,
        help="killed runs per example, at most (not with --no-kills)",
    )
    parser.add_argument(
        "--cli-runs",
        type=int,
        default=3,
        help="runs per example through `dagster asset materialize`, at most (not with --no-kills)",
    )
    parser.add_argument(
        "--key-changes",
        type=int,
        default=1,
        help="merge tables: recreated source keys per example, at most (deletes in its window)",
    )
    parser.add_argument(
        "--no-shapes",
        action="store_true",
        help="PostgreSQL tables without their array and composite columns",
    )
    parser.add_argument(
        "--instance",
        default=str(SHIPPED_INSTANCE),
        help="the dagster.yaml every Dagster home gets ('none': none, so no pools)",
    )
    parser.add_argument(
        "--run-timeout",
        type=float,
        default=RUN_TIMEOUT,
        help="seconds a run may take before it fails the example as hung",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes to draw")
    parser.add_argument(
        "--cursor-types",
        default=",".join(CURSOR_TYPES.values()),
        help="comma-separated cursor types to draw, as the config names them (string, date...)",
    )
    parser.add_argument(
        "--key-types",
        default=",".join(KEY_NAMES.values()),
        help=(
            f"comma-separated types of the key's id column to draw: {', '.join(KEY_NAMES.values())}"
        ),
    )
    parser.add_argument("--no-kills", action="store_true", help="no runs killed in a subprocess")
    parser.add_argument("--no-shrink", action="store_true", help="report failures unshrunk")
    parser.add_argument(
        "--timezone",
        default="Europe/Paris",
        help=(
            "TZ for this process, the database server and the JVMs "
            "(the loads must not depend on it)"
        ),
    )
    return parser


def _types(names: dict[str, str], chosen: str) -> tuple[str, ...]:
    """The machine's names (PostgreSQL's types) of the types chosen by their config names."""
    wanted = _choices(tuple(names.values()), chosen, "types")
    return tuple(kind for kind, name in names.items() if name in wanted)


def _choices(known: tuple[str, ...], chosen: str, what: str) -> tuple[str, ...]:
    """The comma-separated `chosen`, each one of `known`."""
    wanted = tuple(chosen.split(","))
    unknown = set(wanted) - set(known)
    if unknown:
        raise SystemExit(f"soak: unknown {what} {sorted(unknown)}; choose from {list(known)}")
    return wanted


def _replay(args: argparse.Namespace, seed_value: int) -> str:
    """The command that runs this batch alone again (batch i with seed S+i is batch 0 of S+i)."""
    steps = args.examples_per_batch * args.steps_per_example
    defaults = _parser().parse_args([])
    changed = [
        name
        for name in (
            "steps_per_example",
            "examples_per_batch",
            "database",
            "format",
            "capture",
            "schema_changes",
            "truncates",
            "purges",
            "no_full_refresh_kills",
            "no_drops_with_changes_waiting",
            "no_adds_with_changes_waiting",
            "log_limits",
            "modes",
            "cursor_types",
            "key_types",
            "settings_changes",
            "lake_events",
            "lake_event_kinds",
            "merge_writes",
            "maintenance",
            "keep_snapshots",
            "kills",
            "cli_runs",
            "key_changes",
            "no_shapes",
            "instance",
            "run_timeout",
            "no_kills",
            "timezone",
        )
        if getattr(args, name) != getattr(defaults, name)
    ]
    if not changed:
        return f"make soak SEED={seed_value} STEPS={steps}"
    options = [
        f"--seed {seed_value}",
        f"--steps {steps}",
        f"--steps-per-example {args.steps_per_example}",
        f"--examples-per-batch {args.examples_per_batch}",
        f"--database {args.database}",
        f"--format {args.format}",
        f"--capture {args.capture}",
        f"--schema-changes {args.schema_changes}",
        f"--truncates {args.truncates}",
        f"--purges {args.purges}",
        f"--log-limits {args.log_limits}",
        f"--modes {args.modes}",
        f"--cursor-types {args.cursor_types}",
        f"--key-types {args.key_types}",
        f"--settings-changes {args.settings_changes}",
        f"--lake-events {args.lake_events}",
        f"--lake-event-kinds {args.lake_event_kinds}",
        f"--merge-writes '{args.merge_writes}'",
        f"--maintenance {args.maintenance}",
        f"--keep-snapshots {args.keep_snapshots}",
        f"--kills {args.kills}",
        f"--cli-runs {args.cli_runs}",
        f"--key-changes {args.key_changes}",
        f"--instance {args.instance}",
        f"--run-timeout {args.run_timeout:g}",
        f"--timezone {args.timezone}",
        *(["--no-kills"] if args.no_kills else []),
        *(["--no-shapes"] if args.no_shapes else []),
        *(["--no-full-refresh-kills"] if args.no_full_refresh_kills else []),
        *(["--no-drops-with-changes-waiting"] if args.no_drops_with_changes_waiting else []),
        *(["--no-adds-with-changes-waiting"] if args.no_adds_with_changes_waiting else []),
    ]
    return f"python -m incremental_assets_tests.model.soak {' '.join(options)}"


if __name__ == "__main__":
    sys.exit(main())
