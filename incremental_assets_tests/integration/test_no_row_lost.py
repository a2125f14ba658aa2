"""Unusual but ordinary situations that once lost or duplicated rows; each test failed before
its fix.

An emptied merge table, a snapshot taken while a transaction is open, a key column widened, and
identical rows in a table without a key. Each compares the lake with the source row for row,
on PostgreSQL and on MariaDB.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.loads import ITEMS_MERGE, Loads


def _source(db: SourceDb, columns: list[str], where: str = "TRUE") -> list[tuple[Any, ...]]:
    return sorted(db.query(f"SELECT {', '.join(columns)} FROM items WHERE {where}"))


@pytest.mark.parametrize("emptied_by", ["first_load_of_deleted_rows", "deleting_every_key"])
def test_a_merge_table_whose_lake_holds_no_file_takes_every_later_delta(
    loads: Loads,
    db: SourceDb,
    emptied_by: str,
) -> None:
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v {text}, at int NOT NULL, gone {bool})")
    loads.configure(db, ITEMS_MERGE, delete_column="gone")
    if emptied_by == "first_load_of_deleted_rows":
        db.execute("INSERT INTO items VALUES (1, 'a', 1, true), (2, 'b', 2, true)")
    else:
        db.execute("INSERT INTO items VALUES (1, 'a', 1, false), (2, 'b', 2, false)")
        assert loads.run().success
        db.execute("UPDATE items SET gone = true, at = at + 10")
    emptied = loads.run()
    db.execute("INSERT INTO items VALUES (3, 'c', 30, false), (4, 'd', 31, false)")

    later = loads.run()

    assert emptied.success and later.success, (emptied.failure, later.failure)
    assert emptied.metadata["dagster/row_count"] == 0
    assert later.metadata["rows_written"] == 2
    assert later.metadata["dagster/row_count"] == 2
    assert loads.rows(["id", "v"]) == [(3, "c"), (4, "d")]


@pytest.mark.parametrize("held_by", ["an_open_transaction", "safety_lag"])
@pytest.mark.parametrize("snapshot", ["full_refresh_mode", "full_refresh_of_a_merge_table"])
def test_a_full_refresh_snapshot_holds_every_row_whatever_caps_the_cursor(
    loads: Loads,
    db: SourceDb,
    held_by: str,
    snapshot: str,
) -> None:
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v {text}, at {tstz})")
    db.insert("items", [(i, "old", None) for i in range(1, 101)])
    db.execute("UPDATE items SET at = {day_ago}")
    options: dict[str, Any] = {"cursor": "at"}
    if snapshot == "full_refresh_mode":
        options["mode"] = "full_refresh"
    else:
        options |= {"mode": "merge", "primary_key": ["id"]}
    if held_by == "safety_lag":
        options["safety_lag"] = "1h"
    loads.configure(db, "items", **options)
    assert loads.run().success
    with db.open_transaction("items"):
        db.execute("UPDATE items SET v = 'new', at = {now} WHERE id <= 10")
        run = loads.run(full_refresh=True)

    assert run.success, run.failure
    assert run.metadata["dagster/row_count"] == 100
    assert loads.rows(["id", "v"]) == _source(db, ["id", "v"])
    # The cursor still stops below what the cap held back.
    assert (
        run.metadata["cursor"]
        < min(r[0] for r in db.query("SELECT at FROM items WHERE id <= 10")).isoformat()
    )


WIDENINGS = [
    ("numeric(12,0)", "numeric(20,0)"),
    ("numeric(10,2)", "numeric(14,4)"),
    ("smallint", "integer"),
    ("integer", "bigint"),
    ("real", "double precision"),
]
# On MariaDB, the ones that change how Spark types the key (REAL is already DOUBLE there, and
# the other integer and scale widenings take the same path); BIGINT UNSIGNED is a decimal.
MARIADB_WIDENINGS = [
    ("numeric(12,0)", "numeric(20,0)"),
    ("integer", "bigint"),
    ("integer", "integer unsigned"),
    ("bigint", "bigint unsigned"),
]


@pytest.mark.parametrize(
    ("db", "narrow", "wide"),
    [("postgres", *w) for w in WIDENINGS] + [("mariadb", *w) for w in MARIADB_WIDENINGS],
    indirect=["db"],
    ids=lambda t: t.replace(" ", "_"),
)
def test_widening_a_merge_key_keeps_one_row_per_key(
    loads: Loads,
    db: SourceDb,
    narrow: str,
    wide: str,
) -> None:
    db.execute(
        f"CREATE TABLE items (k {narrow}, part int, v {{text}}, at int NOT NULL, "
        "PRIMARY KEY (k, part))"
    )
    db.insert("items", [(i, i % 3, "v1", i) for i in range(1, 301)])
    # Many buckets, few changes: most buckets are untouched by the delta.
    loads.configure(db, ITEMS_MERGE, primary_key=["k", "part"], buckets=64)
    assert loads.run().success
    db.execute(
        db.alter_type("items", "k", wide),
        "UPDATE items SET v = 'v2', at = at + 1000 WHERE at % 50 = 0",
    )
    db.insert("items", [(i, i % 3, "v1", i + 1000) for i in range(301, 321)])
    assert loads.run().success
    db.execute("UPDATE items SET v = 'v3', at = at + 2000 WHERE at % 70 = 3")

    run = loads.run()

    assert run.success, run.failure
    lake = loads.rows(["k", "part", "v"])
    assert len({(k, part) for k, part, _ in lake}) == len(lake)  # no key twice
    assert [(Decimal(k), p, v) for k, p, v in lake] == [
        (Decimal(k), p, v) for k, p, v in _source(db, ["k", "part", "v"])
    ]
    assert run.metadata["dagster/row_count"] == 320


def test_identical_rows_without_a_key_are_each_kept(loads: Loads, db: SourceDb) -> None:
    """A third identical row arrives tied with the cursor after two were loaded."""
    db.execute(
        "CREATE TABLE items (sku {text}, qty int, at int NOT NULL)",
        "INSERT INTO items VALUES ('a', 1, 1), ('a', 1, 1)",
    )
    loads.configure(db, "items", mode="append", cursor="at", lookback=5)
    assert loads.run().success
    db.execute("INSERT INTO items VALUES ('a', 1, 1), ('b', 2, 2)")

    second = loads.run()
    third = loads.run()

    assert second.success and third.success, (second.failure, third.failure)
    assert second.metadata["rows_written"] == 2
    assert third.metadata["rows_written"] == 0
    assert loads.rows(["sku", "qty", "at"]) == _source(db, ["sku", "qty", "at"])


@pytest.mark.parametrize("change", ["dropped", "added_with_a_default"])
def test_rows_read_again_after_a_column_change_land_once_without_a_key(
    loads: Loads,
    db: SourceDb,
    change: str,
) -> None:
    """Inside the lookback, the lake's NULLs must not make re-read rows look new."""
    db.execute("CREATE TABLE items (sku {text}, qty int, note {text}, at int NOT NULL)")
    db.insert("items", [(f"s{i}", i, "n", i) for i in range(1, 11)])
    loads.configure(db, "items", mode="append", cursor="at", lookback=100)
    assert loads.run().success
    if change == "dropped":
        db.execute("ALTER TABLE items DROP COLUMN note", "INSERT INTO items VALUES ('s11', 11, 11)")
    else:
        db.execute("ALTER TABLE items ADD COLUMN color varchar(10) NOT NULL DEFAULT 'red'")
    runs = [loads.run() for _ in range(3)]

    assert all(run.success for run in runs), [run.failure for run in runs]
    expected = _source(db, ["sku", "qty", "at"])
    assert loads.rows(["sku", "qty", "at"]) == expected
    assert runs[-1].metadata["dagster/row_count"] == len(expected)


def test_a_merge_key_with_null_values_is_refused_and_loses_nothing(
    loads: Loads,
    db: SourceDb,
) -> None:
    """A unique column may hold NULL many times: as a merge key those rows collapsed into one."""
    db.execute("CREATE TABLE items (id int PRIMARY KEY, code {key_text} UNIQUE, at int NOT NULL)")
    db.insert("items", [(1, "a", 1), (2, "b", 2)])
    loads.configure(db, ITEMS_MERGE, primary_key=["code"])
    first = loads.run()
    db.execute("INSERT INTO items (id, at) VALUES (3, 3), (4, 4)")

    refused = loads.run()

    assert first.success, first.failure
    assert not refused.success
    assert "field 'primary_key': 2 of the rows read have NULL in a key column (code)" in (
        refused.failure or ""
    )
    assert loads.rows(["id", "code"]) == [(1, "a"), (2, "b")]
    assert loads.metadata()["cursor"] == first.metadata["cursor"]


@pytest.mark.parametrize("patched", [False, True], ids=["merged", "patched"])
def test_rows_that_share_a_key_and_cursor_value_but_differ_are_refused_and_lose_nothing(
    loads: Loads,
    db: SourceDb,
    patched: bool,
) -> None:
    """A configured key the source doesn't enforce (a view, a `query:`): one of two rows was
    dropped by a hash. Versions at different cursor values still merge (identical copies are
    one row: test_writers)."""
    lake = {"merge_tuning": {"patch_min_bytes": 0}} if patched else {}
    # The table's own key is n; the one named for the merge isn't enforced.
    db.execute(
        "CREATE TABLE items (n int PRIMARY KEY, id int NOT NULL, v {text} NOT NULL, "
        "at int NOT NULL)"
    )
    db.insert("items", [(1, 1, "a", 1), (2, 2, "c", 1)])
    loads.configure(db, ITEMS_MERGE, lake=lake)
    first = loads.run()
    db.insert("items", [(3, 1, "b", 1), (4, 3, "d", 2)])  # tied with the cursor: read with 'a'

    refused = loads.run()
    db.execute("DELETE FROM items WHERE v = 'b'")
    db.insert("items", [(6, 4, "x", 3), (7, 4, "y", 4)])
    later = loads.run()

    assert first.success, first.failure
    assert not refused.success
    assert "field 'primary_key': 1 of the rows read differ from another row read with the same" in (
        refused.failure or ""
    )
    assert later.success, later.failure
    assert loads.metadata()["cursor"] == "4"
    assert loads.rows(["id", "v"]) == [(1, "a"), (2, "c"), (3, "d"), (4, "y")]


def test_changing_a_merge_tables_key_keeps_one_row_per_new_key(loads: Loads, db: SourceDb) -> None:
    """Buckets hash the key: after `primary_key: [id]` becomes `[id, part]` they must follow."""
    # A text key: its buckets are hashes (an integer key's are ranges of its first column).
    db.execute(
        "CREATE TABLE items (id {key_text}, part int, v {text}, at int NOT NULL, "
        "PRIMARY KEY (id, part))"
    )
    db.insert("items", [(str(i), 0, "v1", i) for i in range(1, 301)])
    loads.configure(db, ITEMS_MERGE, buckets=64)
    assert loads.run().success
    loads.configure(db, ITEMS_MERGE, primary_key=["id", "part"], buckets=64)
    db.execute("UPDATE items SET v = 'v2', at = at + 1000 WHERE at % 50 = 0")
    assert loads.run().success
    db.execute(
        "INSERT INTO items SELECT id, 1, 'other part', at + 2000 FROM items WHERE at % 60 = 0",
        "UPDATE items SET v = 'v3', at = at + 3000 WHERE at % 70 = 3",
    )

    run = loads.run()

    assert run.success, run.failure
    assert loads.rows(["id", "part", "v"]) == _source(db, ["id", "part", "v"])
    assert run.metadata["dagster/row_count"] == 305


def test_an_integer_key_that_becomes_a_text_key_gets_new_buckets(
    loads: Loads,
    db: SourceDb,
) -> None:
    """Ranges of an integer key can't hold a text key: the table is bucketed again."""
    db.execute(
        "CREATE TABLE items (id int, code {key_text}, v {text}, at int NOT NULL, "
        "PRIMARY KEY (id, code))"
    )
    db.insert("items", [(i, f"c{i}", "v1", i) for i in range(1, 51)])
    loads.configure(db, ITEMS_MERGE)
    assert loads.run().success
    loads.configure(db, ITEMS_MERGE, primary_key=["code", "id"])
    db.execute("UPDATE items SET v = 'v2', at = at + 100 WHERE at % 10 = 0")

    run = loads.run()

    assert run.success, run.failure
    assert loads.rows(["id", "code", "v"]) == _source(db, ["id", "code", "v"])
