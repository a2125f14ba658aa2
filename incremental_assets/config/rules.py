"""Every rule a table's settings must follow, checked in one place and worded once.

Rules that need the cursor's type are checked against the declared type when the configuration
is loaded, and against the type the source reports when a run starts (`check_cursor_rules`): the
same problems, in the same words. `time_limits` says which limits apply to a cursor: the safety
lag, the future tolerance and the transaction cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from incremental_assets.config.durations import parse_duration
from incremental_assets.config.models import Mode, TableSpec
from incremental_assets.config.sources import FilesSourceSpec, JdbcSourceSpec
from incremental_assets.cursor import CursorType, CursorValue, parse_cursor
from incremental_assets.errors import ConfigError, CursorError, Problem, TableProblem
from incremental_assets.window import Lookback


def table_problems(table: TableSpec) -> list[Problem]:
    """What is wrong with a validated table's settings together, as far as the config can tell."""
    where = f"table '{table.name}'"
    problems = [Problem(where, field, message) for field, message in _setting_rules(table)]
    if table.cursor is not None and table.cursor.declared_type is not None:
        problems += cursor_problems(table, table.cursor.declared_type)
    return problems


def cursor_problems(table: TableSpec, cursor_type: CursorType) -> list[Problem]:
    """The rules that depend on the cursor's type, for the type declared or read from the source."""
    where = f"table '{table.name}'"
    return [Problem(where, field, message) for field, message in _cursor_rules(table, cursor_type)]


def check_cursor_rules(table: TableSpec, cursor_type: CursorType) -> None:
    """At run time, once the source has told the cursor's type: the config's rules, same words."""
    for problem in cursor_problems(table, cursor_type):
        raise ConfigError(TableProblem(table.name, problem.message + ".", problem.field))


def _setting_rules(t: TableSpec) -> Iterator[tuple[str, str]]:
    if isinstance(t.source, JdbcSourceSpec) and (t.table is None) == (t.query is None):
        yield "table", "give exactly one of `table` (schema.table) or `query` (a SELECT)"
    if isinstance(t.source, FilesSourceSpec):
        if t.query is not None:
            yield (
                "query",
                "files sources read `table` (a folder under the source path), not `query`",
            )
        if t.table is None:
            yield "table", "name the folder (or glob) under the source path to read"
    key_from_source = isinstance(t.source, JdbcSourceSpec) and t.query is None
    if t.mode is Mode.MERGE and not t.primary_key and not key_from_source:
        yield (
            "primary_key",
            "merge mode needs the primary key columns, e.g. primary_key: [id] (only a jdbc "
            "`table:` may leave it out, to have it read from the database)",
        )
    if t.schedule and t.automation:
        yield "automation", "choose either `schedule:` or `automation:`, not both"
    if t.reconcile_tolerance is not None and t.mode is not Mode.MERGE:
        yield "checks.reconcile_counts", "compares row counts of merge tables only"
    if "key_unique_blocking" in t.checks.model_fields_set and t.mode is not Mode.MERGE:
        yield "checks.key_unique_blocking", "primary_key_unique checks merge tables only"
    if t.checks.key_audit is not None and t.mode is not Mode.MERGE:
        yield "checks.key_audit", "audits the primary key of merge tables only"
    if t.columns is not None and t.exclude_columns:
        yield "exclude_columns", "give either `columns:` or `exclude_columns:`, not both"
    if t.deletes == "reconcile" and t.mode is not Mode.MERGE:
        yield (
            "deletes",
            "reconcile removes keys from a merge table; use mode: merge with a primary_key",
        )
    if t.delete_column and t.mode is not Mode.MERGE:
        yield (
            "delete_column",
            "only merge mode removes deleted rows; use mode: merge or drop delete_column",
        )
    if t.capture == "log":
        yield from _log_rules(t)
    elif t.slot is not None:
        yield "slot", "names the replication slot of a `capture: log` table; remove it"
    if t.cursor is None:
        for name, value in (
            ("start", t.start),
            ("lookback", t.lookback),
            ("safety_lag", t.safety_lag),
        ):
            if value is not None:
                yield name, "has no effect without a cursor; set `cursor:` or remove it"


def _log_rules(t: TableSpec) -> Iterator[tuple[str, str]]:
    """A table captured from the log: a database table, its changes kept by key or logged."""
    logged = ("jdbc:postgresql:", "jdbc:mysql:", "jdbc:mariadb:")
    if not isinstance(t.source, JdbcSourceSpec) or not t.source.url.startswith(logged):
        yield (
            "capture",
            "log capture reads PostgreSQL's write-ahead log or MySQL's and MariaDB's binary "
            "log; this source is neither (use `cursor:` capture)",
        )
    if t.query is not None:
        yield "query", "a `capture: log` table reads a `table:`, whose changes the log holds"
    elif t.table is not None and "." not in t.table:
        yield (
            "table",
            "a `capture: log` table names its schema (`schema.table`; MySQL: `database.table`): "
            "the log names tables so, whatever the connection's search path",
        )
    if t.cursor is not None:
        yield "cursor", "a `capture: log` table's cursor is the log position; remove `cursor:`"
    if t.mode is Mode.FULL_REFRESH:
        yield "mode", "log capture keeps the latest row per key (merge) or every change (append)"
    for name, value in (("deletes", t.deletes), ("delete_column", t.delete_column)):
        if value is not None:
            yield name, "a `capture: log` table gets its deletes from the log; remove it"


def _cursor_rules(t: TableSpec, cursor_type: CursorType) -> Iterator[tuple[str, str]]:
    if t.safety_lag is not None and not cursor_type.is_temporal:
        yield "safety_lag", f"applies to date and timestamp cursors, not {cursor_type.value}"
    if t.lookback is not None:
        try:
            lookback_for(cursor_type, t.lookback)
        except ValueError as exc:
            yield "lookback", str(exc)
    if t.start is not None:
        try:
            parse_cursor(cursor_type, t.start)
        except CursorError as exc:
            yield "start", str(exc)


def lookback_for(cursor_type: CursorType, lookback: str | int | Decimal) -> Lookback:
    """What a validated `lookback:` means for a cursor of this type; ValueError says what to
    write."""
    if cursor_type is CursorType.STRING:
        raise ValueError("string cursors have no distance to look back by; remove lookback")
    if cursor_type.is_temporal:
        if not isinstance(lookback, str):
            raise ValueError(
                f"{cursor_type.value} cursors look back by a duration, e.g. lookback: 5m"
            )
        return parse_duration(lookback)
    if isinstance(lookback, str):
        raise ValueError(f"{cursor_type.value} cursors look back by a number, e.g. lookback: 1000")
    if cursor_type is CursorType.INTEGER and isinstance(lookback, Decimal):
        raise ValueError(
            f"integer cursors can't look back by a fraction ({lookback}); write a whole number"
        )
    return lookback


def start_value(table: TableSpec, cursor_type: CursorType) -> CursorValue | None:
    """`start:` as a value of the cursor's type (the rules have checked it parses)."""
    return None if table.start is None else parse_cursor(cursor_type, table.start)


def lookback_value(table: TableSpec, cursor_type: CursorType) -> Lookback | None:
    """`lookback:` in the cursor's terms (the rules have checked it fits)."""
    return None if table.lookback is None else lookback_for(cursor_type, table.lookback)


@dataclass(frozen=True)
class TimeLimits:
    """How far below the clock a run stops, for a cursor of one type."""

    safety_lag: timedelta | None = None  # rows younger than this wait for a later run
    future_tolerance: timedelta | None = None  # the cursor stops at the clock plus this
    transaction_cap: bool = False  # the cursor stays below the oldest open transaction


def time_limits(table: TableSpec, cursor_type: CursorType) -> TimeLimits:
    """The limits that apply: all three to time cursors (as configured), none to other cursors."""
    if not cursor_type.is_temporal:
        return TimeLimits()
    return TimeLimits(table.safety_lag, table.future_tolerance, table.transaction_cap)
