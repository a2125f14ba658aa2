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
import logging
import os
import socket
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from incremental_assets.config import Project, TableSpec, load_project
from incremental_assets.cursor import CursorType, format_cursor, parse_cursor
from incremental_assets.definitions import build_definitions
from incremental_assets.errors import CursorError, IncrementalAssetsError, InstanceError
from incremental_assets.plan import check_backfill_window
from incremental_assets.results import StoredState
from incremental_assets.state import (
    read_state_records,
    read_stored_state,
    record_cursor_override,
    record_of,
)
from incremental_assets.translator import IncrementalAssetsTranslator, translator_for
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
    home = os.environ.get("DAGSTER_HOME", "")
    if not home:
        raise InstanceError(
            "DAGSTER_HOME is not set, so there is no instance holding the cursors. Point it at the "
            "directory Dagster uses (for example: export DAGSTER_HOME=$PWD/.dagster_home)."
        )
    if not os.path.isabs(home):
        raise InstanceError(
            f"DAGSTER_HOME is '{home}', a relative path, and Dagster needs an absolute one. Fix: "
            f"export DAGSTER_HOME={os.path.abspath(home)}"
        )
    if not os.path.isdir(home):
        raise InstanceError(
            f"DAGSTER_HOME is {home}, which is not a directory. Point it at the directory that "
            f"holds your instance, or create a new one: mkdir -p {home}"
        )
    try:
        return dg.DagsterInstance.get()
    except dg.DagsterError as exc:
        cause = " ".join(str(exc).split())
        raise InstanceError(
            f"The Dagster instance in DAGSTER_HOME={home} can't be opened: {cause} Fix "
            f"{os.path.join(home, 'dagster.yaml')}."
        ) from None


def _key(project: Project, table: TableSpec) -> dg.AssetKey:
    return translator_for(project).asset_key(table)


def validate(args: argparse.Namespace) -> int:
    project = _project(args)
    translator_for(project)  # a translator the configuration names must import
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
    """The cursor the next run starts from, the last materialization, and a pending override."""
    records = read_state_records(instance, _key(project, table))
    run, last = records.materialization, record_of(records.materialization)
    return {
        "table": table.name,
        "asset_key": "/".join(_key(project, table).path),
        "mode": table.mode.value,
        "cursor_column": table.cursor.column if table.cursor else None,
        "cursor": records.stored_state().cursor,
        "last_run_id": run.run_id if run else None,
        "last_run_at": _when(run),
        "last_run_cursor": last.cursor,
        "rows_in_lake": last.row_count,
        "rows_extracted": last.rows_extracted,
        "rows_written": last.rows_written,
        "cursor_override": _override(records.override),
        "lake_uri": project.lake.table_uri(table.name),
    }


def _when(record: dg.EventLogRecord | None) -> str | None:
    return datetime.fromtimestamp(record.timestamp, UTC).isoformat() if record else None


def _override(record: dg.EventLogRecord | None) -> dict[str, Any] | None:
    """A `cursor set|reset` recorded after the last materialization: the next run honours it."""
    if record is None:
        return None
    override = record_of(record)
    return {
        "action": override.cursor_action,
        "cursor": override.cursor,
        "previous_cursor": override.previous_cursor,
        "note": override.note,
        "at": _when(record),
    }


def show_status(args: argparse.Namespace) -> int:
    project = _project(args)
    with _instance() as instance:
        rows = [table_status(instance, project, table) for table in _tables(project, args.tables)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'table':<16}{'mode':<13}{'rows':>9}  {'last run':<21}cursor")
    for row in rows:
        rows_in_lake = "-" if row["rows_in_lake"] is None else row["rows_in_lake"]
        when = (row["last_run_at"] or "never")[:19].replace("T", " ")
        print(f"{row['table']:<16}{row['mode']:<13}{rows_in_lake:>9}  {when:<21}{row['cursor']}")
        override = row["cursor_override"]
        if override:
            start = (
                f"reads from {override['cursor']}" if override["cursor"] else "extracts everything"
            )
            print(
                f"{'':<16}cursor {override['action']} at {override['at'][:19].replace('T', ' ')}: "
                f"the next run {start} (was {override['previous_cursor']}); {override['note']}"
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
        # Checked before waiting for the lock, so a bad value fails at once ...
        _cursor_text(table, read_stored_state(instance, _key(project, table)), args.value)
        with _table_lock(project, table, "cursor set"):
            # ... and read again under it: a run that just finished may have moved the batch.
            stored = read_stored_state(instance, _key(project, table))
            kind, value = _cursor_text(table, stored, args.value)
            note = f"{args.reason} (set by {_actor()} with incremental-assets cursor set)"
            record_cursor_override(
                instance, _key(project, table), stored, value, table.cursor.column, kind, note
            )
    print(f"{table.name}: cursor {stored.cursor} -> {value}; the next run reads from there")
    return 0


def _cursor_text(table: TableSpec, stored: StoredState, text: str) -> tuple[CursorType, str]:
    """The cursor's type and `text` as its exact form; CursorError if either can't be had."""
    assert table.cursor is not None
    kind = stored.cursor_type or table.cursor.declared_type
    if kind is None:
        raise CursorError(
            f"Table '{table.name}': the cursor's type isn't known yet (no run has recorded it and "
            "the config doesn't declare it). Declare it, e.g. cursor: {column: updated_at, type: "
            "timestamptz}, or run the table once."
        )
    return kind, _parse_value(table, kind, text)


def reset_cursor(args: argparse.Namespace) -> int:
    project = _project(args)
    (table,) = _tables(project, [args.table])
    with _instance() as instance, _table_lock(project, table, "cursor reset"):
        stored = read_stored_state(instance, _key(project, table))
        note = f"{args.reason} (reset by {_actor()} with incremental-assets cursor reset)"
        column = table.cursor.column if table.cursor else None
        record_cursor_override(
            instance, _key(project, table), stored, None, column, stored.cursor_type, note
        )
    print(
        f"{table.name}: cursor {stored.cursor} reset; the next run extracts everything and replaces the table"
    )
    return 0


def _table_lock(project: Project, table: TableSpec, action: str) -> AbstractContextManager[None]:
    """The table's lake lock: a cursor moved by hand must not race a run recording its own."""
    lake = LakeTable(project.lake.table_uri(table.name))
    return lake.lock(table.name, f"{action} by {_actor()}", project.lake.lock_timeout)


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
    (table,) = _tables(project, [args.table])
    with _instance() as instance:
        stored = read_stored_state(instance, _key(project, table))
    check_backfill_window(table, stored.cursor_type, (args.start, args.end), ("--from", "--to"))
    return _materialize(project, [table], {"backfill_from": args.start, "backfill_to": args.end})


def _materialize(project: Project, tables: list[TableSpec], op_config: dict[str, Any]) -> int:
    translator = translator_for(project)
    defs = dg.Definitions.merge(
        build_definitions(project, translator),
        dg.Definitions(loggers={"progress": progress_logger}),
    )
    run_config: dict[str, Any] = {"loggers": {"progress": {}}}
    if op_config:
        run_config["ops"] = {translator.op_name(t): {"config": op_config} for t in tables}
    with _instance() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[translator.asset_key(t) for t in tables],
            run_config=run_config,
            raise_on_error=False,
        )
        failed_checks = _print_summary(instance, project, tables, translator, result)
    return 0 if result.success and not failed_checks else 1


def _print_summary(
    instance: dg.DagsterInstance,
    project: Project,
    tables: list[TableSpec],
    translator: IncrementalAssetsTranslator,
    result: dg.ExecuteInProcessResult,
) -> int:
    """One line per table, then its checks; returns how many ERROR checks failed."""
    failures = {
        event.step_key: event.step_failure_data.error.message.strip()
        if event.step_failure_data.error
        else "failed"
        for event in result.get_step_failure_events()
    }
    evaluations = result.get_asset_check_evaluations()
    print(f"\nrun {result.run_id}: {'succeeded' if result.success else 'FAILED'}")
    failed = 0
    for table in tables:
        failure = failures.get(translator.op_name(table))
        if failure:
            print(f"  {table.name}: {failure.removeprefix(_FAILURE_PREFIX)}")
            continue
        row = table_status(instance, project, table)
        print(
            f"  {table.name}: cursor {row['cursor']}, {row['rows_extracted']} read, "
            f"{row['rows_written']} written, {row['rows_in_lake']} in the lake"
        )
        for check in (e for e in evaluations if e.asset_key == translator.asset_key(table)):
            print(f"    check {check.check_name}: {_check_text(check)}")
            failed += not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    return failed


_FAILURE_PREFIX = "dagster._core.definitions.events.Failure: "


def _check_text(check: dg.AssetCheckEvaluation) -> str:
    if check.passed:
        return "passed"
    details = check.description or ", ".join(
        f"{k} {getattr(v, 'value', v)}" for k, v in check.metadata.items()
    )
    return f"FAILED ({check.severity.value}): {details}"


class _MessageOnly(logging.Formatter):
    """A run's own log lines (window, rows, progress) without Dagster's events and stack traces;
    the summary after the run reports failures once, as one message."""

    def format(self, record: logging.LogRecord) -> str:
        meta = getattr(record, "dagster_meta", None) or {}
        time = self.formatTime(record, "%H:%M:%S")
        return f"{time} {meta.get('orig_message', record.getMessage())}"


class _UserMessages(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        meta = getattr(record, "dagster_meta", None) or {}
        return meta.get("dagster_event") is None


@dg.logger(
    config_schema=None,
    description="A run's own log lines, one per line, for the incremental-assets command.",
)
def progress_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("incremental-assets", level=logging.INFO)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_MessageOnly())
    handler.addFilter(_UserMessages())
    logger.addHandler(handler)
    return logger


if __name__ == "__main__":
    sys.exit(main())
