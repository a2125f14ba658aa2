"""`capture: log` on the shapes production has: tables made again, renamed, partitioned;
replica identities; keys that move, shift or repeat; types compared value by value with a full
load; limits, a killed --full and compaction; encodings. Each was a reproduction of a defect
found in review (red before its fix), or a case that held."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from incremental_assets.errors import ConfigError
from incremental_assets_tests.support.loads import Loads
from incremental_assets_tests.support.log_capture import (
    DURABLE,
    ICEBERG,
    LOGGED,
    drop_slot,
    ia,
    slot_made,
    slot_of,
)
from incremental_assets_tests.support.postgres import Schema


def _source(pg: Schema, table: str = "items") -> list[tuple[Any, ...]]:
    return sorted(pg.query(f"SELECT id, note FROM {table}"))


# 1. The table dropped and created again (or swapped in by renames): the publication lost it,
#    `ensure_publication` never adds it back, and every later run, --full included, captures
#    nothing of it.
def test_a_table_created_again_is_captured_after_a_full_refresh(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a')")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE,
            "DROP TABLE items",
            "CREATE TABLE items (id int PRIMARY KEY, note text)",
            "INSERT INTO items VALUES (2, 'b')",
        )
        assert loads.run(full_refresh=True).success  # the documented fix
        assert loads.rows(["id", "note"]) == [(2, "b")]
        pg.execute(
            DURABLE,
            "INSERT INTO items VALUES (3, 'c')",
            "UPDATE items SET note = 'b2' WHERE id = 2",
        )
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == _source(pg)
    finally:
        drop_slot(pg, slot)


def test_a_table_swapped_in_by_renames_is_not_silently_ignored(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a')")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE,
            "CREATE TABLE items_new (id int PRIMARY KEY, note text)",
            "INSERT INTO items_new VALUES (1, 'a'), (2, 'b')",
            "ALTER TABLE items RENAME TO items_old",
            "ALTER TABLE items_new RENAME TO items",
            "INSERT INTO items VALUES (3, 'c')",
        )
        run = loads.run()
        # Either refused (the capture can't follow the new table) or the rows are there.
        if run.success:
            assert loads.rows(["id", "note"]) == _source(pg)
        else:
            assert run.failure is not None and "--full" in run.failure
    finally:
        drop_slot(pg, slot)


# 2. A partitioned table: pgoutput publishes a partition's changes under the partition's own
#    name (publish_via_partition_root is off), which `gather` doesn't take for the table's.
def test_a_partitioned_table_follows_its_changes(loads: Loads, pg: Schema) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id int PRIMARY KEY, note text) PARTITION BY RANGE (id)",
        "CREATE TABLE items_low PARTITION OF items FOR VALUES FROM (0) TO (100)",
        "CREATE TABLE items_high PARTITION OF items FOR VALUES FROM (100) TO (1000)",
        "INSERT INTO items VALUES (1, 'a'), (150, 'b')",
    )
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        first = loads.run()
        assert first.success, first.failure
        assert loads.rows(["id", "note"]) == _source(pg)
        pg.execute(
            DURABLE,
            "INSERT INTO items VALUES (2, 'c'), (200, 'd')",
            "UPDATE items SET note = 'a2' WHERE id = 1",
            "DELETE FROM items WHERE id = 150",
        )
        run = loads.run()
        if run.success:
            assert loads.rows(["id", "note"]) == _source(pg)
        else:
            assert run.failure is not None
    finally:
        drop_slot(pg, slot)


# A replica identity that isn't the key: an update that moves a row to another key would send
# no old key, leaving the old row in the lake. Refused before anything is made or loaded.
@pytest.mark.parametrize(
    ("identity", "key"),
    [("ALTER TABLE items REPLICA IDENTITY USING INDEX items_code_key", ["id"]), (None, ["code"])],
    ids=["index identity", "configured natural key"],
)
def test_a_replica_identity_that_isnt_the_key_is_refused_before_the_first_load(
    loads: Loads, pg: Schema, identity: str | None, key: list[str]
) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id int PRIMARY KEY, code text NOT NULL UNIQUE, note text)",
        *([identity] if identity else []),
        "INSERT INTO items VALUES (1, 'one', 'a'), (2, 'two', 'b')",
    )
    loads.configure(pg, {**LOGGED, "primary_key": key}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        refused = loads.run()
        assert not refused.success and refused.failure is not None
        assert "replica identity" in refused.failure and "REPLICA IDENTITY FULL" in refused.failure
        assert not slot_made(pg, slot)

        pg.execute(DURABLE, "ALTER TABLE items REPLICA IDENTITY FULL")
        assert loads.run().success
        pg.execute(DURABLE, "UPDATE items SET id = 10, code = 'ten' WHERE id = 1")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "code", "note"]) == sorted(
            pg.query("SELECT id, code, note FROM items")
        )
    finally:
        drop_slot(pg, slot)


# 4. A deferrable key (REPLICA IDENTITY FULL, the only identity such a table can publish
#    updates under) shifted in one statement: rows pass through each other's keys, and `fold`'s
#    "an update that changed the key removes the old one" deletes keys a row just moved into.
def test_a_deferrable_key_shifted_in_one_statement_keeps_every_row(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id int, note text, "
        "CONSTRAINT items_pk PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED)",
        "ALTER TABLE items REPLICA IDENTITY FULL",
        "INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    )
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, "UPDATE items SET id = id + 1")  # 1->2, 2->3, 3->4 in one statement
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == _source(pg)  # [(2,'a'), (3,'b'), (4,'c')]
    finally:
        drop_slot(pg, slot)


# 5. Values a full load refuses (they don't fit the lake's type exactly) are rounded silently
#    by the log path's plain Spark cast.
@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("n", "0.1234567890123456789012"),  # numeric: decimal(38,18), 22 fraction digits
        ("wide", "1.5"),  # numeric(50,10): decimal(38,0)
    ],
)
def test_a_value_a_full_load_refuses_is_not_rounded_by_the_log(
    loads: Loads, pg: Schema, column: str, value: str
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, n numeric, wide numeric(50,10))")
    pg.execute(DURABLE, "INSERT INTO items (id) VALUES (1)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, f"INSERT INTO items (id, {column}) VALUES (2, {value})")
        logged = loads.run()
        full = loads.run(full_refresh=True)
        assert not full.success  # the full load: "can't hold exactly"
        assert not logged.success, f"the log loaded {loads.rows(['id', column])}"
    finally:
        drop_slot(pg, slot)


# 7. Value by value: the same value loaded whole (row 1) and from the log (row 2).
TYPED = [
    ("bit(8)", "B'10101010'"),
    ("varbit(16)", "B'101'"),
    ("bit(1)", "B'1'"),
    ("interval", "'1 year 2 mons 3 days 04:05:06.789'"),
    ("money", "1234.56"),
    ("real", "'Infinity'"),
    ("double precision", "'NaN'"),
    ("double precision", "'-Infinity'"),
    ("real", "0.1"),
    ("double precision", "1.0000000000000002"),
    ("bytea", "'\\x00ff5c0a'::bytea"),
    ("json", '\'{"a": 1,   "b": "\\u00e9"}\''),
    ("jsonb", '\'{"b": [1, 2.50], "a": null}\''),
    ("text", "E'line1\\nline2\\\\back \\u2603 \\t x'"),
    ("char(5)", "'ab'"),
    ("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("inet", "'192.168.0.1/24'"),
    ("boolean", "false"),
    ("smallint", "-32768"),
    ("bigint", "9223372036854775807"),
    ("numeric(12,3)", "-12345.600"),
    ("numeric(38,10)", "1234567890123456789012345678.0123456789"),
    ("timestamptz", "'2024-02-29 23:59:59.123456+05:45'"),
    ("timestamptz", "'1901-12-13 20:45:52.5-00:25:21'"),
    ("timestamp", "'2024-03-10 02:30:00.000001'"),
    ("date", "'2024-02-29'"),
    ("time", "'23:59:59.999999'"),
    ("timetz", "'12:34:56.789+02'"),
    ("timetz", "'00:15:00-05:30'"),
    ("time", "'24:00:00'"),
    ("timetz", "'24:00:00+02'"),
    ("timetz", "'12:00:00+05:30:15'"),
    ("date", "'4713-01-01 BC'"),
    ("date", "'0001-06-15 BC'"),
    ("timestamp", "'0044-03-15 12:00:00.5 BC'"),
    ("timestamptz", "'0001-12-31 23:59:59+03 BC'"),
    ("oid", "4294967295"),
    ("xml", "'<a>b</a>'"),
    ("point", "'(1.5,2)'"),
]


def test_every_value_from_the_log_equals_the_full_loads(loads: Loads, pg: Schema) -> None:
    """One table with a column of each type: row 1 read by the full load, row 2 (the same
    values) from the log; each column's two values alike, to the type and the digit."""
    columns = ", ".join(f"v{i} {kind}" for i, (kind, _) in enumerate(TYPED))
    values = ", ".join(value for _, value in TYPED)
    pg.execute(DURABLE, f"CREATE TABLE items (id int PRIMARY KEY, {columns})")
    pg.execute(DURABLE, f"INSERT INTO items VALUES (1, {values})")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        first = loads.run()
        assert first.success, first.failure
        pg.execute(DURABLE, f"INSERT INTO items VALUES (2, {values})")
        run = loads.run()
        assert run.success, run.failure
        lake = loads.lake().sort_by("id")
        # BC dates and times have no Python value: compared as the numbers the lake stores.
        lake = pa.table(
            {
                name: column.cast(_number(column.type)) if _number(column.type) else column
                for name, column in zip(lake.column_names, lake.columns, strict=True)
            }
        )
        full, logged = lake.to_pylist()
        differ = {
            kind: (full[f"v{i}"], logged[f"v{i}"])
            for i, (kind, _) in enumerate(TYPED)
            if repr(full[f"v{i}"]) != repr(logged[f"v{i}"])
        }
        assert differ == {}
    finally:
        drop_slot(pg, slot)


def _number(kind: pa.DataType) -> pa.DataType | None:
    """The number a date or timestamp column stores."""
    if pa.types.is_date32(kind):
        return pa.int32()
    return pa.int64() if pa.types.is_timestamp(kind) else None


# 8. More than CHANGES_PER_RUN: runs continue from the recorded position.
@pytest.mark.parametrize("mode", ["merge", "append"])
def test_runs_past_the_change_limit_lose_and_double_nothing(
    loads: Loads, pg: Schema, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setattr("incremental_assets.sources.log_changes.CHANGES_PER_RUN", 10)
    pg.execute(DURABLE, "CREATE TABLE items (id bigint PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a')")
    loads.configure(pg, {**LOGGED, "mode": mode}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        changes = 0
        for i in range(2, 14):
            pg.execute(DURABLE, f"INSERT INTO items VALUES ({i * 2**40}, 'n{i}')")
            changes += 1
        pg.execute(
            DURABLE,  # one transaction larger than the limit
            "INSERT INTO items SELECT i, 'big' FROM generate_series(100, 124) i",
        )
        changes += 25
        for i in range(2, 8):
            pg.execute(DURABLE, f"UPDATE items SET note = 'u{i}' WHERE id = {i * 2**40}")
            changes += 1
        pg.execute(DURABLE, "DELETE FROM items WHERE id BETWEEN 100 AND 104")
        changes += 5
        runs = 0
        while True:
            run = loads.run()
            assert run.success, run.failure
            runs += 1
            if not run.metadata["log_more_waiting"] or runs > 10:
                break
        assert runs > 1
        if mode == "merge":
            assert loads.rows(["id", "note"]) == _source(pg)
        else:
            logged = [r for r in loads.lake().to_pylist() if r["change_op"] is not None]
            assert len(logged) == changes
    finally:
        drop_slot(pg, slot)


# 9. TRUNCATE mixed with inserts, updates and deletes, in one transaction and across them.
def test_truncate_then_changes_in_one_transaction_and_after(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items SELECT i, 'n' || i FROM generate_series(1, 10) i")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        with pg.server.connect(autocommit=False) as conn:
            conn.execute(f"SET search_path TO {pg.name}")
            conn.execute("UPDATE items SET note = 'before' WHERE id = 1")
            conn.execute("TRUNCATE items")
            conn.execute("INSERT INTO items VALUES (1, 'x'), (2, 'y'), (3, 'z')")
            conn.execute("DELETE FROM items WHERE id = 1")
            conn.execute("UPDATE items SET id = 20 WHERE id = 2")
            conn.commit()
        pg.execute(DURABLE, "INSERT INTO items VALUES (4, 'w')", "DELETE FROM items WHERE id = 3")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == _source(pg)
        pg.execute(DURABLE, "TRUNCATE items", "INSERT INTO items VALUES (5, 'v')", "TRUNCATE items")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == _source(pg) == []
    finally:
        drop_slot(pg, slot)


def test_truncate_cascade_from_a_parent_reaches_the_child(loads: Loads, pg: Schema) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE parent (id int PRIMARY KEY)",
        "CREATE TABLE items (id int PRIMARY KEY, note text, p int REFERENCES parent)",
        "INSERT INTO parent VALUES (1)",
        "INSERT INTO items VALUES (1, 'a', 1), (2, 'b', 1)",
    )
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, "TRUNCATE parent CASCADE", "INSERT INTO parent VALUES (2)")
        pg.execute(DURABLE, "INSERT INTO items VALUES (3, 'c', 2)")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == _source(pg)
    finally:
        drop_slot(pg, slot)


# 10. Names: an upper-case column, a composite key of text and sparse 64-bit numbers.
def test_an_upper_case_column_and_a_composite_text_key(loads: Loads, pg: Schema) -> None:
    pg.execute(
        DURABLE,
        'CREATE TABLE items (k text, id bigint, "Note" text, "two words" int, PRIMARY KEY (k, id))',
        "INSERT INTO items VALUES ('é☃', 9223372036854775807, 'a', 1), "
        "('b', -9223372036854775808, 'b', 2)",
    )
    loads.configure(pg, {**LOGGED, "primary_key": ["k", "id"]}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        first = loads.run()
        assert first.success, first.failure
        pg.execute(
            DURABLE,
            "UPDATE items SET \"Note\" = 'a2', \"two words\" = 3 WHERE k = 'é☃'",
            "UPDATE items SET k = 'c', id = 1 WHERE k = 'b'",
            "UPDATE items SET k = 'd' WHERE k = 'c'",
            "INSERT INTO items VALUES ('x\ny', 0, NULL, NULL)",
        )
        run = loads.run()
        assert run.success, run.failure
        lake = sorted(
            (r["k"], r["id"], r["Note"], r["two words"]) for r in loads.lake().to_pylist()
        )
        assert lake == sorted(pg.query('SELECT k, id, "Note", "two words" FROM items'))
    finally:
        drop_slot(pg, slot)


# 11. Two tables whose slot names fold together ("Items" and items): the second's first load
#     drops the first's slot, and its publication is the first's.
def test_two_tables_whose_slot_names_collide(loads: Loads, pg: Schema) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id int PRIMARY KEY, note text)",
        'CREATE TABLE "Items" (id int PRIMARY KEY, note text)',
        "INSERT INTO items VALUES (1, 'lower')",
        "INSERT INTO \"Items\" VALUES (1, 'upper')",
    )
    config = loads.config(pg, LOGGED, lake=ICEBERG)
    upper = {**config["tables"][0], "name": "upper_items", "table": f'{pg.name}."Items"'}
    config["tables"].append(upper)
    loads.write(config)
    slots = {slot_of(loads, "items"), slot_of(loads, "upper_items")}
    try:
        assert loads.run("items").success
        assert loads.run("upper_items").success
        pg.execute(
            DURABLE,
            "INSERT INTO \"Items\" VALUES (2, 'upper 2')",
            "INSERT INTO items VALUES (2, 'l2')",
        )
        upper_run = loads.run("upper_items")
        assert upper_run.success, upper_run.failure
        assert loads.rows(["id", "note"], "upper_items") == sorted(
            pg.query('SELECT id, note FROM "Items"')
        )  # observed: [(1, 'upper')], the run read 0 changes
        lower_run = loads.run("items")
        assert lower_run.success, lower_run.failure
        assert loads.rows(["id", "note"], "items") == _source(pg)
    finally:
        for slot in slots:
            drop_slot(pg, slot)


ORDERS: dict[str, Any] = {**LOGGED, "name": "orders"}


def _orders(pg: Schema) -> list[tuple[Any, ...]]:
    return sorted(pg.query("SELECT id, note FROM orders"))


def _five_orders(pg: Schema) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE orders (id int PRIMARY KEY, note text)",
        "INSERT INTO orders SELECT i, 'n' || i FROM generate_series(1, 5) i",
    )


def _killed_at(loads: Loads, point: str, full_refresh: bool = False) -> None:
    """`dagster asset materialize` of `orders` SIGKILLed at the pause point `point`."""
    process, _ = loads.paused_run(point, full_refresh=full_refresh)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _full_refresh_killed_at(loads: Loads, pg: Schema, point: str) -> None:
    """Row 6 inserted, a --full killed at `point`, then row 7 inserted."""
    pg.execute(DURABLE, "INSERT INTO orders VALUES (6, 'six')")
    _killed_at(loads, point, full_refresh=True)
    pg.execute(DURABLE, "INSERT INTO orders VALUES (7, 'seven')")


# 12. A full refresh killed before its commit: the next run should redo it (docs: "a run killed
#     anywhere ... is redone"), but the killed run already dropped and made the slot again.
def test_a_full_refresh_killed_before_its_commit_is_redone(loads: Loads, pg: Schema) -> None:
    _five_orders(pg)
    loads.configure(pg, ORDERS, lake=ICEBERG)
    slot = slot_of(loads, "orders")
    try:
        assert loads.run().success
        _full_refresh_killed_at(loads, pg, "session")
        rerun = loads.run()
        assert rerun.success, rerun.failure
        assert loads.rows(["id", "note"]) == _orders(pg)
    finally:
        drop_slot(pg, slot)


# 14. A stored generated column: pgoutput (PostgreSQL 15) leaves it out of its Relation
#     message, so `_evolved` takes it for a dropped column, and the fix (--full) loops.
def test_a_generated_column_is_refused_until_it_is_left_out(loads: Loads, pg: Schema) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id int PRIMARY KEY, note text, "
        "shout text GENERATED ALWAYS AS (upper(note)) STORED)",
        "INSERT INTO items (id, note) VALUES (1, 'a')",
    )
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        refused = loads.run()  # the log doesn't carry generated values: refused before the load
        assert not refused.success and refused.failure is not None
        assert "exclude_columns: [shout]" in refused.failure
        loads.configure(pg, {**LOGGED, "exclude_columns": ["shout"]}, lake=ICEBERG)
        assert loads.run().success
        pg.execute(DURABLE, "INSERT INTO items (id, note) VALUES (2, 'b')")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == sorted(pg.query("SELECT id, note FROM items"))
    finally:
        drop_slot(pg, slot)


# 16. Maintenance (compaction) between a killed run's commit and its record.
def test_compaction_between_a_commit_and_its_record(loads: Loads, pg: Schema) -> None:
    _five_orders(pg)
    loads.configure(pg, ORDERS, lake=ICEBERG)
    slot = slot_of(loads, "orders")
    try:
        assert loads.run().success
        pg.execute(
            DURABLE, "UPDATE orders SET note = 'x' WHERE id <= 2", "DELETE FROM orders WHERE id = 5"
        )
        _killed_at(loads, "committed")
        loads.compact()
        pg.execute(DURABLE, "INSERT INTO orders VALUES (9, 'after')")
        rerun = loads.run()
        assert rerun.success, rerun.failure
        assert loads.rows(["id", "note"]) == _orders(pg)
    finally:
        drop_slot(pg, slot)


# The lake table gone, or changed by another writer, after the position was recorded: the log's
# changes since would be applied to a table without the rows before them, and the position
# would move on. Refused as a cursor's run refuses it, with changes waiting and without.
@pytest.mark.parametrize("change", ["lake deleted", "lake deleted, nothing new", "another writer"])
def test_a_lake_that_is_not_the_recorded_table_is_refused(
    loads: Loads, pg: Schema, change: str
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a'), (2, 'b')")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        recorded = loads.metadata()["cursor"]
        table = loads.iceberg_table()
        if change == "another writer":
            table.delete("id = 1")
        else:
            table.catalog.drop_table(table.name())
            shutil.rmtree(loads.lake_dir / "items")
        if change != "lake deleted, nothing new":
            pg.execute(DURABLE, "INSERT INTO items VALUES (3, 'c')")

        refused = loads.run()

        assert not refused.success
        assert "not the table the stored cursor describes" in (refused.failure or "")
        assert loads.metadata()["cursor"] == recorded
        rebuilt = loads.run(full_refresh=True)
        assert rebuilt.success, rebuilt.failure
        assert loads.rows(["id", "note"]) == _source(pg)
    finally:
        drop_slot(pg, slot)


# `table:` without a schema: the full load follows the connection's search path (pgjdbc's
# currentSchema), the log names the table by its schema: refused in the configuration.
def test_a_table_without_a_schema_is_refused_in_the_configuration(loads: Loads, pg: Schema) -> None:
    with pytest.raises(ConfigError, match="names its schema"):
        loads.configure(pg, {**LOGGED, "table": "items"}, lake=ICEBERG)


# 19. Same keys touched several times in one transaction, and transactions interleaved.
def test_same_key_many_times_and_interleaved_transactions(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id bigint PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        with (
            pg.server.connect(autocommit=False) as one,
            pg.server.connect(autocommit=False) as two,
        ):
            for conn in (one, two):
                conn.execute(f"SET search_path TO {pg.name}")
                conn.execute(DURABLE)
            one.execute("UPDATE items SET id = 10 WHERE id = 1")
            two.execute("INSERT INTO items VALUES (20, 'two')")
            one.execute("UPDATE items SET id = 11 WHERE id = 10")
            one.execute("INSERT INTO items VALUES (4, 'x')")
            one.execute("DELETE FROM items WHERE id = 4")
            two.execute("DELETE FROM items WHERE id = 2")
            two.execute("INSERT INTO items VALUES (2, 'b again')")
            two.commit()
            one.execute("UPDATE items SET note = 'late' WHERE id = 20")
            one.commit()
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == _source(pg)
    finally:
        drop_slot(pg, slot)


# 20. An append table's change log, replayed in order (first load, then ORDER BY change_lsn,
#     change_seq), should give the source: an update that moved a key logs only the new row,
#     so the old key never leaves the replay.
def test_an_append_change_log_replays_to_the_source_across_a_key_update(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a'), (7, 'seven')")
    loads.configure(pg, {**LOGGED, "mode": "append"}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, "UPDATE items SET id = 1000 WHERE id = 7")
        run = loads.run()
        assert run.success, run.failure
        rows = loads.lake().to_pylist()
        state: dict[Any, Any] = {r["id"]: r["note"] for r in rows if r["change_op"] is None}
        changes = sorted(
            (r for r in rows if r["change_op"] is not None),
            key=lambda r: (r["change_lsn"], r["change_seq"]),
        )
        for change in changes:
            if change["change_op"] == "truncate":
                state.clear()
            elif change["change_op"] == "delete":
                state.pop(change["id"], None)
            else:
                state[change["id"]] = change["note"]
        assert sorted(state.items()) == _source(pg)  # observed: 7 is still there
    finally:
        drop_slot(pg, slot)


# 22. A database whose encoding isn't UTF-8: pgoutput sends values in the database's encoding,
#     `pgoutput._Reader.tuple` decodes them as UTF-8.
def test_a_latin1_database(loads: Loads, pg: Schema) -> None:
    import uuid

    db = f"l1_{uuid.uuid4().hex[:8]}"
    with pg.server.connect() as conn:
        conn.execute(
            f"CREATE DATABASE {db} ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
        )
    try:
        with pg.server.connect(dbname=db) as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
            conn.execute("INSERT INTO items VALUES (1, 'café')")
        config = loads.config(pg, {**LOGGED, "table": "public.items"}, lake=ICEBERG)
        config["sources"]["shop"]["url"] = (
            config["sources"]["shop"]["url"].rsplit("/", 1)[0] + f"/{db}"
        )
        loads.write(config)
        first = loads.run()
        assert first.success, first.failure
        with pg.server.connect(dbname=db) as conn:
            conn.execute(DURABLE)  # the run reads the log to its flush point
            conn.execute("INSERT INTO items VALUES (2, 'naïve')")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == [(1, "café"), (2, "naïve")]
    finally:
        with pg.server.connect() as conn:
            conn.execute(
                f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                f"WHERE database = '{db}'"
            )
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


# 25. A column the table leaves out (exclude_columns) still refuses a run over its TOAST value.
def test_an_unchanged_large_value_in_an_excluded_column(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, big text, n int)")
    pg.execute(DURABLE, "ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL")
    pg.execute(DURABLE, f"INSERT INTO items VALUES (1, '{'x' * 100_000}', 1)")
    loads.configure(pg, {**LOGGED, "exclude_columns": ["big"]}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, "UPDATE items SET n = 2 WHERE id = 1")
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "n"]) == [(1, 2)]
    finally:
        drop_slot(pg, slot)


# 26. An array column: the first load takes it, the first change after it is refused.
def test_an_array_column_is_refused_before_the_first_load(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, tags text[])")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, '{a,b}')")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        first = loads.run()
        pg.execute(DURABLE, "INSERT INTO items VALUES (2, '{c}')")
        second = loads.run()
        # Either refused up front, or both load: not a table that loads once, then stops.
        assert first.success == second.success, second.failure
    finally:
        drop_slot(pg, slot)


# 27. A quoted, upper-case schema and table.
def test_a_quoted_upper_case_schema_and_table(loads: Loads, pg: Schema) -> None:
    schema = f"Up_{pg.name}"
    pg.execute(
        DURABLE,
        f'CREATE SCHEMA "{schema}"',
        f'CREATE TABLE "{schema}"."My Items" (id int PRIMARY KEY, note text)',
        f'INSERT INTO "{schema}"."My Items" VALUES (1, \'a\')',
    )
    loads.configure(pg, {**LOGGED, "table": f'"{schema}"."My Items"'}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        first = loads.run()
        assert first.success, first.failure
        pg.execute(DURABLE, f'INSERT INTO "{schema}"."My Items" VALUES (2, \'b\')')
        run = loads.run()
        assert run.success, run.failure
        assert loads.rows(["id", "note"]) == [(1, "a"), (2, "b")]
    finally:
        drop_slot(pg, slot)
        pg.execute(DURABLE, f'DROP SCHEMA "{schema}" CASCADE')


# Review 2 (each red before its fix). PostgreSQL's infinity: refused by name, as the full load
# refuses it, not stored or reported as a bug.
@pytest.mark.parametrize("kind", ["date", "timestamptz"])
def test_infinity_from_the_log_is_refused_naming_the_column(
    loads: Loads, pg: Schema, kind: str
) -> None:
    pg.execute(DURABLE, f"CREATE TABLE items (id int PRIMARY KEY, v {kind})")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        recorded = loads.metadata()["cursor"]
        pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'infinity')")
        refused = loads.run()
        assert not refused.success and refused.failure is not None
        assert "column 'v' of table 'items' holds infinity" in refused.failure
        assert "exclude_columns: [v]" in refused.failure
        assert loads.metadata()["cursor"] == recorded
    finally:
        drop_slot(pg, slot)


# A --full killed after its commit: the next plain run replaced its batch with the log's changes
# since the old position (an append table kept only those).
@pytest.mark.parametrize("mode", ["append", "merge"])
def test_a_full_refresh_killed_after_its_commit_is_repeated_by_the_next_run(
    loads: Loads, pg: Schema, mode: str
) -> None:
    _five_orders(pg)
    loads.configure(pg, {**ORDERS, "mode": mode}, lake=ICEBERG)
    slot = slot_of(loads, "orders")
    try:
        assert loads.run().success
        _full_refresh_killed_at(loads, pg, "committed")
        run = loads.run()
        assert run.success, run.failure
        assert sorted({r["id"] for r in loads.lake().to_pylist()}) == [1, 2, 3, 4, 5, 6, 7]
        pg.execute(DURABLE, "UPDATE orders SET note = 'x' WHERE id = 1")
        assert loads.run().success
        if mode == "merge":
            assert loads.rows(["id", "note"]) == _orders(pg)
    finally:
        drop_slot(pg, slot)


# Another writer's commit while the run starts Spark (after the first look at the lake).
def test_another_writers_commit_while_the_run_starts_spark_is_refused(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE orders (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO orders VALUES (1, 'a'), (2, 'b')")
    loads.configure(pg, {**LOGGED, "name": "orders"}, lake=ICEBERG)
    slot = slot_of(loads, "orders")
    try:
        assert loads.run().success
        pg.execute(DURABLE, "INSERT INTO orders VALUES (3, 'c')")
        process, marker = loads.paused_run("session")
        loads.iceberg_table().delete("id = 1")
        marker.unlink()
        _, stderr = process.communicate(timeout=300)
        assert process.returncode != 0
        assert "not the table the stored cursor describes" in stderr
    finally:
        drop_slot(pg, slot)


# `status --history`: newest first across tables, and a conversion is no snapshot to read.
def test_the_history_of_log_tables_is_newest_first_and_a_conversion_names_no_snapshot(
    loads: Loads, pg: Schema, tmp_path: Path
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, at timestamptz)")
    pg.execute(DURABLE, "CREATE TABLE other (id int PRIMARY KEY, note text)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a', now())", "INSERT INTO other VALUES (1)")
    cursor = {"name": "items", "mode": "merge", "primary_key": ["id"], "cursor": "at"}
    loads.configure(pg, cursor)
    assert loads.run().success
    loads.configure(pg, cursor, lake=ICEBERG)
    assert ia(loads, tmp_path, "lake", "convert", "items", "--reason", "r").returncode == 0
    config: dict[str, Any] = loads.config(pg, LOGGED, lake=ICEBERG)
    config["tables"].append({**config["tables"][0], "name": "other", "table": f"{pg.name}.other"})
    loads.write(config)
    slots = [slot_of(loads, "items"), slot_of(loads, "other")]
    try:
        assert loads.run("items").success
        assert loads.run("other").success
        (now,) = pg.query("SELECT pg_current_wal_flush_lsn()::text")
        assert (
            ia(loads, tmp_path, "cursor", "set", "other", now[0], "--reason", "x").returncode == 0
        )
        shown = ia(loads, tmp_path, "status", "--history", "--json", "items", "other")
        text = ia(loads, tmp_path, "status", "--history", "items", "other").stdout
    finally:
        for slot in slots:
            drop_slot(pg, slot)

    history = [(r["table"], r["event"]) for r in json.loads(shown.stdout)]
    assert history == [
        ("other", "cursor set"),
        ("other", "run"),
        ("items", "run"),
        ("items", "lake convert"),
        ("items", "run"),
    ]
    assert "load_table('None')" not in text and "load_table(" in text
