"""The load's decisions, each stated on its own: no Spark job, no database, no Dagster instance.

A fake source stands in for the bounds query: it reports a fixed `Bounds` and remembers the
`FreezeRequest` it was asked, so each test says what the plan asks and what it decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from incremental_assets.backfill import BACKFILL_FIELDS, check_backfill_window, plan_backfill
from incremental_assets.config import Mode, TableSpec, project_from_mapping
from incremental_assets.cursor import CursorType, CursorValue, format_cursor
from incremental_assets.decisions import RunKind
from incremental_assets.dialects import POSTGRES, Dialect
from incremental_assets.errors import ConfigError, CursorError, SourceError
from incremental_assets.plan import (
    BOUNDARY_WARNING_ROWS,
    PlanInputs,
    WindowPlan,
    boundary_of,
    check_null_cursors,
    collated_cursor,
    describe_bounds,
    lower_bound_of,
    plan_window,
    read_previous_cursor,
    reconciles,
)
from incremental_assets.results import StoredState
from incremental_assets.sources.base import (
    Bounds,
    Cursor,
    FreezeRequest,
    Partitioning,
    TransactionCap,
)
from incremental_assets.sources.transactions import OpenTransactions, cap_limits
from incremental_assets.window import Window, render_window
from incremental_assets_tests.support.specs import table_on

PROPERTY = settings(derandomize=True, max_examples=100, deadline=None)

SPARK_TYPES: dict[CursorType, T.DataType] = {
    CursorType.INTEGER: T.LongType(),
    CursorType.DECIMAL: T.DecimalType(38, 6),
    CursorType.DATE: T.DateType(),
    CursorType.TIMESTAMP: T.TimestampNTZType(),
    CursorType.TIMESTAMPTZ: T.TimestampType(),
    CursorType.STRING: T.StringType(),
}
INTEGER = CursorType.INTEGER
TSZ = CursorType.TIMESTAMPTZ
NOON = datetime(2025, 3, 1, 12, tzinfo=UTC)
FULL_REFRESH_FIX = "full_refresh: true"


def table_spec(**settings: Any) -> TableSpec:
    """One table on a files source, as the configuration would give it; None drops a setting."""
    entry = {"name": "orders", "source": "landing", "table": "orders", "cursor": "updated_at"}
    entry = {k: v for k, v in {**entry, **settings}.items() if v is not None}
    raw = {
        "lake": {"path": "/lake"},
        "sources": {"landing": {"type": "files", "path": "/landing", "format": "parquet"}},
        "tables": [entry],
    }
    return project_from_mapping(raw, Path("/project/incremental_assets.yaml")).tables[0]


@dataclass
class FakeSource:
    """A source whose bounds query always finds `bounds`."""

    cursor_type: CursorType
    bounds: Bounds
    dialect: Dialect = POSTGRES
    requests: list[FreezeRequest] = field(default_factory=list)

    def describe(self) -> str:
        return "a fake source"

    def schema(self) -> T.StructType:
        return T.StructType(
            [
                T.StructField("id", T.LongType()),
                T.StructField("updated_at", SPARK_TYPES[self.cursor_type]),
            ]
        )

    def freeze(self, request: FreezeRequest) -> Bounds:
        self.requests.append(request)
        return self.bounds

    def read(
        self, window: Window | None, bounds: Bounds | None, partitioning: Partitioning | None
    ) -> DataFrame:
        raise AssertionError("a plan reads no rows")

    def read_keys(self) -> DataFrame:
        raise AssertionError("a plan reads no keys")

    def primary_key(self) -> tuple[str, ...]:
        return ()

    def match_key(self) -> tuple[str, ...]:
        raise AssertionError("a plan matches no keys")

    def weighed_by(self) -> dict[str, str]:
        raise AssertionError("a plan weighs no keys")


def stored(
    cursor: str | None,
    kind: CursorType | None = INTEGER,
    batch: int = 1,
    column: str = "updated_at",
) -> StoredState:
    if cursor is None:
        return StoredState.initial()
    return StoredState(
        cursor=cursor, cursor_column=column, cursor_type=kind, batch=batch, run_id="run-7"
    )


def plan_of(
    table: TableSpec,
    source: FakeSource,
    state: StoredState,
    full_refresh: bool = False,
    lake_has_files: bool = True,
) -> WindowPlan:
    """The plan of the kind of run `decisions.kind_of_run` gives these inputs (its own tests
    cover that decision)."""
    replace_all = (
        full_refresh
        or table.mode is Mode.FULL_REFRESH
        or table.cursor is None
        or state.cursor is None
    )
    kind = RunKind(
        replace_all=replace_all,
        read_to_newest=replace_all and (table.mode is Mode.FULL_REFRESH or lake_has_files),
    )
    return plan_window(PlanInputs(table, source, state, kind))


INCREMENTAL = RunKind(replace_all=False, read_to_newest=False)


def integer_plan(
    previous: int | None, upper: int | None, **settings: Any
) -> tuple[WindowPlan, FakeSource]:
    source = FakeSource(INTEGER, Bounds(upper=upper, rows=0 if upper is None else 5, newest=upper))
    state = stored(None if previous is None else str(previous))
    return plan_of(table_spec(**settings), source, state), source


# -- the lower bound ------------------------------------------------------------------------------


def test_a_first_run_reads_everything_up_to_the_frozen_bound() -> None:
    source = FakeSource(INTEGER, Bounds(upper=90, rows=90, newest=95))
    plan = plan_of(table_spec(), source, stored(None), lake_has_files=False)

    assert source.requests[0].lower is None
    assert plan.replace_all and plan.previous is None and not plan.read_to_newest
    assert plan.window == Window("updated_at", INTEGER, None, 90)
    assert plan.new_cursor == plan.recorded_cursor == 90


def test_a_first_run_starts_at_start_when_one_is_set() -> None:
    source = FakeSource(INTEGER, Bounds(upper=90, rows=40))
    plan = plan_of(table_spec(start=50), source, stored(None), lake_has_files=False)
    assert source.requests[0].lower == 50
    assert plan.window is not None and plan.window.lower == 50


def test_a_snapshot_over_a_lake_that_has_files_reads_to_the_newest_row_but_records_the_bound() -> (
    None
):
    source = FakeSource(INTEGER, Bounds(upper=90, rows=90, newest=95))
    plan = plan_of(table_spec(), source, stored(None), lake_has_files=True)
    assert plan.read_to_newest
    assert plan.window is not None and plan.window.upper == 95
    assert plan.new_cursor == 90


def test_a_table_without_a_cursor_is_replaced_whole_and_asks_the_source_for_no_bound() -> None:
    source = FakeSource(INTEGER, Bounds(upper=None, rows=0))
    plan = plan_of(table_spec(cursor=None), source, stored(None))
    assert plan.cursor is None and plan.replace_all and plan.window is None
    assert source.requests == []


@given(previous=st.integers(-(10**18), 10**18), upper_above=st.integers(0, 10**6))
@PROPERTY
def test_a_stored_cursor_is_an_inclusive_lower_bound_so_ties_are_read_again(
    previous: int, upper_above: int
) -> None:
    plan, source = integer_plan(previous, previous + upper_above)

    assert source.requests[0].lower == previous
    assert plan.window is not None and plan.window.lower == previous
    assert not plan.replace_all
    assert render_window(plan.window, POSTGRES).startswith(f'"updated_at" >= {previous} ')


@given(previous=st.integers(-(10**18), 10**18), lookback=st.integers(0, 10**12))
@PROPERTY
def test_an_integer_lookback_lowers_the_lower_bound_by_exactly_its_width(
    previous: int, lookback: int
) -> None:
    plan, source = integer_plan(previous, previous, lookback=lookback)
    assert source.requests[0].lower == previous - lookback
    assert plan.window is not None and plan.window.lower == previous - lookback


@given(
    previous=st.datetimes(
        min_value=datetime(1000, 1, 1), max_value=datetime(9000, 1, 1), timezones=st.just(UTC)
    ),
    seconds=st.integers(0, 10**8),
)
@PROPERTY
def test_a_duration_lookback_lowers_a_time_cursor_by_exactly_its_width(
    previous: datetime, seconds: int
) -> None:
    source = FakeSource(TSZ, Bounds(upper=previous, rows=1))
    state = stored(format_cursor(TSZ, previous), TSZ)
    plan = plan_of(table_spec(lookback=f"{seconds}s"), source, state)
    assert source.requests[0].lower == previous - timedelta(seconds=seconds)
    assert plan.window is not None and plan.window.lower == previous - timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("kind", "stored_text", "lookback", "lower"),
    [
        (CursorType.DECIMAL, "10.25", "0.5", Decimal("9.75")),
        (CursorType.DATE, "2025-03-10", "2d", date(2025, 3, 8)),
        (CursorType.DATE, "2025-03-10", "1h", date(2025, 3, 9)),  # a part day is a whole day
        (CursorType.TIMESTAMP, "2025-03-10T00:00:00", "90m", datetime(2025, 3, 9, 22, 30)),
    ],
)
def test_lookback_for_other_cursor_types(
    kind: CursorType, stored_text: str, lookback: str, lower: CursorValue
) -> None:
    table = table_spec(lookback=lookback)
    cursor = Cursor("updated_at", kind)
    previous = read_previous_cursor(table, stored(stored_text, kind), cursor, full_refresh=False)
    assert lower_bound_of(table, cursor, previous, replace_all=False) == (lower, ())


def test_a_lookback_reaching_below_year_one_means_no_lower_bound() -> None:
    table = table_spec(lookback="3d")
    cursor = Cursor("updated_at", TSZ)
    previous = datetime(1, 1, 2, tzinfo=UTC)
    assert lower_bound_of(table, cursor, previous, replace_all=False) == (None, ())


def test_a_snapshot_ignores_the_lookback_and_the_stored_cursor() -> None:
    table = table_spec(lookback=100, start=7)
    assert lower_bound_of(table, Cursor("updated_at", INTEGER), 500, replace_all=True) == (7, ())


def test_a_cursor_in_an_hour_the_zone_repeats_starts_again_at_that_hour() -> None:
    table = table_spec(timezone="Europe/Paris")
    cursor = Cursor("updated_at", CursorType.TIMESTAMP)
    # Clocks in Paris went back from 03:00 to 02:00 on 2025-10-26.
    lower, warnings = lower_bound_of(table, cursor, datetime(2025, 10, 26, 2, 30), False)
    assert lower == datetime(2025, 10, 26, 2)
    assert len(warnings) == 1
    assert "Europe/Paris repeats" in warnings[0] and "2025-10-26T02:00:00.000000" in warnings[0]
    assert lower_bound_of(table, cursor, datetime(2025, 10, 26, 3, 30), False) == (
        datetime(2025, 10, 26, 3, 30),
        (),
    )


def test_a_lookback_the_cursor_type_cannot_take_is_refused_at_run_time() -> None:
    source = FakeSource(CursorType.STRING, Bounds(upper="b", rows=1))
    with pytest.raises(ConfigError, match=r"field 'lookback'.*string cursors"):
        plan_of(table_spec(lookback=5), source, stored("a", CursorType.STRING))
    assert source.requests == []


# -- the new cursor -------------------------------------------------------------------------------


def test_nothing_new_when_the_window_is_empty_and_the_cursor_stays() -> None:
    plan, _ = integer_plan(previous=40, upper=None)
    assert plan.nothing_new
    assert plan.recorded_cursor == 40
    # Whatever the new cursor would have been, a run that found nothing records the old one.
    assert replace(plan, new_cursor=99).recorded_cursor == 40


def test_a_bound_equal_to_the_stored_cursor_reads_its_ties_again_and_keeps_the_cursor() -> None:
    # Ties are read again (a row committed late with the cursor's value is not lost), so the run
    # is not "nothing new"; it still records the same cursor.
    plan, _ = integer_plan(previous=40, upper=40)
    assert not plan.nothing_new
    assert plan.window is not None and (plan.window.lower, plan.window.upper) == (40, 40)
    assert plan.recorded_cursor == 40


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"null_cursor": "include", "bounds_nulls": 3}, "NULL-cursor rows belong to every window"),
        ({"deletes": "reconcile", "mode": "merge", "primary_key": ["id"]}, "reconcile is due"),
    ],
)
def test_an_empty_window_still_runs_when_there_is_work_besides_it(
    changes: dict[str, Any], why: str
) -> None:
    nulls = changes.pop("bounds_nulls", 0)
    source = FakeSource(INTEGER, Bounds(upper=None, rows=0, null_rows=nulls))
    plan = plan_of(table_spec(**changes), source, stored("40"))
    assert not plan.nothing_new, why


def test_an_empty_window_with_excluded_null_rows_is_nothing_new() -> None:
    source = FakeSource(INTEGER, Bounds(upper=None, rows=0, null_rows=3))
    plan = plan_of(table_spec(null_cursor="exclude"), source, stored("40"))
    assert plan.nothing_new and plan.recorded_cursor == 40


@given(
    previous=st.integers(-1000, 1000),
    upper=st.one_of(st.none(), st.integers(-1000, 1000)),
    cap=st.one_of(st.none(), st.integers(-1000, 1000)),
    lookback=st.one_of(st.none(), st.integers(0, 100)),
)
@PROPERTY
def test_the_recorded_cursor_never_moves_backwards(
    previous: int, upper: int | None, cap: int | None, lookback: int | None
) -> None:
    source = FakeSource(INTEGER, Bounds(upper=upper, rows=1, future_cap=cap))
    plan = plan_of(table_spec(lookback=lookback), source, stored(str(previous)))
    expected = previous
    if upper is not None:
        expected = max(previous, upper if cap is None else min(upper, cap))
    assert plan.recorded_cursor == expected
    assert isinstance(plan.recorded_cursor, int) and plan.recorded_cursor >= previous


@pytest.mark.parametrize(
    "inputs",
    [
        {"full_refresh": True},
        {"mode": "full_refresh"},
    ],
)
def test_a_full_refresh_may_move_the_cursor_backwards(inputs: dict[str, Any]) -> None:
    source = FakeSource(INTEGER, Bounds(upper=30, rows=30, newest=30))
    full_refresh = inputs.pop("full_refresh", False)
    plan = plan_of(table_spec(**inputs), source, stored("40"), full_refresh=full_refresh)
    assert plan.replace_all and plan.new_cursor == plan.recorded_cursor == 30
    assert source.requests[0].lower is None


def test_rows_dated_past_the_future_cap_are_read_but_the_cursor_stops_at_the_cap() -> None:
    cap = NOON + timedelta(minutes=5)
    source = FakeSource(TSZ, Bounds(upper=NOON + timedelta(days=3), rows=9, future_cap=cap))
    plan = plan_of(table_spec(), source, stored(format_cursor(TSZ, NOON), TSZ))

    assert plan.window is not None and plan.window.upper == NOON + timedelta(days=3)
    assert plan.recorded_cursor == cap
    assert plan.report.cursor_capped_at == "2025-03-01T12:05:00.000000+00:00"
    assert any("future_tolerance (2025-03-01T12:05:00.000000+00:00)" in w for w in plan.warnings)


def test_a_bound_below_the_future_cap_is_recorded_as_it_is() -> None:
    upper = NOON + timedelta(minutes=1)
    source = FakeSource(TSZ, Bounds(upper=upper, rows=9, future_cap=NOON + timedelta(minutes=5)))
    plan = plan_of(table_spec(), source, stored(format_cursor(TSZ, NOON), TSZ))
    assert plan.recorded_cursor == upper
    assert plan.report.cursor_capped_at is None and plan.warnings == ()


@pytest.mark.parametrize(
    ("boundary_rows", "warned"),
    [(BOUNDARY_WARNING_ROWS, False), (BOUNDARY_WARNING_ROWS + 1, True)],
)
def test_many_rows_on_the_bound_are_warned_about(boundary_rows: int, warned: bool) -> None:
    source = FakeSource(INTEGER, Bounds(upper=50, rows=1, boundary_rows=boundary_rows))
    plan = plan_of(table_spec(), source, stored("40"))
    assert plan.report.boundary_rows == boundary_rows
    assert any(f"{boundary_rows} rows share the cursor value 50" in w for w in plan.warnings) is (
        warned
    )


# -- the transaction cap --------------------------------------------------------------------------


def cap_plan(transaction: TransactionCap | None, **settings: Any) -> WindowPlan:
    source = FakeSource(TSZ, Bounds(upper=NOON, rows=4, transaction=transaction))
    return plan_of(table_spec(**settings), source, stored(format_cursor(TSZ, NOON), TSZ))


def test_no_cap_no_report() -> None:
    plan = cap_plan(None)
    assert plan.report.transaction_cap is None and plan.report.transaction_cap_applied is None


def test_no_open_transaction_holds_nothing_back() -> None:
    plan = cap_plan(TransactionCap(None, None, hidden_sessions=0, rows_held_back=0))
    assert plan.report.transaction_cap == "no other transaction open"
    assert plan.report.transaction_cap_applied is False
    assert plan.warnings == ()


def test_an_open_transaction_older_than_the_bound_is_named_with_the_rows_it_held_back() -> None:
    oldest = NOON - timedelta(minutes=10)
    plan = cap_plan(TransactionCap(oldest, "pid 4242 (writer)", 0, rows_held_back=3))
    assert plan.report.transaction_cap == "2025-03-01T11:50:00.000000+00:00: pid 4242 (writer)"
    assert plan.report.transaction_cap_applied is True
    assert plan.bounds is not None
    assert describe_bounds(plan.bounds) == (
        "4 rows up to the frozen bound, 3 held back by an open transaction"
    )


def test_hidden_sessions_make_the_cap_partial_and_say_how_to_see_them() -> None:
    plan = cap_plan(TransactionCap(None, None, hidden_sessions=2, rows_held_back=0))
    assert plan.report.transaction_cap == (
        "partial (2 sessions of other roles are hidden); no other transaction open"
    )
    assert len(plan.warnings) == 1 and "GRANT pg_read_all_stats" in plan.warnings[0]


STANDBY = "the source is a hot standby (pg_is_in_recovery())"


def blind(table: TableSpec) -> TransactionCap:
    """What the source makes of a cap that can't see the writers' transactions at all."""
    open_ = OpenTransactions(read_at=NOON, oldest_start=None, holder=None, blind_because=(STANDBY,))
    return TransactionCap(None, None, 0, 0, cap_limits(table, open_))


def test_a_blind_cap_with_a_lookback_runs_and_says_the_lookback_is_all_that_covers_it() -> None:
    table = table_spec(lookback="15m")
    plan = cap_plan(blind(table), lookback="15m")
    assert plan.report.transaction_cap == (
        f"no other transaction seen; {STANDBY}; rows that commit late are caught only by the "
        "lookback (15m)"
    )
    assert plan.report.transaction_cap_applied is False
    assert plan.warnings == (
        f"transaction cap: {STANDBY}; rows that commit late are caught only by the lookback (15m)",
    )


def test_a_blind_cap_without_a_lookback_is_refused_naming_the_table_and_the_fix() -> None:
    with pytest.raises(SourceError) as refused:
        blind(table_spec())
    message = str(refused.value)
    assert message.startswith("Table 'orders', field 'transaction_cap': ")
    assert STANDBY in message and "Nothing was read and the cursor did not move." in message
    assert "Fix: set `lookback:`" in message and "transaction_cap: false" in message


def test_a_cap_that_held_back_further_warns_each_reason() -> None:
    open_ = OpenTransactions(NOON, None, None, held_because=("3 sessions report no transactions",))
    limits = cap_limits(table_spec(), open_)
    plan = cap_plan(TransactionCap(None, None, 0, 1, limits))
    assert plan.report.transaction_cap == (
        "no other transaction seen; 3 sessions report no transactions"
    )
    assert plan.report.transaction_cap_applied is True
    assert plan.warnings == ("transaction cap: 3 sessions report no transactions",)


# -- NULL cursors ---------------------------------------------------------------------------------

NULLS = Bounds(upper=50, rows=5, null_rows=3)


def test_null_cursors_are_an_error_by_default_naming_the_count_and_the_settings() -> None:
    with pytest.raises(CursorError) as refused:
        check_null_cursors(table_spec(), Cursor("updated_at", INTEGER), NULLS)
    message = str(refused.value)
    assert message.startswith("Table 'orders': 3 rows have a NULL cursor (updated_at)")
    assert "null_cursor: include" in message and "null_cursor: exclude" in message


def test_a_plan_over_null_cursors_stops_before_deciding_anything() -> None:
    with pytest.raises(CursorError, match="3 rows have a NULL cursor"):
        plan_of(table_spec(), FakeSource(INTEGER, NULLS), stored("40"))


def test_no_null_cursors_no_error() -> None:
    check_null_cursors(table_spec(), Cursor("updated_at", INTEGER), replace(NULLS, null_rows=0))


def test_included_null_cursors_belong_to_the_window() -> None:
    plan = plan_of(table_spec(null_cursor="include"), FakeSource(INTEGER, NULLS), stored("40"))
    assert plan.window is not None and plan.window.include_nulls
    assert plan.report.null_cursor_rows == 3 and plan.warnings == ()


def test_excluded_null_cursors_are_left_out_and_counted_in_a_warning() -> None:
    plan = plan_of(table_spec(null_cursor="exclude"), FakeSource(INTEGER, NULLS), stored("40"))
    assert plan.window is not None and not plan.window.include_nulls
    assert plan.warnings == ("3 rows with a NULL updated_at were left out (null_cursor: exclude)",)


def test_describe_bounds_lists_only_what_is_there() -> None:
    assert describe_bounds(Bounds(upper=None, rows=0)) == "0 rows up to the frozen bound"
    assert describe_bounds(Bounds(upper=5, rows=7, boundary_rows=2, null_rows=1)) == (
        "7 rows up to the frozen bound, 2 on the bound itself, 1 with a NULL cursor"
    )


# -- the stored cursor ----------------------------------------------------------------------------


def test_a_stored_cursor_that_does_not_parse_is_refused_naming_table_value_and_fix() -> None:
    table, cursor = table_spec(), Cursor("updated_at", INTEGER)
    with pytest.raises(CursorError) as refused:
        read_previous_cursor(table, stored("12:30", INTEGER), cursor, full_refresh=False)
    message = str(refused.value)
    assert message.startswith("Table 'orders': the stored cursor '12:30'")
    assert "run run-7" in message and "integer column 'updated_at'" in message
    assert f"Fix: run a full refresh (asset config {FULL_REFRESH_FIX})" in message


def test_a_full_refresh_ignores_a_stored_cursor_that_does_not_parse() -> None:
    cursor = Cursor("updated_at", INTEGER)
    assert read_previous_cursor(table_spec(), stored("12:30"), cursor, full_refresh=True) is None
    source = FakeSource(INTEGER, Bounds(upper=9, rows=9))
    plan = plan_of(table_spec(), source, stored("12:30"), full_refresh=True)
    assert plan.previous is None and plan.new_cursor == 9


def test_a_stored_cursor_of_a_type_the_column_no_longer_has_names_both_types() -> None:
    with pytest.raises(CursorError) as refused:
        read_previous_cursor(
            table_spec(),
            stored("2025-01-01", CursorType.DATE),
            Cursor("updated_at", INTEGER),
            False,
        )
    message = str(refused.value)
    assert "was date when run run-7 recorded the cursor '2025-01-01', and is integer now" in message
    assert FULL_REFRESH_FIX in message


def test_a_stored_cursor_keeps_its_meaning_when_the_column_type_widens() -> None:
    previous = read_previous_cursor(
        table_spec(), stored("41", INTEGER), Cursor("updated_at", CursorType.DECIMAL), False
    )
    assert previous == Decimal(41)


def test_a_stored_cursor_of_another_column_is_refused_unless_refreshing() -> None:
    state, cursor = stored("41", column="created_at"), Cursor("updated_at", INTEGER)
    with pytest.raises(ConfigError, match=r"belongs to column 'created_at'.*uses 'updated_at'"):
        read_previous_cursor(table_spec(), state, cursor, full_refresh=False)
    assert read_previous_cursor(table_spec(), state, cursor, full_refresh=True) == 41


# -- backfills ------------------------------------------------------------------------------------


def test_a_backfill_is_bounded_on_both_sides_and_keeps_the_cursor() -> None:
    source = FakeSource(INTEGER, Bounds(upper=19, rows=10))
    inputs = PlanInputs(table_spec(lookback=5), source, stored("40"), INCREMENTAL)
    plan = plan_backfill(inputs, ("10", "20"))

    assert (source.requests[0].lower, source.requests[0].below) == (10, 20)
    assert plan.window == Window("updated_at", INTEGER, 10, 20, upper_edge="open")
    assert render_window(plan.window, POSTGRES) == '"updated_at" >= 10 AND "updated_at" < 20'
    assert plan.backfill and not plan.replace_all
    assert plan.new_cursor == plan.recorded_cursor == 40
    assert plan.report.backfill == "[10, 20)"


def test_a_backfill_that_finds_nothing_has_an_empty_window() -> None:
    source = FakeSource(INTEGER, Bounds(upper=None, rows=0))
    plan = plan_backfill(PlanInputs(table_spec(), source, stored("40"), INCREMENTAL), ("10", "20"))
    assert plan.window is not None and plan.window.empty


@given(low=st.integers(-(10**9), 10**9), high=st.integers(-(10**9), 10**9))
@PROPERTY
def test_a_backfill_window_is_accepted_exactly_when_it_is_not_empty(low: int, high: int) -> None:
    table, window = table_spec(), (str(low), str(high))
    if low < high:
        assert check_backfill_window(table, INTEGER, window, BACKFILL_FIELDS) == (low, high)
    else:
        with pytest.raises(ConfigError, match=r"is empty.*Fix: swap the two values\."):
            check_backfill_window(table, INTEGER, window, BACKFILL_FIELDS)


def test_an_inverted_backfill_is_refused_before_the_source_is_asked() -> None:
    source = FakeSource(INTEGER, Bounds(upper=19, rows=10))
    with pytest.raises(ConfigError, match=r"\[20, 10\) is empty; backfill_from is where it starts"):
        plan_backfill(PlanInputs(table_spec(), source, stored("40"), INCREMENTAL), ("20", "10"))
    assert source.requests == []


@pytest.mark.parametrize(
    ("window", "field_name"),
    [(("yesterday", "20"), "backfill_from"), (("10", "2025-01-01"), "backfill_to")],
)
def test_backfill_values_that_are_not_of_the_cursor_type_are_refused(
    window: tuple[str, str], field_name: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        check_backfill_window(table_spec(), INTEGER, window, BACKFILL_FIELDS)
    message = str(refused.value)
    assert message.startswith(f"Table 'orders', field '{field_name}': ")
    assert "not a valid integer cursor value" in message
    assert "The cursor column 'updated_at' is of type integer." in message


def test_string_backfills_are_refused_only_when_surely_empty() -> None:
    # A collation orders strings (a database's, or a Spark column's): only an equal pair is known
    # to be empty.
    kind = CursorType.STRING
    for table in (table_on("postgres"), table_spec()):
        assert check_backfill_window(table, kind, ("b", "a"), BACKFILL_FIELDS) == ("b", "a")
        with pytest.raises(ConfigError, match="is empty"):
            check_backfill_window(table, kind, ("a", "a"), BACKFILL_FIELDS)


def test_a_backfill_of_an_undeclared_type_is_checked_once_the_type_is_known() -> None:
    assert check_backfill_window(table_spec(), None, ("x", "y"), BACKFILL_FIELDS) is None


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"cursor": None}, "has no cursor"),
        ({"mode": "full_refresh"}, "a full_refresh table is replaced"),
    ],
)
def test_a_backfill_of_a_table_that_has_no_window_is_refused(
    settings: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        check_backfill_window(table_spec(**settings), INTEGER, ("1", "2"), BACKFILL_FIELDS)


# -- what the writer and the reconcile are told ---------------------------------------------------

RECONCILING = {"mode": "merge", "primary_key": ["id"], "deletes": "reconcile"}


@given(every=st.integers(1, 20), batch=st.integers(1, 1000))
@PROPERTY
def test_a_reconcile_is_due_exactly_every_reconcile_every_batches(every: int, batch: int) -> None:
    table = table_spec(**RECONCILING, reconcile_every=every)
    incremental = WindowPlan(cursor=Cursor("updated_at", INTEGER), replace_all=False)
    assert reconciles(table, incremental, batch) is (batch % every == 0)
    assert not reconciles(table, replace(incremental, replace_all=True), batch)
    assert not reconciles(table, replace(incremental, backfill=True), batch)


def test_a_reconcile_is_never_due_without_deletes_reconcile() -> None:
    plan = WindowPlan(cursor=Cursor("updated_at", INTEGER), replace_all=False)
    assert not reconciles(table_spec(mode="merge", primary_key=["id"]), plan, batch=1)


@pytest.mark.parametrize(("batch", "due"), [(2, False), (3, True)])
def test_a_plan_reconciles_on_the_batch_it_is_about_to_write(batch: int, due: bool) -> None:
    source = FakeSource(INTEGER, Bounds(upper=50, rows=1))
    table = table_spec(**RECONCILING, reconcile_every=4)
    # The stored batch is the last one written: this run writes batch + 1.
    assert plan_of(table, source, stored("40", batch=batch)).reconcile is due


def window_plan(mode: str, **changes: Any) -> tuple[TableSpec, WindowPlan]:
    settings = {"mode": mode, "primary_key": ["id"]} if mode == "merge" else {"mode": mode}
    table = table_spec(**settings, null_cursor="include")
    window = Window("updated_at", INTEGER, 35, 50, include_nulls=True)
    plan = WindowPlan(
        Cursor("updated_at", INTEGER), replace_all=False, previous=40, window=window, **changes
    )
    return table, plan


def test_append_checks_everything_from_the_lower_bound_against_the_lake() -> None:
    table, plan = window_plan("append")
    assert boundary_of(table, plan) == Window("updated_at", INTEGER, 35, include_nulls=True)


def test_merge_checks_only_what_lies_at_or_below_the_previous_cursor() -> None:
    table, plan = window_plan("merge")
    assert boundary_of(table, plan) == Window("updated_at", INTEGER, upper=40, include_nulls=True)


def test_a_backfill_checks_its_whole_window() -> None:
    table, plan = window_plan("append", backfill=True)
    assert boundary_of(table, plan) == plan.window


@pytest.mark.parametrize(
    ("mode", "changes"),
    [
        ("full_refresh", {}),
        ("append", {"replace_all": True}),
        ("append", {"previous": None}),
        ("append", {"window": None}),
    ],
)
def test_nothing_to_check_when_the_lake_holds_none_of_the_read(
    mode: str, changes: dict[str, Any]
) -> None:
    table, plan = window_plan(mode)
    assert boundary_of(table, replace(plan, **changes)) is None


@pytest.mark.parametrize(
    ("kind", "database", "collated"),
    [
        (CursorType.STRING, True, True),
        (CursorType.STRING, False, False),  # a files source: Spark orders its text
        (INTEGER, True, False),
    ],
)
def test_only_a_text_cursor_ordered_by_a_database_is_collated(
    kind: CursorType, database: bool, collated: bool
) -> None:
    table = table_on("postgres") if database else table_spec()
    plan = WindowPlan(Cursor("updated_at", kind), replace_all=False)
    assert collated_cursor(table, plan) is collated
    assert not collated_cursor(table, WindowPlan(None, replace_all=True))
