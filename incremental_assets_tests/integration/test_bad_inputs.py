"""Broken sources and bad state: a message naming the table and the cause, nothing written."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema

DEFAULTS = {**ORDERS_MERGE, "transaction_cap": False}


def _break(db: SourceDb, case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Source and table settings that break the load in the named way."""
    url = db.source()["url"]
    if case == "unreachable":
        return {"url": url.replace(f":{db.server.port}/", ":1/")}, {}
    if case == "credentials":
        return {"password": "wrong"}, {}
    if case == "missing table":
        return {}, {"table": f"{db.name}.no_such_table"}
    if case == "missing column":
        db.execute("ALTER TABLE orders RENAME COLUMN updated_at TO changed_at")
        return {}, {}
    if case == "application name in properties":
        return {"properties": {"ApplicationName": "nightly-etl"}}, {}
    if case == "application name in url":
        return {"url": f"{url}?ApplicationName=nightly-etl"}, {}
    if case == "bad query":
        query = f"SELECT id, updated_at, 1 / (id - id) AS boom FROM {db.name}.orders"
        if db.kind == "mariadb":  # where 1/0 is NULL: a function that doesn't exist
            query = f"SELECT id, updated_at, no_such_function(id) AS boom FROM {db.name}.orders"
        return {}, {"query": query}
    raise AssertionError(case)


_UNREACHABLE = "check that the database is running"
_MISSING_TABLE = "`table:` of table 'orders' names a table the database doesn't have"
_MISSING_COLUMN = ["field 'cursor': column 'updated_at' is not in", "(columns: id, changed_at)"]
_BAD_QUERY = "the `query:` of table 'orders' must run on its own"
CASES = [
    ("postgres", "unreachable", ["Connection to 127.0.0.1:1 refused", _UNREACHABLE]),
    ("mariadb", "unreachable", ["Connection refused", _UNREACHABLE]),
    (
        "postgres",
        "credentials",
        [
            "password authentication failed for user",
            "check the user (postgres) and password of source 'shop'",
        ],
    ),
    (
        "mariadb",
        "credentials",
        ["Access denied for user 'test'", "check the user (test) and password of source 'shop'"],
    ),
    ("postgres", "missing table", ["does not exist", _MISSING_TABLE]),
    ("mariadb", "missing table", ["doesn't exist", _MISSING_TABLE]),
    ("postgres", "missing column", _MISSING_COLUMN),
    ("mariadb", "missing column", _MISSING_COLUMN),
    ("postgres", "bad query", ["division by zero", _BAD_QUERY]),
    ("mariadb", "bad query", ["no_such_function", _BAD_QUERY]),
    *(
        (
            "postgres",
            f"application name in {place}",
            ["source 'shop' sets ApplicationName", "remove ApplicationName from the properties"],
        )
        for place in ("properties", "url")
    ),
]


@pytest.mark.parametrize(
    ("db", "case", "expected"),
    CASES,
    ids=[f"{kind}-{case}" for kind, case, _ in CASES],
    indirect=["db"],
)
def test_a_broken_source_fails_clearly_and_moves_nothing(
    loads: Loads,
    db: SourceDb,
    case: str,
    expected: list[str],
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, updated_at {tstz})")
    db.execute("INSERT INTO orders VALUES (1, '2025-01-01'), (2, '2025-01-02')")
    loads.configure(db, DEFAULTS)
    first = loads.run()
    files = loads.files()
    db.execute("INSERT INTO orders VALUES (3, '2025-01-03')")
    source, table = _break(db, case)

    loads.configure(db, DEFAULTS, source=source, **table)
    run = loads.run()

    assert first.success, first.failure
    assert not run.success
    assert (run.failure or "").startswith(
        "dagster._core.definitions.events.Failure: Table 'orders'"
    )
    for words in expected:
        assert words in (run.failure or "")
    assert "Traceback" not in (run.failure or "")
    assert loads.files() == files
    assert loads.metadata()["cursor"] == first.metadata["cursor"]


def test_a_stored_cursor_that_cannot_be_parsed_is_refused_until_a_full_refresh(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, updated_at timestamptz NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, '2025-01-01')")
    loads.configure(pg, DEFAULTS)
    assert loads.run().success
    files = loads.files()
    loads.instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key="orders",
            metadata={
                "cursor": "next tuesday",
                "cursor_column": "updated_at",
                "cursor_type": "timestamptz",
                "batch": 1,
            },
        )
    )

    run = loads.run()
    untouched = loads.files() == files
    refresh = loads.run(full_refresh=True)

    assert not run.success
    assert "Table 'orders': the stored cursor 'next tuesday'" in (run.failure or "")
    assert "can't be read as the timestamptz column 'updated_at'" in (run.failure or "")
    assert "run a full refresh" in (run.failure or "")
    assert untouched
    assert refresh.success and refresh.metadata["cursor"] == "2025-01-01T00:00:00.000000+00:00"
