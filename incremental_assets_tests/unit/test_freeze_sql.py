"""`sources/freeze_sql.py` without a database: which statements a freeze runs, in what order, and
how its row becomes the window's bounds. The SQL itself runs against real servers in the
integration tests (test_late_commits.py, test_mysql.py)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from incremental_assets.config import JdbcSourceSpec, TableSpec, project_from_mapping
from incremental_assets.config.rules import TimeLimits
from incremental_assets.cursor import CursorType
from incremental_assets.errors import SourceError
from incremental_assets.sources import database_of
from incremental_assets.sources.base import Cursor, FreezeRequest
from incremental_assets.sources.database import Database
from incremental_assets.sources.freeze_sql import (
    bounds_sql,
    freeze,
    newest_loadable,
    newest_sql,
    relation_of,
)
from incremental_assets.sources.postgres import OPEN_TRANSACTIONS
from incremental_assets.sources.transactions import OpenTransactions

MICROS = 1_000_000
READ_AT = datetime(2025, 3, 1, 12, tzinfo=UTC)
OLDEST = datetime(2025, 3, 1, 11, 59, tzinfo=UTC)


def _micros(at: datetime) -> str:
    return str(int(at.timestamp()) * MICROS)


def table_spec(url: str = "jdbc:postgresql://db:5432/shop", **settings: Any) -> TableSpec:
    entry = {"name": "orders", "source": "db", "table": "public.orders", "cursor": "updated_at"}
    raw = {
        "lake": {"path": "/lake"},
        "sources": {"db": {"type": "jdbc", "url": url}},
        "tables": [{**entry, **settings}],
    }
    return project_from_mapping(raw, Path("/project/incremental_assets.yaml")).tables[0]


def request(*, cap: bool, future: timedelta | None = None) -> FreezeRequest:
    return FreezeRequest(
        cursor=Cursor("updated_at", CursorType.TIMESTAMPTZ),
        lower=None,
        timezone="UTC",
        limits=TimeLimits(transaction_cap=cap, future_tolerance=future),
    )


def _database(table: TableSpec) -> Database:
    assert isinstance(table.source, JdbcSourceSpec)
    return database_of(table.source)


class Statements:
    """Answers each statement by the first marker it contains, and keeps them in order."""

    def __init__(self, answers: list[tuple[str, Mapping[str, Any]]]) -> None:
        self.answers = answers
        self.statements: list[str] = []

    def __call__(self, sql: str) -> Mapping[str, Any]:
        self.statements.append(sql)
        for marker, row in self.answers:
            if marker in sql:
                return row
        raise AssertionError(f"unexpected statement: {sql}")


def open_transactions_row(**changes: Any) -> dict[str, Any]:
    row = {
        "read_at": _micros(READ_AT),
        "oldest": _micros(OLDEST),
        "holder": "pid 42 (app), open since 11:59",
        "hidden": 0,
        "untracked": 0,
        "untracked_since": None,
        "prepared": 0,
        "prepared_since": None,
        "standby": False,
    }
    return {**row, **changes}


BOUNDS_ROW = {
    "upper": _micros(OLDEST - timedelta(seconds=1)),
    "newest": _micros(READ_AT),
    "n": 7,
    "held": 2,
    "part_low": None,
    "part_high": None,
    "null_rows": 1,
    "boundary_rows": 3,
    "future_cap": None,
}


def test_under_the_cap_open_transactions_are_read_before_the_bounds_in_their_own_statement() -> (
    None
):
    table = table_spec()
    run = Statements([("pg_stat_activity", open_transactions_row()), ("AS upper", BOUNDS_ROW)])

    bounds = freeze(table, _database(table), request(cap=True), run)

    assert run.statements[0] == OPEN_TRANSACTIONS
    assert len(run.statements) == 2 and "AS upper" in run.statements[1]
    assert bounds.upper == OLDEST - timedelta(seconds=1)
    assert (bounds.rows, bounds.null_rows, bounds.boundary_rows) == (7, 1, 3)
    assert bounds.newest == READ_AT
    assert bounds.transaction is not None
    assert bounds.transaction.oldest_start == OLDEST
    assert bounds.transaction.rows_held_back == 2
    assert bounds.transaction.holder == "pid 42 (app), open since 11:59"


def test_without_the_cap_only_the_bounds_query_runs_and_nothing_is_held() -> None:
    table = table_spec(transaction_cap=False)
    run = Statements([("AS upper", BOUNDS_ROW)])

    bounds = freeze(table, _database(table), request(cap=False), run)

    assert len(run.statements) == 1
    assert "ahead.dated" not in run.statements[0]
    assert bounds.transaction is None


def test_a_standby_is_refused_before_anything_is_read_unless_a_lookback_covers_it() -> None:
    blind = open_transactions_row(standby=True)
    table = table_spec()
    run = Statements([("pg_stat_activity", blind), ("AS upper", BOUNDS_ROW)])

    with pytest.raises(SourceError) as refused:
        freeze(table, _database(table), request(cap=True), run)

    assert run.statements == [OPEN_TRANSACTIONS]
    assert "hot standby" in str(refused.value) and "lookback" in str(refused.value)
    covered = table_spec(lookback="10m")
    bounds = freeze(covered, _database(covered), request(cap=True), run)
    assert bounds.transaction is not None
    assert any("caught only by the lookback (10m" in w for w in bounds.transaction.limits)


def test_the_sensors_newest_value_is_read_after_the_same_open_transactions() -> None:
    table = table_spec()
    newest = _micros(OLDEST - timedelta(minutes=5))
    run = Statements(
        [("pg_stat_activity", open_transactions_row()), ("AS newest FROM", {"newest": newest})]
    )

    value = newest_loadable(table, _database(table), request(cap=True), run)

    assert run.statements[0] == OPEN_TRANSACTIONS
    assert value == OLDEST - timedelta(minutes=5)


@pytest.mark.parametrize("url", ["jdbc:postgresql://db/shop", "jdbc:mariadb://db/shop"])
def test_the_cap_and_the_future_tolerance_bound_both_queries(url: str) -> None:
    table = table_spec(url)
    dialect = _database(table).dialect
    open_ = OpenTransactions(read_at=READ_AT, oldest_start=OLDEST, holder=None)
    capped = request(cap=True, future=timedelta(minutes=1))

    bounds = bounds_sql(dialect, relation_of(table), capped, open_)
    newest = newest_sql(dialect, relation_of(table), capped, open_)
    uncapped = bounds_sql(dialect, relation_of(table), request(cap=False), None)

    # Below the cap, unless some row is dated after the clock; the cursor stops at the lower of
    # the clock plus the tolerance and the cap.
    assert "OR ahead.dated" in bounds and "least(" in bounds
    assert "OR ahead.dated" in newest and "least(" in newest
    assert "ahead.dated" not in uncapped
    assert "NULL AS future_cap" in uncapped


def test_a_query_table_is_read_as_a_subquery() -> None:
    table = table_spec(table=None, query="SELECT * FROM public.orders WHERE region = 'eu'")

    assert relation_of(table) == "(SELECT * FROM public.orders WHERE region = 'eu') AS q"
    assert relation_of(table_spec()) == "public.orders"
