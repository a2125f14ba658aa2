"""`run` and `backfill`: materialize tables through the instance, with the run's own log lines."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

import dagster as dg

from incremental_assets.backfill import check_backfill_window
from incremental_assets.cli.context import asset_key, open_instance, project_and_tables
from incremental_assets.cli.status import table_status
from incremental_assets.config import Project, TableSpec
from incremental_assets.in_process import materialize_tables
from incremental_assets.pool_slots import free_slots
from incremental_assets.state import read_stored_state
from incremental_assets.translator import IncrementalAssetsTranslator, translator_for


def run_tables(args: argparse.Namespace) -> int:
    project, tables = project_and_tables(args, args.tables)
    return _materialize(project, tables, {"full_refresh": True} if args.full else {})


def run_backfill(args: argparse.Namespace) -> int:
    project, (table,) = project_and_tables(args, [args.table])
    with open_instance() as instance:
        stored = read_stored_state(instance, asset_key(project, table))
    check_backfill_window(table, stored.cursor_type, (args.start, args.end), ("--from", "--to"))
    return _materialize(project, [table], {"backfill_from": args.start, "backfill_to": args.end})


def free_run_slots(args: argparse.Namespace) -> int:
    with open_instance() as instance:
        print(free_slots(instance, args.run_id, _say))
    return 0


def _materialize(project: Project, tables: list[TableSpec], op_config: dict[str, Any]) -> int:
    translator = translator_for(project)
    with open_instance() as instance:
        result = materialize_tables(
            project,
            tables,
            instance,
            op_config=op_config,
            loggers={"progress": progress_logger},
            say=_say,
        )
        failed_checks = _print_summary(instance, project, tables, translator, result)
    return 0 if result.success and not failed_checks else 1


def _say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


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
        for skipped in row["checks_not_run"]:
            name, _, why = skipped.partition(": ")
            print(f"    check {name}: not run: {why}")
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
