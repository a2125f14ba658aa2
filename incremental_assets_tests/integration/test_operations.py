"""Operating a table: asset checks, bounded backfills, hand-set cursors, per-table options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets.cli import main as cli
from incremental_assets.config import load_project
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema

DEFAULTS = {**ORDERS_MERGE, "cursor": "at", "transaction_cap": False}


def _checks(loads: Loads, full_refresh: bool = False) -> dict[str, Any]:
    """The check evaluations of a run (a full refresh if asked), by check name."""
    result = loads.execute({"full_refresh": full_refresh})
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_checks_run_with_the_materialization(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at timestamptz NOT NULL)")
    pg.execute(
        "INSERT INTO orders SELECT i, now() - INTERVAL '3 days' FROM generate_series(1, 20) i"
    )
    loads.configure(pg, DEFAULTS, checks={"freshness": "1d", "reconcile_counts": 0.0})

    checks = _checks(loads)

    assert set(checks) == {
        "primary_key_unique",
        "cursor_not_backwards",
        "freshness",
        "row_counts_match_source",
    }
    assert checks["primary_key_unique"].passed and checks["cursor_not_backwards"].passed
    assert checks["row_counts_match_source"].passed
    assert not checks["freshness"].passed  # the newest row is three days old
    assert checks["freshness"].severity == dg.AssetCheckSeverity.WARN
    pg.execute("INSERT INTO orders VALUES (21, now())")
    pg.execute("DELETE FROM orders WHERE id <= 5")  # a hard delete the incremental run can't see
    again = _checks(loads)
    assert again["freshness"].passed
    assert not again["row_counts_match_source"].passed
    assert again["row_counts_match_source"].metadata["source_rows"].value == 16


@pytest.mark.parametrize("mode", ["merge", "append"])
def test_a_backfill_reloads_a_window_and_leaves_the_cursor(
    loads: Loads,
    pg: Schema,
    mode: str,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, v text, at int NOT NULL)")
    pg.execute("INSERT INTO orders SELECT i, 'v1', i FROM generate_series(1, 100) i")
    loads.configure(pg, DEFAULTS, mode=mode)
    first = loads.run()
    # Rows that landed below the cursor, and rows fixed in place without moving it: only a
    # backfill of their window brings them in.
    pg.execute("INSERT INTO orders SELECT i, 'late', 15 FROM generate_series(101, 105) i")
    pg.execute("UPDATE orders SET v = 'fixed' WHERE at >= 10 AND at < 20 AND id <= 100")

    config = {"backfill_from": "10", "backfill_to": "20"}
    run = loads.execute(config)
    metadata = {
        k: v.value
        for k, v in run.get_asset_materialization_events()[0].materialization.metadata.items()
    }
    twice = loads.execute(config)

    assert run.success and twice.success
    assert metadata["backfill"] == "[10, 20)"
    assert metadata["extract_filter"] == '"at" >= 10 AND "at" < 20'
    assert metadata["cursor"] == first.metadata["cursor"] == "100"
    versions = loads.rows(["id", "v"])
    if mode == "merge":
        assert [v for i, v in versions if 10 <= i < 20] == ["fixed"] * 10
        assert [v for i, v in versions if i > 100] == ["late"] * 5
        assert len(versions) == 105
    else:
        # A version is (key, cursor): the late rows are new; an edit that kept its cursor is not.
        assert len(versions) == len(set(versions)) == 105
        assert [v for i, v in versions if i > 100] == ["late"] * 5


def test_cursor_set_backfills_from_a_point_and_reset_reloads_everything(
    loads: Loads,
    pg: Schema,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO orders SELECT i, i FROM generate_series(1, 50) i")
    project = loads.configure(pg, DEFAULTS, mode="append")
    assert loads.run().success
    monkeypatch.setenv("DAGSTER_HOME", str(loads.home))
    config = ["--config", project.path]

    assert cli([*config, "cursor", "set", "orders", "40", "--reason", "replay the last ten"]) == 0
    replay = loads.run()
    assert cli([*config, "cursor", "reset", "orders", "--reason", "start over"]) == 0
    reload = loads.run()

    assert replay.metadata["previous_cursor"] == "40"
    assert replay.metadata["rows_extracted"] == 11 and replay.metadata["rows_written"] == 0
    assert reload.metadata["full_refresh"] is True and reload.metadata["rows_extracted"] == 50
    assert len(loads.rows(["id"])) == 50
    notes = [
        str(r.event_log_entry.asset_observation.metadata["note"].value)  # type: ignore[union-attr]
        for r in loads.instance.fetch_observations(dg.AssetKey("orders"), limit=10).records
    ]
    assert notes[0].startswith("start over (reset by ") and notes[1].startswith(
        "replay the last ten (set by "
    )
    assert cli([*config, "cursor", "set", "orders", "forty", "--reason", "typo"]) == 1
    assert "Table 'orders': 'forty' is not a valid integer cursor value" in capsys.readouterr().err


def test_the_primary_key_is_read_from_the_database_when_not_given(loads: Loads, pg: Schema) -> None:
    pg.execute(
        "CREATE TABLE orders (region text, id int, at int NOT NULL, PRIMARY KEY (region, id))"
    )
    pg.execute("INSERT INTO orders VALUES ('eu', 1, 1), ('us', 1, 2)")
    config = loads.config(pg, DEFAULTS)
    del config["tables"][0]["primary_key"]
    loads.write(config)
    assert loads.run().success
    pg.execute("UPDATE orders SET at = 3 WHERE region = 'eu'")

    run = loads.run()

    assert run.success, run.failure
    assert (run.metadata["rows_inserted"], run.metadata["rows_updated"]) == (0, 1)
    assert loads.rows(["region", "id", "at"]) == [
        ("eu", 1, 3),
        ("us", 1, 2),
    ]


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        ({"columns": ["note"]}, ["id", "note", "at"]),
        ({"exclude_columns": ["secret"]}, ["id", "note", "at"]),
    ],
)
def test_columns_can_be_included_or_excluded(
    loads: Loads,
    pg: Schema,
    selection: dict[str, Any],
    expected: list[str],
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, note text, secret text, at int NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, 'n', 's', 1)")
    loads.configure(pg, DEFAULTS, **selection)
    run = loads.run()
    assert run.success, run.failure
    assert loads.lake().column_names == [*expected, "_batch"]


def test_lakexpress_shorthand_entries_load_like_full_ones(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, created date NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, '2024-12-31'), (2, '2025-01-01'), (3, '2025-01-02')")
    config = loads.config(pg, DEFAULTS)
    config["tables"] = [f"{pg.name}.orders:created:date@2025-01-01!upsert"]
    project = loads.write(config)
    table = load_project(project.path).table("orders")
    assert table.cursor is not None
    assert (table.mode.value, table.cursor.column, table.start) == (
        "merge",
        "created",
        "2025-01-01",
    )

    run = loads.run()

    assert run.success, run.failure
    assert loads.rows(["id"]) == [(2,), (3,)]


def test_row_counts_leave_out_soft_deleted_rows(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at int NOT NULL, deleted_at timestamptz)")
    pg.execute(
        "INSERT INTO orders SELECT i, i, CASE WHEN i % 4 = 0 THEN now() END "
        "FROM generate_series(1, 20) i"
    )
    loads.configure(pg, DEFAULTS, delete_column="deleted_at", checks={"reconcile_counts": 0.0})

    counts = _checks(loads)["row_counts_match_source"]

    assert counts.passed, counts.metadata
    assert counts.metadata["source_rows"].value == counts.metadata["lake_rows"].value == 15


def test_row_counts_of_files_count_the_latest_version_of_each_key(
    tmp_path: Path, loads: Loads
) -> None:
    landing = tmp_path / "landing" / "orders"
    landing.mkdir(parents=True)
    pq.write_table(
        pa.table({"id": [1, 2, 3, 4], "at": [1, 1, 1, 1], "gone": [False] * 4}),
        landing / "a.parquet",
    )
    # Key 1 is deleted by its newer version, key 2 comes back; key 5 is new.
    pq.write_table(
        pa.table({"id": [1, 2, 5], "at": [2, 2, 2], "gone": [True, False, False]}),
        landing / "b.parquet",
    )
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"drop": {"type": "files", "path": str(tmp_path / "landing")}},
        "tables": [
            {
                "name": "orders",
                "source": "drop",
                "table": "orders",
                "mode": "merge",
                "cursor": "at",
                "primary_key": ["id"],
                "delete_column": "gone",
                "checks": {"reconcile_counts": 0.0},
            }
        ],
    }

    loads.write(config)
    counts = _checks(loads)["row_counts_match_source"]

    assert counts.passed, counts.metadata
    assert counts.metadata["source_rows"].value == counts.metadata["lake_rows"].value == 4


def test_a_check_that_raises_fails_alone_and_the_load_is_recorded(loads: Loads, pg: Schema) -> None:
    # Row 2 is younger than the safety lag, so the load never computes its key; counting the
    # source afterwards does, and divides by zero.
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at timestamptz NOT NULL, d int NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, now() - INTERVAL '1 hour', 1), (2, now(), 0)")
    loads.configure(
        pg,
        DEFAULTS,
        query=f"SELECT id / d AS id, at FROM {pg.name}.orders",
        safety_lag="10m",
        checks={"reconcile_counts": 0.0},
    )

    checks = _checks(loads)

    counts = checks["row_counts_match_source"]
    assert not counts.passed and counts.severity == dg.AssetCheckSeverity.WARN
    assert "the check row_counts_match_source could not run" in (counts.description or "")
    assert "division by zero" in counts.metadata["error"].value
    assert checks["primary_key_unique"].passed
    assert loads.metadata()["rows_written"] == 1


def test_a_full_refresh_that_lands_below_the_cursor_warns(loads: Loads, pg: Schema) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at int NOT NULL)")
    pg.execute("INSERT INTO orders SELECT i, i FROM generate_series(1, 10) i")
    loads.configure(pg, DEFAULTS)
    assert loads.run().success
    pg.execute("DELETE FROM orders WHERE id > 7")  # the source lost its newest rows

    check = _checks(loads, full_refresh=True)["cursor_not_backwards"]

    assert loads.metadata()["cursor"] == "7"
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["previous_cursor"].value == "10"


def test_an_empty_backfill_window_in_asset_config_is_refused(loads: Loads, pg: Schema) -> None:
    loads.configure(pg, DEFAULTS, cursor={"column": "at", "type": "int"})
    config = {"backfill_from": "20", "backfill_to": "10"}

    run = loads.execute(config, raise_on_error=False)

    (failure,) = run.get_step_failure_events()
    message = failure.step_failure_data.error.message  # type: ignore[union-attr]
    assert "the backfill window [20, 10) is empty; backfill_from is where it starts" in message


def test_primary_key_unique_groups_by_a_key_read_from_the_database(
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute("CREATE TABLE orders (a int, b int, at int NOT NULL, PRIMARY KEY (a, b))")
    pg.execute("INSERT INTO orders VALUES (1, 1, 1), (1, 2, 2), (2, 1, 3)")
    loads.configure(pg, DEFAULTS, primary_key=None)

    check = _checks(loads)["primary_key_unique"]

    assert check.passed, check.metadata
    assert check.metadata["primary_key"].value == "a, b"
    assert check.metadata["duplicate_keys"].value == 0
