"""One load of a `capture: log` table: the changes its database's log holds past the position
the last run recorded, committed as one lake commit. No Dagster here; the log itself is the
database's (`log_of`: PostgreSQL's slot, `sources/pg_log.py`; a binary log, `sources/binlog.py`).

    first run, or --full   the log made ready (`ChangeLog.begin`: the position every change is
                           kept from, with everything before it in what follows), then the
                           table's full load (`load.run_incremental_load`); that position is
                           recorded, so the next run replays every change committed since,
                           which a merge applies idempotently: nothing lost or doubled
    later runs             the changes from the recorded position to a bound frozen now
                           (`ChangeLog.read`), folded per key (merge) or logged as they came
                           (append), typed by the source's schema in Spark and written by the
                           table's writer, with the position the run records kept in its commit

A run killed after its commit, before Dagster recorded it, is redone as any run is: the next one
reads the same changes again (and those since) as the same batch, which the writers apply
idempotently (a merge applies them again; an append replaces the batch's rows). A run that finds
no change starts no JVM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from incremental_assets.config import JdbcSourceSpec, Mode, TableSpec
from incremental_assets.cursor import CursorType, parse_cursor
from incremental_assets.decisions import check_lake_fits, check_merge_writes, unrecorded_refresh
from incremental_assets.errors import ConfigError, SourceError, TableProblem
from incremental_assets.lake import LakeFacts
from incremental_assets.lake.names import new_txn
from incremental_assets.load import LoadRequest, failed_write, rows_after, run_incremental_load
from incremental_assets.progress import phase
from incremental_assets.progress_lines import COMMITTING, STAGING
from incremental_assets.results import LoadResult, Report, StoredState, WriteOutcome
from incremental_assets.sources import open_source
from incremental_assets.sources.log_changes import (
    Change,
    ChangeLog,
    Log,
    LogRead,
    fold,
    full_refresh_fix,
    moved_from,
)
from incremental_assets.sources.postgres import is_time_of_day
from incremental_assets.sources.transport import decimal_fits
from incremental_assets.spark_api import F, T, column_named
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import WritePlan
from incremental_assets.writers.schema import plan_schema_change
from incremental_assets.writers.versions import DELETED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# An append table's change log: what each row did, its transaction's commit position (as a
# number, so that it sorts), and its order within the run: (change_lsn, change_seq) orders the
# log, since a run reads whole transactions.
CHANGE_OP, CHANGE_LSN, CHANGE_SEQ = "change_op", "change_lsn", "change_seq"


def log_of(table: TableSpec) -> ChangeLog:
    """The table's log: PostgreSQL's through a slot, MySQL's or MariaDB's binlog."""
    source = table.source
    assert isinstance(source, JdbcSourceSpec), "config rules: a jdbc source"
    # Imported here: loading the definitions imports neither database's driver
    if source.url.startswith("jdbc:postgresql:"):
        from incremental_assets.sources.pg_log import PgLog

        return PgLog(table)
    from incremental_assets.sources.binlog import Binlog

    return Binlog(table)


def run_log_load(
    session: Callable[[], SparkSession], request: LoadRequest, log: Log = lambda _: None
) -> LoadResult:
    """One load of a `capture: log` table; `session` is called only when a row is to be written.

    result = run_log_load(lambda: spark, LoadRequest(table=t, lake_spec=lake, stored=stored))
    """
    table = request.table
    source = table.source
    assert isinstance(source, JdbcSourceSpec)
    if request.lake_table.format != "iceberg":
        raise ConfigError(
            TableProblem(
                table.name,
                "log capture writes Iceberg tables, and this table's lake is plain Parquet.",
                "capture",
                "set the lake's `format: iceberg` for a new table (or convert this one with "
                "`incremental-assets lake convert`), or capture it with a `cursor:`.",
            )
        )
    changes = log_of(table)
    previous = _recorded(request, changes.cursor_type)
    if previous is None or request.full_refresh:
        return _first_load(session, request, changes, previous, log)
    started = time.monotonic()
    facts = request.lake_table.facts()
    if unrecorded_refresh(table, request.asked(), request.stored, facts) is not None:
        # A --full that committed and died before its record: its position is lost with it, and
        # the changes since the recorded one would replace its batch. Repeated, as a cursor's is.
        log(f"{table.name}: a full refresh committed but was never recorded: repeating it")
        return _first_load(session, request, changes, previous, log)
    _check_lake(table, request.stored, facts)
    read = changes.read(previous)
    gathered = read.gathered
    log(
        f"{table.name}: read the log from {read.since} to {read.position}: "
        f"{len(gathered.changes)} change(s) in {gathered.transactions} transaction(s)"
        + (f"; more wait past {read.position}" if read.more else "")
    )
    report = Report(
        log_changes=len(gathered.changes),
        log_transactions=gathered.transactions,
        log_retained_bytes=read.retained,
        log_more_waiting=read.more,
    )
    if not gathered.changes and not facts.pending:
        report = replace(report, spark="not started (nothing new)")
        nothing = WriteOutcome.nothing(request.stored.columns or (), merge=_merge(table))
        return _result(request, facts, read, nothing, request.stored.batch, report, started, None)
    spark = request.lake_table.session(session())
    for note in request.lake_table.recover():
        log(f"{table.name}: {note}")
    facts = request.lake_table.facts()
    _check_lake(table, request.stored, facts)  # another writer may have committed meanwhile
    extracted = time.monotonic()
    outcome, batch = _write(spark, request, facts, read)
    return _result(request, facts, read, outcome, batch, report, started, extracted)


def _check_lake(table: TableSpec, stored: StoredState, facts: LakeFacts) -> None:
    """A lake that isn't the table the position was recorded for (gone, restored, or committed
    to by another writer) is refused, as a cursor's run refuses it."""
    check_merge_writes(table, facts)
    check_lake_fits(table, stored, facts)


def _first_load(
    session: Callable[[], SparkSession],
    request: LoadRequest,
    changes: ChangeLog,
    previous: str | None,
    log: Log,
) -> LoadResult:
    """The log made ready first, then the table loaded whole: every change committed after the
    position it gives is replayed by the next run."""
    spark = session()
    for field in open_source(spark, request.table).schema().fields:
        _cast(request.table, field)  # a column the log can't be read into fails before the slot
    start = changes.begin(log)
    loaded = run_incremental_load(spark, replace(request, full_refresh=True), log)
    return replace(
        loaded,
        cursor_type=changes.cursor_type,
        cursor=_parsed(changes.cursor_type, start),
        previous_cursor=None if previous is None else _parsed(changes.cursor_type, previous),
        extract_filter=f"the whole table; its log kept from {start}",
    )


def _recorded(request: LoadRequest, kind: CursorType) -> str | None:
    """The position the last run recorded, as text; None if it recorded another kind of cursor
    (a column's, before the table was captured from the log) or none."""
    stored = request.stored
    if stored.cursor is None or stored.cursor_type is not kind:
        return None
    _parsed(kind, stored.cursor)  # a position the log can't read is refused here
    return stored.cursor


def _refuse_lost_columns(table: TableSpec, facts: LakeFacts, schema: T.StructType) -> None:
    """A column the lake holds that the source no longer has was dropped or renamed: the log's
    changes from before can't be told from those after, so the run stops. (One the source added
    joins the lake, NULL in the rows no change has reached, as with a cursor.)"""
    wanted = set(table.columns) if table.columns is not None else None
    lost = [
        name
        for name in _held(facts)
        if name not in schema.names
        and name not in table.exclude_columns
        and (wanted is None or name in wanted)
    ]
    if lost:
        raise SourceError(
            TableProblem(
                table.name,
                f"{table.source_object} lost column(s) {', '.join(lost)} (dropped or renamed) "
                "while its changes were being captured; the lake can't tell which of its rows "
                "still have them. Nothing was written.",
                "capture",
                full_refresh_fix(table.name),
            )
        )


def _held(facts: LakeFacts) -> tuple[str, ...]:
    """The lake's columns that came from the source (not its own, nor a change log's)."""
    if facts.schema is None:
        return ()
    ours = (CHANGE_OP, CHANGE_LSN, CHANGE_SEQ)
    return tuple(n for n in facts.schema.names if not n.startswith("_") and n not in ours)


def _merge(table: TableSpec) -> bool:
    return table.mode is Mode.MERGE


def _write(
    spark: SparkSession, request: LoadRequest, facts: LakeFacts, read: LogRead
) -> tuple[WriteOutcome, int]:
    """The run's changes, typed by the source's schema, written by the table's writer."""
    table = request.table
    lake = request.lake_table
    source = open_source(spark, table)
    schema = source.schema()
    _refuse_lost_columns(table, facts, schema)
    key = table.primary_key or source.primary_key()
    changes = read.gathered.changes
    if _merge(table):
        folded = fold(changes, key)
        replace_all = folded.truncated
        delta = _typed(spark, table, schema, folded.rows, folded.deleted)
    else:
        replace_all = False
        delta = _change_log(spark, table, schema, _with_moves(changes, key))
    target = lake.storable(T.StructType([f for f in delta.schema.fields if f.name != DELETED]))
    change = plan_schema_change(table.name, None if replace_all else facts.schema, target)
    batch = request.stored.batch + 1
    plan = WritePlan(
        lake=lake,
        facts=facts,
        txn=new_txn(),
        batch=batch,
        cursor=read.position,
        replace_all=replace_all,
        primary_key=key,
        cursor_column=None,
        delete_column=None,
        buckets=table.buckets,
        bucket_rows=table.bucket_rows,
        compression=request.lake_spec.codec,
        max_rows_per_file=request.lake_spec.max_rows_per_file,
        schema=change,
        delta_beats_lake=True,
        key_enforced=True,
        run_id=request.run_id,
        tuning=request.lake_spec.merge_tuning,
        merge_writes=table.merge_writes,
    )
    writer = writer_for(table.mode, spark, lake)
    try:
        phase(STAGING)
        staged = writer.stage(delta, plan)
        phase(COMMITTING)
        return writer.commit(staged, plan), batch
    except Exception as exc:
        raise failed_write(table, lake, plan.txn, exc) from None


def _typed(
    spark: SparkSession,
    table: TableSpec,
    schema: T.StructType,
    rows: list[dict[str, str | None]],
    deleted: list[dict[str, str | None]],
) -> DataFrame:
    """The log's text values as the source's types (as a full load reads them), with `DELETED`
    marking the keys to delete."""
    import pyarrow as pa

    names = [f.name for f in schema.fields]
    texts = {n: pa.array([r.get(n) for r in [*rows, *deleted]], pa.string()) for n in names}
    marks = pa.array([False] * len(rows) + [True] * len(deleted), pa.bool_())
    frame = spark.createDataFrame(pa.table({**texts, DELETED: marks}))
    return frame.select(*[_cast(table, f).alias(f.name) for f in schema.fields], F.col(DELETED))


def _with_moves(changes: list[Change], key: tuple[str, ...]) -> list[Change]:
    """The changes, each update that moved its row to another key preceded by the delete of the
    old key, so that the log replayed in order leaves no row at the old key."""
    logged: list[Change] = []
    for change in changes:
        old = moved_from(change, key)
        if old is not None:
            logged.append(Change("delete", change.lsn, dict(zip(key, old, strict=True))))
        logged.append(change)
    return logged


def _change_log(
    spark: SparkSession, table: TableSpec, schema: T.StructType, changes: list[Change]
) -> DataFrame:
    """Every change as a row: its values, what it did, its transaction's position, its order."""
    import pyarrow as pa

    clash = [c for c in (CHANGE_OP, CHANGE_LSN, CHANGE_SEQ) if c in schema.names]
    if clash:
        raise ConfigError(
            TableProblem(
                table.name,
                f"the source has column(s) {', '.join(clash)}, which an append table captured "
                "from the log adds for each change.",
                "capture",
                "rename the column(s) in the source, or load the table in merge mode.",
            )
        )
    names = [f.name for f in schema.fields]
    texts = {n: pa.array([c.values.get(n) for c in changes], pa.string()) for n in names}
    frame = spark.createDataFrame(
        pa.table(
            {
                **texts,
                CHANGE_OP: pa.array([c.op for c in changes], pa.string()),
                CHANGE_LSN: pa.array([c.lsn for c in changes], pa.int64()),
                CHANGE_SEQ: pa.array(range(len(changes)), pa.int64()),
            }
        )
    )
    return frame.select(
        *[_cast(table, f).alias(f.name) for f in schema.fields],
        F.col(CHANGE_OP),
        F.col(CHANGE_LSN),
        F.col(CHANGE_SEQ),
    )


def _cast(table: TableSpec, field: T.StructField) -> Column:
    """A value as PostgreSQL prints it (ISO dates, UTC, hex bytes) as the column's Spark type."""
    text = column_named(field.name)
    kind = field.dataType
    if isinstance(kind, T.StringType):
        return text
    if isinstance(kind, T.BinaryType):  # bytea prints as \x and hex; bit strings as 0s and 1s
        hexed = text.startswith("\\x")
        return F.when(hexed, F.unhex(F.substring(text, 3, 1 << 30))).otherwise(
            F.encode(text, "UTF-8")
        )
    if isinstance(kind, T.DecimalType):
        return decimal_fits(table, field.name, kind, text)
    if is_time_of_day(field):  # read as a timestamp on 1970-01-01, as the full load reads it
        midnight = F.concat(F.lit("1970-01-02 00"), F.substring(text, 3, 1 << 30))
        text = F.when(text.startswith("24:"), midnight).otherwise(
            F.concat(F.lit("1970-01-01 "), text)
        )
    if isinstance(kind, T.DateType | T.TimestampType | T.TimestampNTZType):
        return _finite(table, field.name, _astronomical(text), kind)
    if isinstance(kind, T.ArrayType | T.MapType | T.StructType):
        raise ConfigError(
            TableProblem(
                table.name,
                f"column {field.name} is {kind.simpleString()}, which log capture can't read "
                "from the log's text yet.",
                "exclude_columns",
                f"leave it out (exclude_columns: [{field.name}]), or capture the table with a "
                "`cursor:`.",
            )
        )
    return text.cast(kind)


def _finite(table: TableSpec, name: str, text: Column, kind: T.DataType) -> Column:
    """A date or timestamp, or a failure naming the column when it is PostgreSQL's infinity,
    which the lake can't store (as the full load refuses it)."""
    if isinstance(kind, T.TimestampType):
        # timestamptz prints its offset as +00; Spark reads +00:00
        text = F.regexp_replace(text, r"([+-][0-9]{2})$", "$1:00")
    message = F.concat(
        F.lit(f"column '{name}' of table '{table.name}' holds "),
        text,
        F.lit(
            ", which the lake can't store. Fix: change the value in the source (or leave the "
            f"column out: exclude_columns: [{name}]), then run the table with --full: the "
            "change stays in the log"
        ),
    )
    infinite = F.lower(text).isin("infinity", "-infinity")
    return F.when(infinite, F.raise_error(message)).otherwise(text.cast(kind))


def _astronomical(text: Column) -> Column:
    """A date PostgreSQL prints as `0044-03-15 BC` in the year numbering Spark reads (-0043):
    1 BC is year 0."""
    body = F.regexp_replace(text, " BC$", "")
    year = F.regexp_extract(body, r"^([0-9]+)", 1).cast("int") - 1
    shifted = F.concat(
        F.lit("-"), F.lpad(year.cast("string"), 4, "0"), F.regexp_replace(body, r"^[0-9]+", "")
    )
    return F.when(text.endswith(" BC"), shifted).otherwise(text)


def _result(
    request: LoadRequest,
    facts: LakeFacts,
    read: LogRead,
    outcome: WriteOutcome,
    batch: int,
    report: Report,
    started: float,
    extracted: float | None,
) -> LoadResult:
    table = request.table
    lake = request.lake_table
    finished = time.monotonic()
    extracted = finished if extracted is None else extracted
    return LoadResult(
        mode=table.mode,
        cursor_column=None,
        cursor_type=log_of(table).cursor_type,
        previous_cursor=_parsed(log_of(table).cursor_type, read.since),
        cursor=_parsed(log_of(table).cursor_type, read.position),
        # A TRUNCATE replaced a merge table by the rows that followed it
        full_refresh=_merge(table) and any(c.op == "truncate" for c in read.gathered.changes),
        batch=batch,
        extract_filter=f"log {read.since} .. {read.position}",
        written=outcome,
        row_count=rows_after(lake, request.stored, facts, outcome),
        uri=lake.uri,
        extract_seconds=extracted - started,
        write_seconds=finished - extracted,
        report=report,
        primary_key=table.primary_key,
        head=outcome.head or facts.head,
        settings=request.settings,
        table_name=lake.identifier,
    )


def _parsed(kind: CursorType, text: str) -> int | str:
    value = parse_cursor(kind, text)
    assert isinstance(value, int | str)
    return value
