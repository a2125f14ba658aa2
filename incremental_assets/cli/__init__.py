"""`incremental-assets` (or `python -m incremental_assets`): operate the tables from a shell.

    incremental-assets validate [--connect]
    incremental-assets status [--json] [--history] [TABLE ...]
    incremental-assets cursor set TABLE VALUE --reason TEXT
    incremental-assets cursor reset TABLE --reason TEXT
    incremental-assets run TABLE ... [--full]
    incremental-assets free-slots RUN_ID
    incremental-assets backfill TABLE --from VALUE --to VALUE
    incremental-assets engine start|stop|restart|status
    incremental-assets lake convert TABLE --reason TEXT
    incremental-assets cdc drop TABLE [--reason TEXT]
    incremental-assets jars fetch [--all] | jars path

Every command reads the same configuration as Dagster (`--config`, $INCREMENTAL_ASSETS_CONFIG or
./incremental_assets.yaml) and the instance in $DAGSTER_HOME (`jars` needs no instance, and
`jars fetch --all` and `jars path` no configuration). Errors print one message, no
traceback, and exit with status 1. The commands are thin: the work is done by the same modules
the assets use.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from incremental_assets.cli import capture, cursors, engine, jars, lake, runs, status
from incremental_assets.errors import IncrementalAssetsError

# How a cursor value is written on the command line, for each cursor type.
CURSOR_VALUE = (
    "written as the table's cursor type: timestamptz 2025-06-01T00:00:00Z (an offset such as "
    "+02:00 instead of Z; none means UTC), timestamp 2025-06-01T00:00:00 (no offset), date "
    "2025-06-01, integer 1000, decimal 12.50, string as the column holds it"
)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except IncrementalAssetsError as exc:
        print(f"incremental-assets: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="incremental-assets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--config",
        help=(
            "the configuration file "
            "(default: $INCREMENTAL_ASSETS_CONFIG or ./incremental_assets.yaml)"
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)

    validate = commands.add_parser("validate", help="check the configuration")
    validate.add_argument(
        "--connect",
        action="store_true",
        help="also check each table against its source, without Spark: the source answers, the "
        "table or folder is there, the columns it names exist, the cursor's type is usable",
    )
    validate.set_defaults(handler=status.validate)

    shown = commands.add_parser("status", help="cursor, last run, row counts and mode per table")
    shown.add_argument("tables", nargs="*", metavar="TABLE")
    shown.add_argument("--json", action="store_true", help="machine-readable output")
    shown.add_argument(
        "--history",
        action="store_true",
        help="every materialization, with the lake snapshot it left (Iceberg time travel)",
    )
    shown.set_defaults(handler=status.show_status)

    cursor = commands.add_parser("cursor", help="move a table's cursor by hand").add_subparsers(
        dest="action", required=True
    )
    set_ = cursor.add_parser(
        "set", help="the next run starts from VALUE (a backfill from that point)"
    )
    set_.add_argument("table")
    set_.add_argument("value", help=f"the cursor the next run reads from, {CURSOR_VALUE}")
    set_.add_argument("--reason", required=True, help="why, recorded with the new cursor")
    set_.set_defaults(handler=cursors.set_cursor)
    reset = cursor.add_parser("reset", help="the next run extracts everything")
    reset.add_argument("table")
    reset.add_argument("--reason", required=True, help="why, recorded with the reset")
    reset.set_defaults(handler=cursors.reset_cursor)

    run = commands.add_parser("run", help="materialize tables through the persistent instance")
    run.add_argument("tables", nargs="+", metavar="TABLE")
    run.add_argument("--full", action="store_true", help="full refresh: ignore the stored cursors")
    run.set_defaults(handler=runs.run_tables)

    freeing = commands.add_parser(
        "free-slots",
        help="mark a run that died failed and free the pool slots it holds (refused if it is seen "
        "alive); a later run of its tables frees them itself when it can tell the run is dead",
    )
    freeing.add_argument("run_id", metavar="RUN_ID")
    freeing.set_defaults(handler=runs.free_run_slots)

    backfill = commands.add_parser(
        "backfill",
        help="re-extract [FROM, TO) without moving the cursor",
        description="Re-extract the rows whose cursor is in [FROM, TO) and merge or append them "
        "into the lake, without moving the cursor. For example: incremental-assets backfill "
        "orders --from 2025-06-01T00:00:00Z --to 2025-06-08T00:00:00Z",
    )
    backfill.add_argument("table")
    backfill.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="FROM",
        help=f"the first cursor value to re-extract (included), {CURSOR_VALUE}",
    )
    backfill.add_argument(
        "--to",
        dest="end",
        required=True,
        metavar="TO",
        help="the cursor value to stop before (excluded), written as --from is",
    )
    backfill.set_defaults(handler=runs.run_backfill)
    tables = commands.add_parser(
        "lake", help="the lake's tables: convert a plain Parquet table to Iceberg"
    ).add_subparsers(dest="action", required=True)
    converting = tables.add_parser(
        "convert",
        help="make TABLE's plain Parquet files an Iceberg table in place (lake.format: iceberg), "
        "keeping its cursor and adding no rows",
    )
    converting.add_argument("table")
    converting.add_argument("--reason", default="converted", help="why, recorded with the table")
    converting.set_defaults(handler=lake.convert)
    logged = commands.add_parser(
        "cdc", help="tables captured from the log (capture: log): their replication slots"
    ).add_subparsers(dest="action", required=True)
    dropping = logged.add_parser(
        "drop",
        help="drop TABLE's replication slot and publication, so the server keeps no log for it; "
        "its cursor is reset, and its next run loads it whole and makes them again",
    )
    dropping.add_argument("table")
    dropping.add_argument("--reason", default="slot dropped", help="why, recorded with the table")
    dropping.set_defaults(handler=capture.drop_slot)
    machine = commands.add_parser(
        "engine", help="the shared Spark engine (a Spark Connect server) under DAGSTER_HOME"
    ).add_subparsers(dest="action", required=True)
    for action, handler, text in (
        ("start", engine.start, "start it with the project's spark: settings (or say it is up)"),
        ("stop", engine.stop, "stop it"),
        (
            "restart",
            engine.restart,
            "stop it and start it with the current spark: settings, unless runs are using it",
        ),
        (
            "status",
            engine.status,
            "say whether it is up, where, since when, and what of the configuration it lacks",
        ),
    ):
        machine.add_parser(action, help=text).set_defaults(handler=handler)
    jvm = commands.add_parser(
        "jars", help="the jars Spark sessions get (Iceberg, JDBC drivers), fetched through Maven"
    ).add_subparsers(dest="action", required=True)
    fetching = jvm.add_parser("fetch", help="fetch the jars the project needs into the jar folder")
    fetching.add_argument(
        "--all", action="store_true", help="every jar, whatever the configuration needs"
    )
    fetching.set_defaults(handler=jars.fetch)
    jvm.add_parser("path", help="print the jar folder").set_defaults(handler=jars.path)
    return parser
