"""One incremental load of one table: no Dagster here, so it can be driven from anything.

    lake facts + source facts -> kind of run -> plan (window, frozen bound, new cursor)
    -> read -> stage -> commit -> result

The caller holds the table's lock and records the result; until it does, the stored cursor is the
old one, and a rerun reproduces this run's batch or merge idempotently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from incremental_assets.backfill import plan_backfill
from incremental_assets.config import JdbcSourceSpec, LakeSpec, Mode, TableSpec
from incremental_assets.cursor import format_cursor
from incremental_assets.decisions import (
    Asked,
    RunKind,
    SourceFacts,
    at_recorded_commit,
    check_merge_writes,
    key_enforced,
    key_from_catalog,
    kind_of_run,
    weights_in_force,
)
from incremental_assets.dialects import SPARK_SQL, Dialect
from incremental_assets.engine_failures import Failure, classify, messages
from incremental_assets.errors import (
    CommitUnknown,
    ConcurrentRunError,
    ConfigError,
    IncrementalAssetsError,
    TableProblem,
    WriteError,
)
from incremental_assets.fingerprint import files_listing, next_fingerprint
from incremental_assets.lake import LakeFacts, LakeTable, open_lake
from incremental_assets.lake.names import new_txn
from incremental_assets.lake.table import lake_error
from incremental_assets.nothing_new import prove_unchanged
from incremental_assets.pause_points import pause_point
from incremental_assets.plan import (
    PlanInputs,
    WindowPlan,
    boundary_of,
    collated_cursor,
    describe_bounds,
    plan_window,
)
from incremental_assets.progress import phase
from incremental_assets.progress_lines import COMMITTING, MAINTAINING, STAGING
from incremental_assets.results import LoadResult, StoredState, WriteOutcome
from incremental_assets.settings import changed_settings, describe_changes, settings_text
from incremental_assets.sources import database_of, open_source
from incremental_assets.sources.base import Source, check_columns
from incremental_assets.sources.failures import engine_error, source_error
from incremental_assets.window import render_window
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import ClashingVersions, Staged, WritePlan, column_types
from incremental_assets.writers.schema import SchemaChange, plan_schema_change

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    """One run of one table: what it loads, into which lake, from which stored state."""

    table: TableSpec
    lake_spec: LakeSpec
    stored: StoredState
    full_refresh: bool = False
    # Re-extract [from, to) in the cursor's text form, leaving the cursor where it is.
    backfill: tuple[str, str] | None = None
    lake_name: str | None = None  # the Iceberg table's identifier (the translator's)
    run_id: str | None = None  # the Dagster run, recorded with the lake's commit (Iceberg)

    @cached_property
    def lake_table(self) -> LakeTable:
        """The lake table, in its format (`lake.format_of`), opened once."""
        return open_lake(self.lake_spec, self.table.name, self.lake_name)

    @cached_property
    def settings(self) -> str:
        """The lake-shaping settings this run runs under (`settings.py`)."""
        return settings_text(self.table, self.lake_spec, self.lake_table.format)

    def asked(self) -> Asked:
        return Asked(
            full_refresh=self.full_refresh,
            backfill=self.backfill is not None,
            settings=self.settings,
        )


@dataclass(frozen=True, kw_only=True)
class _Run:
    """One load under way: its table (the key read from the source, if it wasn't named), its
    lake as found, and when it started."""

    request: LoadRequest
    table: TableSpec
    lake: LakeTable
    facts: LakeFacts
    dialect: Dialect
    started: float


def load_without_spark(request: LoadRequest, log: Log = lambda _: None) -> LoadResult | None:
    """The run's result when it can prove, without Spark, that it would find nothing new.

    None when it can't: the run then goes through `run_incremental_load`. A lake that is not the
    table the stored cursor describes is refused here as it would be there.
    """
    if request.backfill:
        return None
    started = time.monotonic()
    lake = request.lake_table
    stored = request.stored
    # Proven unchanged, the lake is at the commit the last run recorded, so its files and columns
    # are that run's: the head alone tells, where the format can read it without its files.
    facts = lake.facts(with_files=stored.lake_table_id is None or stored.columns is None)
    proof = prove_unchanged(request.table, stored, facts, request.asked())
    if proof is None:
        return None
    plan = proof.plan
    report = replace(
        plan.report, window_fingerprint=proof.fingerprint, spark="not started (nothing new)"
    )
    source = request.table.source
    dialect = database_of(source).dialect if isinstance(source, JdbcSourceSpec) else SPARK_SQL
    run = _Run(
        request=request,
        table=request.table,
        lake=lake,
        facts=facts,
        dialect=dialect,
        started=started,
    )
    log(
        f"{run.table.name}: nothing new past the cursor, and the rows it would read again are "
        "unchanged: Spark not started"
    )
    columns = column_types(facts.schema) if facts.schema is not None else stored.columns or ()
    return _result(
        run, replace(plan, report=report), _nothing(run.table, columns), stored.batch, None
    )


def run_incremental_load(
    spark: SparkSession, request: LoadRequest, log: Log = lambda _: None
) -> LoadResult:
    """One load of one table with Spark, from the stored state to a committed lake.

    It finishes what a dead run left in the lake, reads the lake's facts and the source's once,
    decides what kind of run this is (`decisions.py`), freezes the window's upper bound and
    plans the cursor (`plan.py`), takes the fingerprint the next run checks without Spark,
    reads the window, stages it and commits it. Nothing is written when a check refuses the run.
    The caller holds the table's lock and records the result: until then the stored cursor is
    the old one.

        lake = LakeSpec(path="/lake")
        result = run_incremental_load(spark, LoadRequest(table=t, lake_spec=lake, stored=stored))
    """
    lake = request.lake_table
    spark = lake.session(spark)
    recovered = [f"{request.table.name}: {note}" for note in lake.recover()]
    for note in recovered:
        log(note)
    facts = lake.facts()
    # What the lake alone refuses is refused before the source is asked anything (a table's
    # schema and key included); `kind_of_run` asks again, for the run without Spark.
    check_merge_writes(request.table, facts)
    listing = files_listing(request.table)
    table, source = _keyed_source(spark, request.table)
    check_columns(table, source.schema())
    source_facts = _source_facts(table, source, named_key=bool(request.table.primary_key))
    kind = kind_of_run(table, request.asked(), request.stored, facts, source_facts)
    run = _Run(
        request=request,
        table=table,
        lake=lake,
        facts=facts,
        dialect=source.dialect,
        started=time.monotonic(),
    )
    plan = _plan(run, source, kind, log)
    fingerprint = next_fingerprint(table, plan, listing)
    plan = replace(plan, report=replace(plan.report, window_fingerprint=fingerprint))
    change = _schema_change(run, source, plan.replace_all)
    if plan.nothing_new:
        outcome = _nothing(table, column_types(change.target, with_batch=True))
        return _result(run, plan, outcome, request.stored.batch, None)
    write = _write_plan(run, source, plan, change, source_facts)
    writer = writer_for(table.mode, spark, run.lake)
    try:
        phase(STAGING)
        source_keys = source.read_keys() if write.reconcile else None
        delta = source.read(plan.window, plan.bounds, plan.partitioning)
        staged = writer.stage(delta, write, source_keys)
        _refuse_null_keys(table, staged)
        pause_point("staged")
        extracted_at = time.monotonic()
        phase(COMMITTING)
        outcome = writer.commit(staged, write)
    except Exception as exc:
        raise failed_write(run.table, run.lake, write.txn, exc) from None
    report = replace(
        plan.report,
        schema_change=change.describe() or None,
        deletes_reconciled=True if write.reconcile else None,
        maintenance=_maintained(run, spark, log) if _maintains(run, outcome) else None,
    )
    return _result(run, replace(plan, report=report), outcome, write.batch, extracted_at)


def _maintains(run: _Run, outcome: WriteOutcome) -> bool:
    """Whether the run keeps its table after committing (`lake.maintenance: after_commit`)."""
    return outcome.head is not None and run.request.lake_spec.maintenance == "after_commit"


def _maintained(run: _Run, spark: SparkSession, log: Log) -> str | None:
    """The lake's maintenance after the commit: what it did. It never fails the run, whose rows
    are committed already; a failure is said and left for the next run to try again."""
    phase(MAINTAINING)
    try:
        return run.lake.maintain(spark)
    except Exception as exc:
        cause = run.lake.redact(messages(exc)[-1])
        log(f"{run.table.name}: the lake's maintenance failed (the next run tries again): {cause}")
        return f"failed: {cause}"


def _keyed_source(spark: SparkSession, table: TableSpec) -> tuple[TableSpec, Source]:
    """The table and its source, with the key read from the database for a merge that names none."""
    source = open_source(spark, table)
    if table.mode is not Mode.MERGE or table.primary_key:
        return table, source
    keyed = table.model_copy(update={"primary_key": _key_from_source(table, source)})
    return keyed, open_source(spark, keyed)


def _source_facts(table: TableSpec, source: Source, named_key: bool) -> SourceFacts:
    merge = table.mode is Mode.MERGE
    catalog_key = None
    if key_from_catalog(table):
        # A key read from the catalog is the catalog's; a named one is checked against it.
        catalog_key = source.primary_key() if named_key else table.primary_key
    return SourceFacts(
        schema=source.schema(),
        match_key=source.match_key() if merge else (),
        weighed_by=source.weighed_by() if merge else {},
        catalog_key=catalog_key,
    )


def _plan(run: _Run, source: Source, kind: RunKind, log: Log) -> WindowPlan:
    """The window, the frozen bound and the cursor to record, for the kind of run decided."""
    request = run.request
    inputs = PlanInputs(table=run.table, source=source, stored=request.stored, kind=kind)
    plan = plan_backfill(inputs, request.backfill) if request.backfill else plan_window(inputs)
    changes = describe_changes(changed_settings(request.stored.settings, request.settings))
    report = replace(plan.report, settings_changed=changes or None)
    warnings = [*kind.warnings]
    if changes:
        warnings.append(f"settings changed since the last run: {changes}")
    for warning in warnings:
        log(f"{run.table.name}: {warning}")
    if plan.window is not None and plan.bounds is not None:
        window = render_window(plan.window, run.dialect)
        log(f"{run.table.name}: window {window}; {describe_bounds(plan.bounds)}")
    return replace(plan, report=report).warned(*warnings)


def _write_plan(
    run: _Run, source: Source, plan: WindowPlan, change: SchemaChange, facts: SourceFacts
) -> WritePlan:
    table, lake_spec = run.table, run.request.lake_spec
    batch = run.request.stored.batch + 1
    merge = table.mode is Mode.MERGE
    recorded = plan.recorded_cursor
    return WritePlan(
        lake=run.lake,
        facts=run.facts,
        txn=new_txn(),
        batch=batch,
        cursor=None
        if recorded is None or plan.cursor is None
        else format_cursor(plan.cursor.type, recorded),
        replace_all=plan.replace_all,
        primary_key=table.primary_key,
        cursor_column=plan.cursor.column if plan.cursor else None,
        delete_column=table.delete_column,
        buckets=table.buckets,
        bucket_rows=table.bucket_rows,
        compression=lake_spec.codec,
        max_rows_per_file=lake_spec.max_rows_per_file,
        boundary=boundary_of(table, plan),
        schema=change,
        reconcile=plan.reconcile,
        delta_beats_lake=collated_cursor(table, plan),
        match_key=facts.match_key,
        weighed_by=tuple(weights_in_force(facts, run.facts).items()) if merge else (),
        key_enforced=key_enforced(table, facts),
        run_id=run.request.run_id,
        tuning=lake_spec.merge_tuning,
        merge_writes=table.merge_writes,
    )


def _key_from_source(table: TableSpec, source: Source) -> tuple[str, ...]:
    keys = source.primary_key()
    if not keys:
        raise ConfigError(
            TableProblem(
                table.name,
                f"{table.source_object} has no primary key in the database, and merge mode needs "
                "one.",
                "primary_key",
                "name the key columns: primary_key: [id].",
            )
        )
    return keys


def _refuse_null_keys(table: TableSpec, staged: Staged) -> None:
    if staged.null_keys:
        raise _key_error(
            table,
            f"{staged.null_keys} of the rows read have NULL in a key column",
            "rows whose key is NULL can't be told apart",
            "name key columns that are never NULL, filter or COALESCE them in `query:`, "
            "or load the table in append mode.",
        )


def _key_error(table: TableSpec, found: str, why: str, fix: str) -> WriteError:
    return WriteError(
        TableProblem(
            table.name,
            f"{found} ({', '.join(table.primary_key)}). A merge keeps one row per key, and {why}, "
            "so nothing was written and the cursor did not move.",
            "primary_key",
            fix,
        )
    )


def _schema_change(run: _Run, source: Source, replace_all: bool) -> SchemaChange:
    lake = None if replace_all else run.facts.schema
    return plan_schema_change(run.table.name, lake, run.lake.storable(source.schema()))


def failed_write(
    table: TableSpec, lake: LakeTable, txn: str, exc: Exception
) -> IncrementalAssetsError:
    """Clean up after a failed read, stage or commit, and say what state the lake is in."""
    cause = lake.redact(messages(exc.cause if isinstance(exc, CommitUnknown) else exc)[-1])
    if isinstance(exc, CommitUnknown):
        return lake.unfinished_error(table.name, txn, cause, took=exc.landed)
    # A refused commit says what happened to it (one replaced over another landed, refused).
    if not lake.discard(txn) and not isinstance(exc, ConcurrentRunError):
        return lake.unfinished_error(table.name, txn, cause)
    if isinstance(exc, IncrementalAssetsError):
        return exc
    if isinstance(exc, ClashingVersions):
        return _key_error(
            table,
            f"{exc.rows} of the rows read differ from another row read with the same key and "
            "cursor value",
            "which of them is the row is anyone's guess (the source doesn't enforce the key: "
            "a view, or a `query:`?)",
            "name key columns that identify one row, deduplicate in `query:`, or load the "
            "table in append mode.",
        )
    gone = engine_error(table, exc, "the load ran")
    if gone is not None:
        return gone
    if classify(exc) in (Failure.SOURCE_FAILED, Failure.REFUSED):
        return source_error(table, exc, "reading the rows")
    return lake_error(table.name, lake.uri, cause)


def _result(
    run: _Run,
    plan: WindowPlan,
    outcome: WriteOutcome,
    batch: int,
    extracted_at: float | None,
) -> LoadResult:
    table = run.table
    finished = time.monotonic()
    extracted_at = finished if extracted_at is None else extracted_at
    return LoadResult(
        mode=table.mode,
        cursor_column=plan.cursor.column if plan.cursor else None,
        cursor_type=plan.cursor.type if plan.cursor else None,
        previous_cursor=plan.previous,
        cursor=plan.recorded_cursor,
        full_refresh=plan.replace_all,
        batch=batch,
        extract_filter=render_window(plan.window, run.dialect) if plan.window else "TRUE",
        written=outcome,
        row_count=_rows_after(run, outcome),
        uri=run.lake.uri,
        extract_seconds=extracted_at - run.started,
        write_seconds=finished - extracted_at,
        warnings=plan.warnings,
        report=plan.report,
        primary_key=table.primary_key,
        head=outcome.head or run.facts.head,
        settings=run.request.settings,
        table_name=run.lake.identifier,
    )


def _nothing(table: TableSpec, columns: tuple[tuple[str, str], ...]) -> WriteOutcome:
    return WriteOutcome.nothing(columns, merge=table.mode is Mode.MERGE)


def _rows_after(run: _Run, outcome: WriteOutcome) -> int:
    return rows_after(run.lake, run.request.stored, run.facts, outcome)


def rows_after(
    lake: LakeTable, stored: StoredState, facts: LakeFacts, outcome: WriteOutcome
) -> int:
    """The lake's rows after a run: as its commit tells, else counted; when it committed
    nothing, as the last recorded run counted them, if the lake is still at that commit."""
    if outcome.rows_held is not None:
        return outcome.rows_held
    if outcome.head is None and stored.row_count is not None and at_recorded_commit(stored, facts):
        return stored.row_count
    return lake.count_rows()
