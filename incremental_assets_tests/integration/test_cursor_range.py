"""Cursor values PostgreSQL holds but Python can't: the run fails clearly, never reads a wrong
window."""

from __future__ import annotations

import pytest

from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.postgres import Schema


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("'infinity'", "infinity"),
        ("'0044-03-15 10:00:00 BC'", "outside years 1-9999"),
    ],
)
def test_a_wall_clock_cursor_beyond_python_years_fails_the_run(
    loads: Loads,
    pg: Schema,
    value: str,
    message: str,
) -> None:
    pg.execute(
        "CREATE TABLE events (id int PRIMARY KEY, at timestamp NOT NULL)",
        f"INSERT INTO events VALUES (1, {value})",
    )
    loads.configure(
        pg,
        "events",
        mode="append",
        cursor="at",
        # An open transaction elsewhere would hold the row back, and the run with it.
        transaction_cap=False,
    )

    run = loads.run()

    assert not run.success, f"the run succeeded with a wrong window: {run.metadata}"
    assert message in (run.failure or ""), run.failure
    assert "Table 'events'" in (run.failure or ""), run.failure
    assert loads.files() == []
