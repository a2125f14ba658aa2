"""`incremental-assets` (or `python -m incremental_assets`): operate the tables from a shell.

    incremental-assets validate
    incremental-assets status [--json] [TABLE ...]
    incremental-assets cursor set TABLE VALUE --reason TEXT
    incremental-assets cursor reset TABLE --reason TEXT
    incremental-assets run TABLE ... [--full]
    incremental-assets backfill TABLE --from VALUE --to VALUE

Every command reads the same configuration as Dagster (`--config`, $INCREMENTAL_ASSETS_CONFIG or
./incremental_assets.yaml) and the instance in $DAGSTER_HOME. Errors print one message, no
traceback, and exit with status 1. The commands are thin: the work is done by the same modules
the assets use.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from incremental_assets.config import load_project
from incremental_assets.cursor import CursorType, format_cursor, parse_cursor
from incremental_assets.errors import CursorError, IncrementalAssetsError, InstanceError
from incremental_assets.factory import op_name_for
from incremental_assets.spec import Project, TableSpec
from incremental_assets.state import (
    CURSOR_ACTION,
    latest_state_record,
    read_stored_state,
    record_cursor_override,
)
from incremental_assets.writers.lake import LakeTable


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
        help="the configuration file (default: $INCREMENTAL_ASSETS_CONFIG or ./incremental_assets.yaml)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("validate", help="check the configuration").set_defaults(handler=validate)

    status = commands.add_parser("status", help="cursor, last run, row counts and mode per table")
    status.add_argument("tables", nargs="*", metavar="TABLE")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=show_status)

    cursor = commands.add_parser("cursor", help="move a table's cursor by hand").add_subparsers(
        dest="action", required=True
    )
    set_ = cursor.add_parser(
        "set", help="the next run starts from VALUE (a backfill from that point)"
    )
    set_.add_argument("table")
    set_.add_argument("value")
    set_.add_argument("--reason", required=True, help="why, recorded with the new cursor")
    set_.set_defaults(handler=set_cursor)
    reset = cursor.add_parser("reset", help="the next run extracts everything")
    reset.add_argument("table")
    reset.add_argument("--reason", required=True, help="why, recorded with the reset")
    reset.set_defaults(handler=reset_cursor)

    run = commands.add_parser("run", help="materialize tables through the persistent instance")
    run.add_argument("tables", nargs="+", metavar="TABLE")
    run.add_argument("--full", action="store_true", help="full refresh: ignore the stored cursors")
    run.set_defaults(handler=run_tables)

    backfill = commands.add_parser(
        "backfill", help="re-extract [FROM, TO) without moving the cursor"
    )
    backfill.add_argument("table")
    backfill.add_argument("--from", dest="start", required=True)
    backfill.add_argument("--to", dest="end", required=True)
    backfill.set_defaults(handler=run_backfill)
    return parser


def _project(args: argparse.Namespace) -> Project:
    return load_project(args.config)


def _tables(project: Project, names: Sequence[str]) -> list[TableSpec]:
    try:
        return [project.table(name) for name in names] if names else list(project.tables)
    except KeyError as exc:
        raise CursorError(str(exc.args[0])) from None


def _instance() -> dg.DagsterInstance:
    if not os.environ.get("DAGSTER_HOME"):
        raise InstanceError(
            "DAGSTER_HOME is not set, so there is no instance holding the cursors. Point it at the "
            "directory Dagster uses (for example: export DAGSTER_HOME=$PWD/.dagster_home)."
        )
    return dg.DagsterInstance.get()


def _key(table: TableSpec) -> dg.AssetKey:
    return dg.AssetKey(list(table.asset_key_path))


def validate(args: argparse.Namespace) -> int:
    project = _project(args)
    print(f"{project.path}: valid, {len(project.tables)} tables")
    for table in project.tables:
        cursor = table.cursor.column if table.cursor else "no cursor (full refresh every run)"
        print(
            f"  {table.name}: {table.mode.value} from source '{table.source.name}', cursor {cursor}"
        )
    return 0


def table_status(
    instance: dg.DagsterInstance, project: Project, table: TableSpec
) -> dict[str, Any]:
    record = latest_state_record(instance, _key(table))
    values: dict[str, Any] = {}
    if record is not None:
        event = (
            record.event_log_entry.asset_materialization or record.event_log_entry.asset_observation
        )
        values = {k: getattr(v, "value", v) for k, v in (event.metadata if event else {}).items()}
    return {
        "table": table.name,
        "asset_key": "/".join(table.asset_key_path),
        "mode": table.mode.value,
        "cursor_column": table.cursor.column if table.cursor else None,
        "cursor": values.get("cursor"),
        "last_event": ("cursor " + values[CURSOR_ACTION])
        if CURSOR_ACTION in values
        else ("materialization" if record else None),
        "last_event_at": datetime.fromtimestamp(record.timestamp, UTC).isoformat()
        if record
        else None,
        "last_run_id": (record.run_id or None) if record else None,
        "rows_in_lake": values.get("dagster/row_count"),
        "rows_extracted": values.get("rows_extracted"),
        "rows_written": values.get("rows_written"),
        "lake_uri": project.lake.table_uri(table.name),
    }


def show_status(args: argparse.Namespace) -> int:
    project = _project(args)
    with _instance() as instance:
        rows = [table_status(instance, project, table) for table in _tables(project, args.tables)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'table':<16}{'mode':<13}{'rows':>9}  {'last event':<37}cursor")
    for row in rows:
        when = (row["last_event_at"] or "never")[:19].replace("T", " ")
        event = f"{row['last_event'] or ''} {when}".strip()
        print(
            f"{row['table']:<16}{row['mode']:<13}{row['rows_in_lake'] if row['rows_in_lake'] is not None else '-':>9}  {event:<32}{row['cursor']}"
        )
    return 0


def _actor() -> str:
    return f"{getpass.getuser()}@{socket.gethostname()}"


def set_cursor(args: argparse.Namespace) -> int:
    project = _project(args)
    (table,) = _tables(project, [args.table])
    if table.cursor is None:
        raise CursorError(
            f"Table '{table.name}' has no cursor to set; it is fully refreshed on every run."
        )
    with _instance() as instance:
        stored = read_stored_state(instance, _key(table))
        kind = stored.cursor_type or table.cursor.declared_type
        if kind is None:
            raise CursorError(
                f"Table '{table.name}': the cursor's type isn't known yet (no run has recorded it and "
                "the config doesn't declare it). Declare it, e.g. cursor: {column: updated_at, type: "
                "timestamptz}, or run the table once."
            )
        value = _parse_value(table, kind, args.value)
        with LakeTable(project.lake.table_uri(table.name)).lock(
            table.name, f"cursor set by {_actor()}", project.lake.lock_timeout
        ):
            note = f"{args.reason} (set by {_actor()} with incremental-assets cursor set)"
            record_cursor_override(
                instance, _key(table), stored, value, table.cursor.column, kind, note
            )
    print(f"{table.name}: cursor {stored.cursor} -> {value}; the next run reads from there")
    return 0


def reset_cursor(args: argparse.Namespace) -> int:
    project = _project(args)
    (table,) = _tables(project, [args.table])
    with _instance() as instance:
        stored = read_stored_state(instance, _key(table))
        with LakeTable(project.lake.table_uri(table.name)).lock(
            table.name, f"cursor reset by {_actor()}", project.lake.lock_timeout
        ):
            note = f"{args.reason} (reset by {_actor()} with incremental-assets cursor reset)"
            column = table.cursor.column if table.cursor else None
            record_cursor_override(
                instance, _key(table), stored, None, column, stored.cursor_type, note
            )
    print(
        f"{table.name}: cursor {stored.cursor} reset; the next run extracts everything and replaces the table"
    )
    return 0


def _parse_value(table: TableSpec, kind: CursorType, text: str) -> str:
    try:
        return format_cursor(kind, parse_cursor(kind, text))
    except CursorError as exc:
        raise CursorError(f"Table '{table.name}': {exc} Its cursor is a {kind.value}.") from None


def run_tables(args: argparse.Namespace) -> int:
    project = _project(args)
    tables = _tables(project, args.tables)
    return _materialize(project, tables, {"full_refresh": True} if args.full else {})


def run_backfill(args: argparse.Namespace) -> int:
    project = _project(args)
    tables = _tables(project, [args.table])
    return _materialize(project, tables, {"backfill_from": args.start, "backfill_to": args.end})


def _materialize(project: Project, tables: list[TableSpec], op_config: dict[str, Any]) -> int:
    from incremental_assets.definitions import build_definitions
    from incremental_assets.translator import IncrementalAssetsTranslator

    defs = build_definitions(project)
    translator = IncrementalAssetsTranslator(project.lake)
    specs = [translator.get_asset_spec(t) for t in tables]
    run_config: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
    if op_config:
        run_config["ops"] = {op_name_for(spec): {"config": op_config} for spec in specs}
    with _instance() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[s.key for s in specs],
            run_config=run_config,
            raise_on_error=False,
        )
        failures = {
            event.step_key: event.step_failure_data.error.message.strip()
            if event.step_failure_data.error
            else "failed"
            for event in result.get_step_failure_events()
        }
        print(f"\nrun {result.run_id}: {'succeeded' if result.success else 'FAILED'}")
        for table, spec in zip(tables, specs, strict=True):
            failure = failures.get(op_name_for(spec))
            if failure:
                print(
                    f"  {table.name}: {failure.removeprefix('dagster._core.definitions.events.Failure: ')}"
                )
                continue
            row = table_status(instance, project, table)
            print(
                f"  {table.name}: cursor {row['cursor']}, {row['rows_extracted']} read, "
                f"{row['rows_written']} written, {row['rows_in_lake']} in the lake"
            )
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
