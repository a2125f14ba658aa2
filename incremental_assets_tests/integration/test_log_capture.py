"""`capture: log` tables on PostgreSQL: every insert, update, hard delete and TRUNCATE reaches the
lake exactly once, through the slot the first run makes; a run with nothing new starts no Spark;
a slot gone, lost or moved is refused with the fix; a run killed after its commit loses and
doubles nothing."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.cursor import parse_lsn
from incremental_assets.sensors import evaluate
from incremental_assets.sources.pg_slot import names_of
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets_tests.support.cli import cli_env, materializations, run_cli
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
from incremental_assets_tests.support.mariadb import Database
from incremental_assets_tests.support.postgres import PostgresServer, Schema, free_port


def _source(pg: Schema) -> list[tuple[Any, ...]]:
    return sorted(pg.query("SELECT id, note, n FROM items"))


def test_a_merge_table_follows_inserts_updates_deletes_and_truncates(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id bigint PRIMARY KEY, note text, n numeric(10,2))",
        "INSERT INTO items SELECT i, 'n' || i, i * 1.5 FROM generate_series(1, 50) i",
    )
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        first = loads.run()
        assert first.success, first.failure
        assert first.metadata["cursor_type"] == "lsn"
        assert loads.rows(["id", "note", "n"]) == _source(pg)

        # No timestamp moves: a cursor column would see none of these.
        pg.execute(
            DURABLE,
            "UPDATE items SET note = 'changed' WHERE id % 10 = 0",
            "DELETE FROM items WHERE id IN (3, 4, 5)",
            "INSERT INTO items VALUES (51, 'new', 0.25), (52, NULL, NULL)",
            "UPDATE items SET id = 1000 WHERE id = 7",  # a key that moves
        )
        second = loads.run()
        assert second.success, second.failure
        assert loads.rows(["id", "note", "n"]) == _source(pg)
        assert (
            second.metadata["rows_inserted"],
            second.metadata["rows_updated"],
            second.metadata["rows_deleted"],
        ) == (3, 5, 4)
        assert second.metadata["log_changes"] == 11
        assert parse_lsn(second.metadata["cursor"]) > parse_lsn(first.metadata["cursor"])

        pg.execute(DURABLE, "TRUNCATE items", "INSERT INTO items VALUES (1, 'after', 1)")
        third = loads.run()
        assert third.success, third.failure
        assert loads.rows(["id", "note", "n"]) == [(1, "after", 1)]
        assert third.metadata["full_refresh"] is True

        quiet = loads.run()
        assert quiet.success, quiet.failure
        assert quiet.metadata["spark"] == "not started (nothing new)"
        assert quiet.metadata["log_changes"] == 0
        assert quiet.metadata["dagster/row_count"] == 1
        assert parse_lsn(quiet.metadata["cursor"]) >= parse_lsn(third.metadata["cursor"])
    finally:
        drop_slot(pg, slot)


def test_a_slot_dropped_behind_the_tables_back_is_refused_with_the_fix(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a', 1)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    assert loads.run().success
    drop_slot(pg, slot)
    pg.execute(DURABLE, "INSERT INTO items VALUES (2, 'lost to the log', 2)")

    refused = loads.run()

    assert not refused.success
    assert refused.failure is not None
    assert f"slot {slot} is gone" in refused.failure
    assert "--full" in refused.failure
    assert loads.rows(["id"]) == [(1,)]

    again = loads.run(full_refresh=True)
    try:
        assert again.success, again.failure
        assert loads.rows(["id", "note", "n"]) == _source(pg)
    finally:
        drop_slot(pg, slot)


def test_a_slot_moved_past_the_recorded_position_is_refused(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'consumed by someone else', 1)")
        pg.execute(DURABLE, "CHECKPOINT")
        pg.execute(
            DURABLE,
            f"SELECT count(*) FROM pg_logical_slot_get_binary_changes('{slot}', NULL, NULL, "
            f"'proto_version', '1', 'publication_names', '{slot}')",
        )

        refused = loads.run()

        assert not refused.success
        assert refused.failure is not None and "was moved to" in refused.failure
    finally:
        drop_slot(pg, slot)


def _seq(row: dict[str, Any]) -> int:
    return int(row["change_seq"])


def test_an_append_table_logs_every_change_once(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a', 1)")
    loads.configure(pg, {**LOGGED, "mode": "append"}, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE,
            "INSERT INTO items VALUES (2, 'b', 2)",
            "UPDATE items SET note = 'a2' WHERE id = 1",
            "DELETE FROM items WHERE id = 2",
        )
        run = loads.run()
        assert run.success, run.failure
        logged = loads.lake().to_pylist()
        changes = sorted((r for r in logged if r["change_seq"] is not None), key=_seq)
        assert [(c["change_op"], c["id"], c["note"]) for c in changes] == [
            ("insert", 2, "b"),
            ("update", 1, "a2"),
            ("delete", 2, None),
        ]
        assert len({c["change_lsn"] for c in changes}) == 3  # three transactions
        assert loads.run().metadata["log_changes"] == 0
        assert len(loads.rows(["id"])) == 4  # the first load's row, and the three changes
    finally:
        drop_slot(pg, slot)


ORDERS_LOGGED: dict[str, Any] = {**LOGGED, "name": "orders"}


def _orders(pg: Schema) -> list[tuple[Any, ...]]:
    return sorted(pg.query("SELECT id, note, n FROM orders"))


@pytest.mark.parametrize("mode", ["append"])
def test_a_run_killed_after_its_commit_loses_and_doubles_nothing_through_the_cli(
    loads: Loads, pg: Schema, tmp_path: Path, mode: str
) -> None:
    """`dagster asset materialize` killed once its commit landed, before Dagster recorded it:
    the next run (through the same command) redoes the batch from the recorded position. An
    append table is the one a redo could double or lose (a merge applies changes again
    idempotently: the model-based test kills merge runs too)."""
    pg.execute(
        DURABLE,
        "CREATE TABLE orders (id int PRIMARY KEY, note text, n int)",
        "INSERT INTO orders SELECT i, 'n' || i, i FROM generate_series(1, 20) i",
    )
    loads.configure(pg, {**ORDERS_LOGGED, "mode": mode}, lake=ICEBERG)
    slot = names_of(loads.project.table("orders")).slot
    try:
        assert loads.run().success
        pg.execute(
            DURABLE,
            "UPDATE orders SET note = 'x' WHERE id <= 5",
            "DELETE FROM orders WHERE id = 20",
        )
        process, _ = loads.paused_run("committed")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        assert len(materializations(loads.home, "orders")) == 1
        pg.execute(DURABLE, "INSERT INTO orders VALUES (21, 'after the kill', 21)")

        rerun = run_cli(tmp_path, cli_env(loads.cli_config(), loads.home), "--select", "orders")

        assert rerun.returncode == 0, rerun.stderr[-3000:]
        recorded = materializations(loads.home, "orders")
        assert len(recorded) == 2 and recorded[-1]["cursor_type"] == "lsn"
        if mode == "merge":
            assert loads.rows(["id", "note", "n"]) == _orders(pg)
        else:
            changes = [r for r in loads.lake().to_pylist() if r["change_op"] is not None]
            ops = sorted((r["change_op"], r["id"]) for r in changes)
            updated = [("update", i) for i in range(1, 6)]
            assert ops == [("delete", 20), ("insert", 21), *updated]
    finally:
        drop_slot(pg, slot)


def test_writes_while_the_first_load_reads_arrive_once_in_the_next_run(
    loads: Loads, pg: Schema, tmp_path: Path
) -> None:
    """The slot is made before the full load reads: what commits in between is in the full
    load, the log, or both, and the merge applies the log over it in order."""
    pg.execute(
        DURABLE,
        "CREATE TABLE orders (id int PRIMARY KEY, note text, n int)",
        "INSERT INTO orders SELECT i, 'n' || i, i FROM generate_series(1, 20) i",
    )
    loads.configure(pg, ORDERS_LOGGED, lake=ICEBERG)
    slot = names_of(loads.project.table("orders")).slot
    try:
        process, marker = loads.paused_run("session")
        pg.execute(
            DURABLE,
            "INSERT INTO orders VALUES (21, 'during', 21)",
            "UPDATE orders SET n = -n WHERE id <= 3",
            "DELETE FROM orders WHERE id = 4",
        )
        marker.unlink()
        assert process.wait(timeout=300) == 0, process.communicate()[1][-3000:]
        pg.execute(DURABLE, "UPDATE orders SET note = 'later' WHERE id = 21")

        run = loads.run()

        assert run.success, run.failure
        assert loads.rows(["id", "note", "n"]) == _orders(pg)
    finally:
        drop_slot(pg, slot)


def test_a_column_added_mid_stream_joins_the_lake_and_a_dropped_one_is_refused(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a', 1)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE,
            "INSERT INTO items VALUES (2, 'before the column', 2)",
            "ALTER TABLE items ADD COLUMN price numeric(8,2)",
            "INSERT INTO items VALUES (3, 'with it', 3, 9.5)",
            "UPDATE items SET price = 1.25 WHERE id = 1",
        )
        added = loads.run()
        assert added.success, added.failure
        assert loads.rows(["id", "price"]) == sorted(pg.query("SELECT id, price FROM items"))

        pg.execute(
            DURABLE, "ALTER TABLE items DROP COLUMN note", "INSERT INTO items VALUES (4, 4, 4)"
        )
        dropped = loads.run()
        assert not dropped.success
        assert dropped.failure is not None and "lost column(s) note" in dropped.failure
        assert "--full" in dropped.failure
    finally:
        drop_slot(pg, slot)


def test_an_unchanged_large_value_is_refused_without_full_identity_and_kept_with_it(
    loads: Loads, pg: Schema
) -> None:
    """PostgreSQL leaves a TOASTed value out of an update that didn't change it."""
    big = "x" * 100_000
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    pg.execute(DURABLE, "ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL")
    pg.execute(DURABLE, f"INSERT INTO items VALUES (1, '{big}', 1)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(DURABLE, "UPDATE items SET n = 2 WHERE id = 1")
        refused = loads.run()
        assert not refused.success
        assert refused.failure is not None and "REPLICA IDENTITY FULL" in refused.failure

        pg.execute(DURABLE, "ALTER TABLE items REPLICA IDENTITY FULL")
        assert loads.run(full_refresh=True).success
        pg.execute(DURABLE, "UPDATE items SET n = 3 WHERE id = 1")
        kept = loads.run()
        assert kept.success, kept.failure
        assert loads.rows(["id", "note", "n"]) == [(1, big, 3)]
    finally:
        drop_slot(pg, slot)


def test_the_sensor_sees_the_log_kept_for_the_table_and_the_check_warns_past_its_limit(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    loads.configure(pg, LOGGED, lake=ICEBERG, checks={"log_retained_mb": 1})
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE,
            "INSERT INTO items SELECT i, repeat('x', 100), i FROM generate_series(1, 30000) i",
        )
        table = loads.project.table("items")
        source = IncrementalAssetsTranslator(loads.project.lake).source_asset_key(table)

        tick = evaluate(loads.instance, table, dg.AssetKey("items"), None, None, source)

        assert isinstance(tick, dg.SensorResult) and len(tick.run_requests or []) == 1
        (observation,) = tick.asset_events
        seen = {k: v.value for k, v in observation.metadata.items()}
        assert isinstance(seen["log_retained_bytes"], int) and seen["log_retained_bytes"] > 2**20
        assert isinstance(seen["log_behind_bytes"], int) and seen["log_behind_bytes"] > 2**20
        assert parse_lsn(str(seen["newest_cursor"])) > 0

        run = loads.execute({})
        (check,) = [e for e in run.get_asset_check_evaluations() if e.check_name == "log_retained"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        assert loads.metadata()["log_changes"] == 30000, loads.metadata()
        assert loads.rows(["id"]) == [(i,) for i in range(1, 30001)]
    finally:
        drop_slot(pg, slot)


def test_the_cli_validates_shows_sets_and_drops_a_log_tables_capture(
    loads: Loads, pg: Schema, tmp_path: Path
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    pg.execute(DURABLE, "INSERT INTO items VALUES (1, 'a', 1)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    before = ia(loads, tmp_path, "validate", "--connect")
    assert before.returncode == 0, before.stderr
    assert f"log: slot {slot} made by the first run" in before.stdout
    try:
        first = loads.run()
        assert first.success
        shown = ia(loads, tmp_path, "validate", "--connect")
        assert f"log: slot {slot} (reserved" in shown.stdout, shown.stdout

        pg.execute(DURABLE, "INSERT INTO items VALUES (2, 'skipped by the cursor set', 2)")
        pg.execute(DURABLE, "CHECKPOINT")
        (now,) = pg.query("SELECT pg_current_wal_flush_lsn()::text")
        moved = ia(loads, tmp_path, "cursor", "set", "items", str(now[0]), "--reason", "skip")
        assert moved.returncode == 0, moved.stderr
        shown = ia(loads, tmp_path, "status", "--json", "items")
        assert json.loads(shown.stdout)[0]["cursor"] == now[0]
        backfill = ia(loads, tmp_path, "backfill", "items", "--from", "0/0", "--to", now[0])
        assert backfill.returncode == 1 and "full refresh" in backfill.stderr, backfill.stderr
        pg.execute(DURABLE, "INSERT INTO items VALUES (3, 'after it', 3)")
        assert loads.run().success
        assert loads.rows(["id"]) == [(1,), (3,)]  # what the hand-set position skipped stays out

        dropped = ia(loads, tmp_path, "cdc", "drop", "items", "--reason", "decommissioned")
        assert dropped.returncode == 0, dropped.stderr
        assert f"slot {slot} dropped" in dropped.stdout
        assert not slot_made(pg, slot)
        assert loads.run().success  # loaded whole again, the slot made again
        assert loads.rows(["id"]) == [(1,), (2,), (3,)]
    finally:
        drop_slot(pg, slot)


def test_validate_names_what_the_server_lacks_for_log_capture(
    loads: Loads, pg: Schema, tmp_path: Path
) -> None:
    role = f"{pg.name}_plain"
    pg.execute(
        DURABLE,
        f"CREATE ROLE {role} LOGIN PASSWORD 'plain'",
        f"GRANT USAGE ON SCHEMA {pg.name} TO {role}",
        "CREATE TABLE items (id int PRIMARY KEY, note text, n int)",
        f"GRANT SELECT ON items TO {role}",
    )
    try:
        loads.configure(pg, LOGGED, lake=ICEBERG, source={"user": role, "password": "plain"})

        checked = ia(loads, tmp_path, "validate", "--connect")
        run = loads.run()

        assert checked.returncode == 1
        assert "no REPLICATION privilege: ALTER ROLE" in checked.stdout
        assert not run.success and run.failure is not None
        assert "no REPLICATION privilege" in run.failure
    finally:
        pg.execute(DURABLE, f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def test_a_first_load_waiting_on_a_long_open_transaction_says_so(
    loads: Loads, pg: Schema, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("incremental_assets.sources.pg_slot.CREATE_TIMEOUT_SECONDS", 2)
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    with postgres.connect(autocommit=False) as open_transaction:
        open_transaction.execute("SELECT txid_current()")  # holds an xid until it ends
        waited = loads.run()
    try:
        assert not waited.success and waited.failure is not None
        assert "waited 2 s for the transactions open on the server to end" in waited.failure
        assert "idle in transaction" in waited.failure
        assert loads.run().success  # once it ended
    finally:
        drop_slot(pg, slot)


def test_an_idle_table_on_a_busy_server_lets_its_slot_move_on(loads: Loads, pg: Schema) -> None:
    """Nothing changes in the table while the server writes log for others: each run records
    the bound it read to, and the next one advances the slot there."""
    pg.execute(
        DURABLE,
        "CREATE TABLE items (id int PRIMARY KEY, note text, n int)",
        "CREATE TABLE busy (id int, pad text)",
    )
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE, "INSERT INTO busy SELECT i, repeat('x', 200) FROM generate_series(1, 20000) i"
        )
        # A slot restarts decoding from a snapshot of the running transactions, which a busy
        # server logs every 15 s and at a checkpoint.
        pg.execute(DURABLE, "CHECKPOINT")
        idle = loads.run()
        assert idle.success and idle.metadata["log_changes"] == 0
        assert idle.metadata["log_retained_bytes"] > 2**20  # kept until a run records past it
        later = loads.run()
        assert later.metadata["log_retained_bytes"] < 2**20
    finally:
        drop_slot(pg, slot)


def test_a_slot_whose_log_the_server_removed_is_refused(loads: Loads, pg: Schema) -> None:
    """`max_slot_wal_keep_size` lets the server remove the log a slot that fell behind keeps."""
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    loads.configure(pg, LOGGED, lake=ICEBERG)
    slot = slot_of(loads)
    try:
        assert loads.run().success
        pg.execute(
            DURABLE, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()"
        )
        for i in range(3):
            pg.execute(
                DURABLE, f"INSERT INTO items VALUES ({i}, 'x', {i})", "SELECT pg_switch_wal()"
            )
        pg.execute(DURABLE, "CHECKPOINT")
        (status,) = pg.query(
            f"SELECT wal_status FROM pg_replication_slots WHERE slot_name = '{slot}'"
        )
        assert status == ("lost",)

        refused = loads.run()

        assert not refused.success and refused.failure is not None
        assert f"slot {slot} lost the log it kept" in refused.failure
        assert "--full" in refused.failure
    finally:
        pg.execute(DURABLE, "ALTER SYSTEM RESET max_slot_wal_keep_size", "SELECT pg_reload_conf()")
        drop_slot(pg, slot)


def test_a_mariadb_table_follows_its_binary_log_through_the_cli(
    loads: Loads, my: Database, tmp_path: Path
) -> None:
    """Inserts, updates that touch no timestamp, a key that moves, hard deletes and a TRUNCATE,
    from MariaDB's binary log; the last run through `dagster asset materialize`."""
    my.execute(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, note VARCHAR(40), n DECIMAL(10,2), "
        "at TIMESTAMP(6) NULL, day DATE, raw VARBINARY(8))",
        "INSERT INTO items VALUES (1, 'a', 1.50, '2025-01-01 10:00:00.5', '2025-01-01', 'x'), "
        "(2, 'b', 2, NULL, NULL, NULL), (3, 'c', 3, NULL, NULL, NULL)",
    )
    loads.configure(my, LOGGED, lake=ICEBERG)
    columns = ["id", "note", "n", "at", "day", "raw"]

    def source() -> list[tuple[Any, ...]]:
        """The source's rows; a TIMESTAMP (read in UTC) is an instant in the lake."""
        rows = my.query(f"SELECT {', '.join(columns)} FROM items")
        return sorted((*r[:3], r[3] and r[3].replace(tzinfo=UTC), *r[4:]) for r in rows)

    first = loads.run()
    assert first.success, first.failure
    assert first.metadata["cursor_type"] == "binlog"
    my.execute(
        "UPDATE items SET note = 'changed', at = '2026-02-03 04:05:06.789' WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        "INSERT INTO items VALUES (4, 'd', 4.25, NULL, '2026-01-01', 'yz')",
        "UPDATE items SET id = 30 WHERE id = 3",
    )
    second = loads.run()
    assert second.success, second.failure
    assert loads.rows(columns) == source()
    assert (
        second.metadata["rows_inserted"],
        second.metadata["rows_updated"],
        second.metadata["rows_deleted"],
    ) == (2, 1, 2)

    my.execute("TRUNCATE TABLE items", "INSERT INTO items (id, note) VALUES (9, 'after')")
    time.sleep(1.1)  # the sensor asks InnoDB's UPDATE_TIME, which counts whole seconds
    table = loads.project.table("items")
    source_key = IncrementalAssetsTranslator(loads.project.lake).source_asset_key(table)
    tick = evaluate(loads.instance, table, dg.AssetKey("items"), None, None, source_key)
    assert isinstance(tick, dg.SensorResult) and tick.run_requests
    (seen,) = [{k: v.value for k, v in e.metadata.items()} for e in tick.asset_events]
    assert str(seen["newest_cursor"]).startswith("mariadb-bin.")
    assert isinstance(seen["log_behind_bytes"], int) and seen["log_behind_bytes"] > 0
    last = run_cli(tmp_path, cli_env(loads.cli_config(), loads.home), "--select", "items")
    assert last.returncode == 0, last.stderr[-3000:]
    assert loads.rows(columns) == source()
    assert materializations(loads.home, "items")[-1]["full_refresh"] is True


def test_a_mariadb_position_whose_binary_log_was_purged_is_refused(
    loads: Loads, my: Database
) -> None:
    my.execute("CREATE TABLE items (id INT PRIMARY KEY, note TEXT, n INT)")
    loads.configure(my, LOGGED, lake=ICEBERG)
    assert loads.run().success
    my.execute("INSERT INTO items VALUES (1, 'lost with the purged log', 1)", "FLUSH BINARY LOGS")
    ((newest, *_),) = my.query("SHOW MASTER STATUS")
    # The server keeps a file a replica's connection (an earlier run's reader) still reads
    deadline = time.monotonic() + 30
    while len(my.query("SHOW BINARY LOGS")) > 1 and time.monotonic() < deadline:
        my.execute(f"PURGE BINARY LOGS TO '{newest}'")
        time.sleep(0.2)
    assert [row[0] for row in my.query("SHOW BINARY LOGS")] == [newest]

    refused = loads.run()

    assert not refused.success and refused.failure is not None
    assert "is gone (the server purged it" in refused.failure
    assert "--full" in refused.failure
    assert loads.run(full_refresh=True).success
    assert loads.rows(["id"]) == [(1,)]


def test_a_mariadb_column_added_joins_a_dropped_one_is_refused_and_append_logs_each_change(
    loads: Loads, my: Database
) -> None:
    my.execute("CREATE TABLE items (id INT PRIMARY KEY, note VARCHAR(20), n INT)")
    my.execute("INSERT INTO items VALUES (1, 'a', 1)")
    loads.configure(my, {**LOGGED, "mode": "append"}, lake=ICEBERG)
    assert loads.run().success
    my.execute(
        "INSERT INTO items VALUES (2, 'b', 2)",
        "ALTER TABLE items ADD COLUMN price DECIMAL(8,2)",
        "UPDATE items SET price = 9.5 WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
    )
    added = loads.run()
    assert added.success, added.failure
    logged = [r for r in loads.lake().to_pylist() if r["change_op"] is not None]
    assert [(r["change_op"], r["id"], r["price"]) for r in sorted(logged, key=_seq)] == [
        ("insert", 2, None),
        ("update", 1, Decimal("9.50")),
        ("delete", 2, None),
    ]

    my.execute("ALTER TABLE items DROP COLUMN note", "INSERT INTO items VALUES (3, 3, 3)")
    dropped = loads.run()
    assert not dropped.success and dropped.failure is not None
    assert "lost column(s) note" in dropped.failure


def test_a_backfill_of_a_log_table_from_the_launchpad_is_refused(loads: Loads, pg: Schema) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    loads.configure(pg, LOGGED, lake=ICEBERG)

    run = loads.execute({"backfill_from": "0/0", "backfill_to": "0/10"}, raise_on_error=False)

    assert not run.success
    (failure,) = [e for e in run.all_events if e.is_step_failure]
    assert "no window to backfill; run a full refresh" in str(failure.event_specific_data)
    assert not slot_made(pg, slot_of(loads))


def test_a_column_the_log_cant_be_read_into_is_refused_before_the_slot_is_made(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, tags text[], n int)")
    loads.configure(pg, LOGGED, lake=ICEBERG)

    refused = loads.run()

    assert not refused.success and refused.failure is not None
    assert "column tags is array<string>" in refused.failure
    assert "exclude_columns: [tags]" in refused.failure
    assert not slot_made(pg, slot_of(loads))


def test_validate_names_what_a_mariadb_server_lacks_for_log_capture(
    loads: Loads, my: Database, tmp_path: Path
) -> None:
    my.execute("CREATE TABLE items (id INT PRIMARY KEY, note TEXT, n INT)")
    loads.configure(my, LOGGED, lake=ICEBERG)
    ready = ia(loads, tmp_path, "validate", "--connect")
    my.execute("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
    try:
        lacking = ia(loads, tmp_path, "validate", "--connect")
        refused = loads.run()
    finally:
        my.execute("SET GLOBAL binlog_row_metadata = 'FULL'")

    assert ready.returncode == 0 and "log: the binary log (ROW, FULL)" in ready.stdout
    assert lacking.returncode == 1
    assert "binlog_row_metadata is MINIMAL, not FULL" in lacking.stdout
    assert not refused.success and refused.failure is not None
    assert "binlog_row_metadata = FULL" in refused.failure


def test_a_log_table_on_a_parquet_lake_is_refused_before_the_log_is_made(
    loads: Loads, pg: Schema
) -> None:
    pg.execute(DURABLE, "CREATE TABLE items (id int PRIMARY KEY, note text, n int)")
    loads.configure(pg, LOGGED)  # the lake's default format: plain Parquet

    refused = loads.run()

    assert not refused.success and refused.failure is not None
    assert "this table's lake is plain Parquet" in refused.failure
    assert "format: iceberg" in refused.failure
    assert not slot_made(pg, slot_of(loads))


@pytest.mark.parametrize("db", ["pg", "my"])
def test_a_log_that_cant_be_read_names_the_source_without_its_secrets(
    loads: Loads, db: str, request: pytest.FixtureRequest
) -> None:
    source = request.getfixturevalue(db)
    source.execute(
        *((DURABLE,) if db == "pg" else ()), "CREATE TABLE items (id INT PRIMARY KEY, note TEXT)"
    )
    config = loads.config(source, LOGGED, lake=ICEBERG)
    loads.write(config)
    assert loads.run().success
    shop = config["sources"]["shop"]
    scheme = shop["url"].split("//")[0]
    down = f"{scheme}//127.0.0.1:{free_port()}/shop?password=s3cret&connectTimeout=2"
    try:
        loads.write({**config, "sources": {"shop": {**shop, "url": down, "password": "hunter2"}}})

        refused = loads.run()
    finally:
        loads.write(config)
        if db == "pg":
            drop_slot(source, slot_of(loads))

    assert not refused.success and refused.failure is not None
    assert f"Table 'items' (source 'shop', {down.split('?')[0]}): connecting failed" in (
        refused.failure
    )
    assert "s3cret" not in refused.failure and "hunter2" not in refused.failure


# soak --capture log --database mariadb --seed 5126: a text key's full load matched rows on its
# collation's weights, the log's runs on its values; each log run then rewrote the table, and a
# delete became a row of NULLs under its key.
def test_a_mariadb_text_key_takes_updates_and_deletes_from_the_log(
    loads: Loads, my: Database
) -> None:
    my.execute("CREATE TABLE items (id VARCHAR(10) PRIMARY KEY, note TEXT)")
    my.execute("INSERT INTO items VALUES ('K00001', 'a'), ('k00002', 'b')")
    loads.configure(my, LOGGED, lake=ICEBERG)
    assert loads.run().success
    my.execute(
        "DELETE FROM items WHERE id = 'K00001'",
        "UPDATE items SET note = 'b2' WHERE id = 'k00002'",
        "INSERT INTO items VALUES ('K00003', 'c')",
    )

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["merge_strategy"] != "rewrite table"
    assert loads.rows(["id", "note"]) == sorted(my.query("SELECT id, note FROM items"))


def test_a_log_tables_key_changed_with_a_delete_waiting_removes_the_row(
    loads: Loads, my: Database
) -> None:
    """The table is matched again under its new key, and the log's delete in the same run still
    removes its row (it used to come back as a row of NULLs under its key)."""
    my.execute("CREATE TABLE items (id INT PRIMARY KEY, code VARCHAR(10) NOT NULL, note TEXT)")
    my.execute("INSERT INTO items VALUES (1, 'a', 'x'), (2, 'b', 'y'), (3, 'c', 'z')")
    loads.configure(my, LOGGED, lake=ICEBERG)
    assert loads.run().success
    my.execute("DELETE FROM items WHERE id = 2", "UPDATE items SET note = 'x2' WHERE id = 1")
    loads.configure(my, {**LOGGED, "primary_key": ["code", "id"]}, lake=ICEBERG)

    run = loads.run()

    assert run.success, run.failure
    assert run.metadata["merge_strategy"] == "rewrite table"
    assert loads.rows(["id", "code", "note"]) == sorted(
        my.query("SELECT id, code, note FROM items")
    )
