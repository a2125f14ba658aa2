"""One Dagster asset per table: a thin shell around `load.run_incremental_load`.

The asset takes the table's lake lock, reads the stored state, runs the load and yields the
materialization *while still holding the lock*: Dagster stores the event before the generator
resumes, so a second run that was waiting for the lock always sees the first run's cursor.

Its checks are evaluated with the materialization, from what the run recorded. Run without the
table (*Execute* on a check, the key audit's schedule, the checks sensor after a failed run),
they examine the table as it is, or nothing (`checks.py` says which).
"""

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from incremental_assets import checks
from incremental_assets.backfill import check_backfill_window
from incremental_assets.config import Project, TableSpec
from incremental_assets.cursor import CursorValue, format_cursor
from incremental_assets.decisions import check_still_last
from incremental_assets.errors import (
    ConfigError,
    IncrementalAssetsError,
    InstanceError,
    TableProblem,
)
from incremental_assets.lake import LakeTable, open_lake
from incremental_assets.lake.facts import LakeHead
from incremental_assets.load import LoadRequest, load_without_spark, run_incremental_load
from incremental_assets.log_load import run_log_load
from incremental_assets.metadata import metadata_for
from incremental_assets.pause_points import pause_point
from incremental_assets.pool_slots import refuse_if_freed
from incremental_assets.progress import run_progress, spark_work
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.results import LoadResult, StoredState
from incremental_assets.sources.failures import engine_error
from incremental_assets.state import read_stored_state
from incremental_assets.translator import IncrementalAssetsTranslator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALLOW_TEMPORARY_INSTANCE = "INCREMENTAL_ASSETS_ALLOW_TEMPORARY_INSTANCE"
_TEMPORARY_HOME_PREFIX = ".tmp_dagster_home_"


class TableRunConfig(dg.Config):
    full_refresh: bool = Field(
        default=False,
        description="Ignore the stored cursor and replace the lake table with everything the "
        "source holds (from `start`, if set). The new cursor replaces the old one only if the "
        "run succeeds.",
    )
    backfill_from: str | None = Field(
        default=None,
        description="With backfill_to: re-extract cursor values in [backfill_from, backfill_to) "
        "(an upsert in merge mode, idempotent in append mode). The cursor does not move.",
    )
    backfill_to: str | None = Field(default=None, description="The exclusive end of the backfill.")


def build_table_asset(
    project: Project, table: TableSpec, translator: IncrementalAssetsTranslator
) -> dg.AssetsDefinition:
    spec = translator.get_asset_spec(table)

    @dg.multi_asset(
        specs=[spec],
        check_specs=checks.check_specs(table, spec.key),
        name=translator.op_name(table),
        pool=translator.pool(table),
        # A check may run without the materialization (`primary_key_unique` over every file),
        # and a run that wrote nothing leaves out the checks with nothing to examine.
        can_subset=True,
    )
    def load_table(
        context: dg.AssetExecutionContext, config: TableRunConfig, spark: IncrementalSparkResource
    ) -> Iterator[dg.MaterializeResult[Any] | dg.AssetCheckResult]:
        lake = open_lake(project.lake, table.name, translator.lake_table_name(table))
        selected = {key.name for key in context.selected_asset_check_keys}
        with failing_cleanly():
            ensure_persistent_instance(context.instance, table.name)
            if spec.key not in context.selected_asset_keys:
                yield from _checks_alone(context, project, table, lake, spark, selected)
                return
            with lake.lock(table.name, f"run {context.run_id}", project.lake.lock_timeout):
                stored = read_stored_state(context.instance, spec.key)
                request = LoadRequest(
                    table=table,
                    lake_spec=project.lake,
                    stored=stored,
                    full_refresh=config.full_refresh,
                    backfill=_backfill(table, config, stored),
                    lake_name=translator.lake_table_name(table),
                    run_id=context.run_id,
                )
                with spark_work() as work:
                    result = _load(context, spark, table, request)
                    pause_point("committed")
                    _log_result(context, table, result)
                    check_results = checks.evaluate_checks(
                        lambda: spark.spark_session,
                        table,
                        lake,
                        result,
                        stored,
                        context.log.warning,
                        selected=lambda name: name in selected,
                    )
                report = replace(result.report, spark_jobs=work.jobs, spark_stages=work.stages)
                result = replace(result, report=report)
                skipped = (
                    checks.not_examined(table, result) if checks.KEY_UNIQUE in selected else None
                )
                if skipped:
                    context.log.info(f"{table.name}: {skipped}")
                metadata = metadata_for(result, checks_not_run=skipped)
                refuse_if_freed(context.instance, context.run_id, table.name)
                check_still_last(
                    table, result.written.head, _last_commit(lake, table, context.log.warning)
                )
                yield dg.MaterializeResult(
                    asset_key=spec.key, metadata=metadata, check_results=check_results
                )

    return load_table


def _last_commit(lake: LakeTable, table: TableSpec, warn: Callable[[str], None]) -> LakeHead | None:
    """The lake's last commit as a run that committed is about to record it; None where the lake
    can't be read then, with a warning: a catalog or store that stops answering after the
    commit must not make a committed run look failed."""
    try:
        return lake.facts(with_files=False).head
    except (IncrementalAssetsError, OSError) as exc:
        warn(
            f"{table.name}: could not read the lake's last commit to check that no overlapping "
            f"run committed after this one ({exc}); the run's commit is recorded as usual"
        )
        return None


def _checks_alone(
    context: dg.AssetExecutionContext,
    project: Project,
    table: TableSpec,
    lake: LakeTable,
    spark: IncrementalSparkResource,
    selected: set[str],
) -> Iterator[dg.AssetCheckResult]:
    """The checks of a run that doesn't load the table: `primary_key_unique` over every file,
    unless the checks sensor started the run after a failed one."""
    if context.run.tags.get(checks.CHECKS_AFTER_FAILED_RUN):
        context.log.info(
            f"{table.name}: checks only, nothing loaded: the run before failed without "
            "evaluating its checks and committed nothing new for them to examine, so they are "
            "marked skipped"
        )
        return
    if checks.KEY_UNIQUE not in selected:
        return
    with lake.lock(table.name, f"check by run {context.run_id}", project.lake.lock_timeout):
        yield from checks.audit(lambda: spark.spark_session, table, lake, selected)


def _load(
    context: dg.AssetExecutionContext,
    spark: IncrementalSparkResource,
    table: TableSpec,
    request: LoadRequest,
) -> LoadResult:
    """The load: without Spark when it can prove there is nothing new, else with the session.
    A table captured from the log reads the log first, and starts Spark only for changes."""
    log = context.log.info
    with run_progress(table.name, log) as progress:

        def started() -> "SparkSession":
            return progress.watch(_started(context, spark, table))

        if table.capture == "log":
            result = run_log_load(started, request, log=log)
            if result.report.spark is not None:
                return result
        else:
            early = load_without_spark(request, log=log)
            if early is not None:
                return early
            result = run_incremental_load(started(), request, log=log)
    return replace(result, report=replace(result.report, spark=spark.description))


def _started(
    context: dg.AssetExecutionContext, spark: IncrementalSparkResource, table: TableSpec
) -> "SparkSession":
    session = _session(spark, table)
    pause_point("session")
    context.log.info(f"{table.name}: Spark: {spark.description}")
    if spark.log_file is not None:
        context.log.info(f"{table.name}: Spark's own log: {spark.log_file}")
    return session


def _session(spark: IncrementalSparkResource, table: TableSpec) -> "SparkSession":
    """The resource's session; a Spark Connect server that doesn't answer is named as such."""
    try:
        return spark.spark_session
    except Exception as exc:
        gone = engine_error(table, exc, "connecting")
        if gone is None:
            raise
        raise gone from None


def _backfill(
    table: TableSpec, config: TableRunConfig, stored: StoredState
) -> tuple[str, str] | None:
    if config.backfill_from is None and config.backfill_to is None:
        return None
    if config.backfill_from is None or config.backfill_to is None or config.full_refresh:
        raise ConfigError(
            TableProblem(
                table.name,
                "a backfill needs both backfill_from and backfill_to, and no full_refresh.",
                fix="give both, e.g. {backfill_from: '2025-01-01', backfill_to: '2025-02-01'}.",
            )
        )
    window = (config.backfill_from, config.backfill_to)
    check_backfill_window(table, stored.cursor_type, window, ("backfill_from", "backfill_to"))
    return window


def _log_result(context: dg.AssetExecutionContext, table: TableSpec, result: LoadResult) -> None:
    def text(value: CursorValue | None) -> str:
        return (
            "none"
            if value is None or result.cursor_type is None
            else format_cursor(result.cursor_type, value)
        )

    context.log.info(
        f"{table.name}: {result.written.rows_extracted} rows read, "
        f"{result.written.rows_written} written, "
        f"{result.row_count} in the lake; extract {result.extract_seconds:.1f}s, write "
        f"{result.write_seconds:.1f}s; cursor {text(result.previous_cursor)} -> "
        f"{text(result.cursor)}"
    )
    for warning in result.warnings:
        context.log.warning(f"{table.name}: {warning}")


@contextmanager
def failing_cleanly() -> Iterator[None]:
    """Our errors become a Dagster Failure carrying just the message, without the chain."""
    try:
        yield
    except IncrementalAssetsError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None


def ensure_persistent_instance(instance: dg.DagsterInstance, table_name: str) -> None:
    """Refuse an instance that forgets cursors, unless the user said that is fine."""
    if os.environ.get(ALLOW_TEMPORARY_INSTANCE, "").lower() in ("1", "true", "yes"):
        return
    root = getattr(instance, "root_directory", "") or ""
    temporary = instance.is_ephemeral or (
        not os.environ.get("DAGSTER_HOME")
        and os.path.basename(root).startswith(_TEMPORARY_HOME_PREFIX)
    )
    if temporary:
        raise InstanceError(
            TableProblem(
                table_name,
                "this run uses a temporary Dagster instance (DAGSTER_HOME is not set), which "
                "forgets every cursor when the process exits, so each run would reload the whole "
                "table.",
                fix="set DAGSTER_HOME to a directory that persists (for example: export "
                "DAGSTER_HOME=$PWD/.dagster_home; mkdir -p $DAGSTER_HOME), or set "
                f"{ALLOW_TEMPORARY_INSTANCE}=1 to accept full reloads.",
            )
        )
