"""One incremental load of one table: no Dagster here, so it can be driven from anything.

    previous state -> window -> freeze the upper bound -> read -> stage -> commit -> result

The caller holds the table's lock and records the result; until it does, the stored cursor is the
old one, and a rerun reproduces this run's batch or merge idempotently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from incremental_assets.config import parse_duration
from incremental_assets.cursor import CursorType, CursorValue, later_of, parse_cursor
from incremental_assets.errors import ConfigError, CursorError, IncrementalAssetsError, WriteError
from incremental_assets.results import LoadResult, StoredState, WriteOutcome
from incremental_assets.sources import open_source
from incremental_assets.sources.base import (
    Cursor,
    FreezeRequest,
    check_columns,
    choose_partitioning,
    resolve_cursor,
)
from incremental_assets.sources.failures import root_messages, source_error
from incremental_assets.spec import LakeSpec, Mode, TableSpec
from incremental_assets.window import Lookback, Window, lower_bound, render_window
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import BATCH_COLUMN, WritePlan
from incremental_assets.writers.lake import LakeTable, lake_error, new_txn

Log = Callable[[str], None]


@dataclass(frozen=True)
class LoadRequest:
    table: TableSpec
    lake: LakeSpec
    stored: StoredState
    full_refresh: bool = False


def run_incremental_load(
    spark: SparkSession, request: LoadRequest, log: Log = lambda _: None
) -> LoadResult:
    table = request.table
    lake = LakeTable(request.lake.table_uri(table.name))
    for note in lake.recover():
        log(f"{table.name}: {note}")
    started = time.monotonic()
    source = open_source(spark, table)
    schema = source.schema()
    check_columns(table, schema)
    cursor = resolve_cursor(table, schema)
    replace_all = request.full_refresh or request.stored.run_id is None or cursor is None
    previous = (
        None
        if cursor is None
        else read_previous_cursor(table, request.stored, cursor, request.full_refresh)
    )
    if not replace_all:
        _check_lake_present(table, lake, request.stored)
    lower = None
    if cursor is not None:
        start = _start(table, cursor)
        lower = (
            start
            if replace_all
            else lower_bound(cursor.type, previous, start, _lookback(table, cursor))
        )
    partitioning = choose_partitioning(table, schema, cursor)
    bounds = None
    window = None
    if cursor is not None:
        _check_safety_lag(table, cursor)
        bounds = source.freeze(
            FreezeRequest(cursor, lower, table.safety_lag, table.timezone, partitioning)
        )
        window = Window(cursor.column, cursor.type, lower, bounds.upper, empty=bounds.upper is None)
        log(
            f"{table.name}: window {render_window(window, source.dialect)} ({bounds.rows} rows counted)"
        )
    context = _Context(table, request, lake, cursor, previous, replace_all, window, started)
    if bounds is not None and bounds.upper is None and not replace_all:
        return context.unchanged(schema, source.dialect)
    plan = WritePlan(
        lake=lake,
        txn=new_txn(),
        batch=request.stored.batch + 1,
        replace_all=replace_all,
        primary_key=table.primary_key,
        cursor_column=cursor.column if cursor else None,
        delete_column=table.delete_column,
        buckets=table.buckets,
        compression=request.lake.compression,
        max_rows_per_file=request.lake.max_rows_per_file,
        boundary=_boundary(table, cursor, previous, lower, replace_all),
    )
    writer = writer_for(table.mode, spark)
    try:
        staged = writer.stage(source.read(window, bounds, partitioning), plan)
        extracted_at = time.monotonic()
        outcome = writer.commit(staged, plan)
    except IncrementalAssetsError:
        lake.discard(plan.txn)
        raise
    except Exception as exc:
        lake.discard(plan.txn)
        raise _failure(table, lake, exc) from None
    new_cursor = bounds.upper if bounds is not None and replace_all else None
    if cursor is not None and not replace_all:
        new_cursor = later_of(cursor.type, previous, bounds.upper if bounds else None)
    return context.result(
        outcome, plan.batch, new_cursor, source.dialect, extracted_at, lake.count_rows()
    )


def read_previous_cursor(
    table: TableSpec, stored: StoredState, cursor: Cursor, full_refresh: bool
) -> CursorValue | None:
    """The stored cursor as a value of the column's type; a full refresh ignores a bad one."""
    if stored.cursor is None:
        return None
    if stored.cursor_column and stored.cursor_column != cursor.column and not full_refresh:
        raise ConfigError(
            f"Table '{table.name}', field 'cursor': the stored cursor belongs to column "
            f"'{stored.cursor_column}', but the table now uses '{cursor.column}'. Run a full refresh "
            "(asset config full_refresh: true) to load from the new column."
        )
    try:
        return parse_cursor(cursor.type, stored.cursor)
    except CursorError as exc:
        if full_refresh:
            return None
        raise CursorError(
            f"Table '{table.name}': the stored cursor {stored.cursor!r} (metadata key `cursor` of run "
            f"{stored.run_id}) can't be read as the {cursor.type.value} column '{cursor.column}': "
            f"{exc} Fix: run a full refresh (asset config full_refresh: true); the lake and the "
            "cursor are left as they are until it succeeds."
        ) from None


def _start(table: TableSpec, cursor: Cursor) -> CursorValue | None:
    if table.start is None:
        return None
    try:
        return parse_cursor(cursor.type, table.start)
    except CursorError as exc:
        raise ConfigError(f"Table '{table.name}', field 'start': {exc}") from None


def _lookback(table: TableSpec, cursor: Cursor) -> Lookback | None:
    value = table.lookback
    if value is None:
        return None
    if cursor.type is CursorType.STRING:
        raise ConfigError(
            f"Table '{table.name}', field 'lookback': string cursors can't look back; remove it."
        )
    if cursor.type.is_temporal:
        if not isinstance(value, str):
            raise ConfigError(
                f"Table '{table.name}', field 'lookback': the cursor '{cursor.column}' is a "
                f"{cursor.type.value}; write a duration such as 5m or 1d."
            )
        return parse_duration(value)
    if not isinstance(value, int):
        raise ConfigError(
            f"Table '{table.name}', field 'lookback': the cursor '{cursor.column}' is "
            f"{cursor.type.value}; write a number of cursor units, e.g. lookback: 1000."
        )
    return value


def _check_safety_lag(table: TableSpec, cursor: Cursor) -> None:
    if table.safety_lag is not None and not cursor.type.is_temporal:
        raise ConfigError(
            f"Table '{table.name}', field 'safety_lag': the cursor '{cursor.column}' is "
            f"{cursor.type.value}; a lag only applies to date and timestamp cursors. Remove it."
        )


def _check_lake_present(table: TableSpec, lake: LakeTable, stored: StoredState) -> None:
    if stored.row_count and not lake.data_files():
        raise WriteError(
            f"Table '{table.name}': the lake table {lake.uri} has no data files, but run "
            f"{stored.run_id} recorded {stored.row_count} rows in it. An incremental run would "
            "only add the newest rows. Run a full refresh (asset config full_refresh: true) to "
            "rebuild it."
        )


def _boundary(
    table: TableSpec,
    cursor: Cursor | None,
    previous: CursorValue | None,
    lower: CursorValue | None,
    replace_all: bool,
) -> Window | None:
    """Append mode: `[lower, previous]` was read before, by this run's inclusive lower bound."""
    if table.mode is not Mode.APPEND or replace_all or cursor is None or previous is None:
        return None
    return Window(cursor.column, cursor.type, lower, previous)


def _failure(table: TableSpec, lake: LakeTable, exc: Exception) -> IncrementalAssetsError:
    messages = " ".join(root_messages(exc))
    if "PSQLException" in messages or "FAILED_JDBC" in messages:
        return source_error(table, exc, "reading the rows")
    return lake_error(table.name, lake.uri, root_messages(exc)[-1])


@dataclass(frozen=True)
class _Context:
    table: TableSpec
    request: LoadRequest
    lake: LakeTable
    cursor: Cursor | None
    previous: CursorValue | None
    replace_all: bool
    window: Window | None
    started: float

    def _filter(self, dialect: object) -> str:
        return render_window(self.window, dialect) if self.window is not None else "TRUE"  # type: ignore[arg-type]

    def unchanged(self, schema: T.StructType, dialect: object) -> LoadResult:
        columns = (
            *((f.name, f.dataType.simpleString()) for f in schema.fields),
            (BATCH_COLUMN, "bigint"),
        )
        outcome = WriteOutcome(0, 0, 0, 0, None, columns)
        now = time.monotonic()
        return self.result(
            outcome, self.request.stored.batch, self.previous, dialect, now, self.lake.count_rows()
        )

    def result(
        self,
        outcome: WriteOutcome,
        batch: int,
        cursor: CursorValue | None,
        dialect: object,
        extracted_at: float,
        row_count: int,
    ) -> LoadResult:
        from incremental_assets.results import MergeCounts

        merge = outcome.merge
        if merge is None and self.table.mode is Mode.MERGE:
            merge = MergeCounts(0, 0, 0)
        return LoadResult(
            mode=self.table.mode,
            cursor_column=self.cursor.column if self.cursor else None,
            cursor_type=self.cursor.type if self.cursor else None,
            previous_cursor=self.previous,
            cursor=cursor,
            full_refresh=self.replace_all,
            batch=batch,
            extract_filter=self._filter(dialect),
            rows_extracted=outcome.rows_extracted,
            rows_written=outcome.rows_written,
            files_written=outcome.files_written,
            merge=merge,
            row_count=row_count,
            columns=outcome.columns,
            uri=self.lake.uri,
            extract_seconds=extracted_at - self.started,
            write_seconds=time.monotonic() - extracted_at,
        )
