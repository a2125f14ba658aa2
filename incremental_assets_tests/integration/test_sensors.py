"""Source-change sensors against real PostgreSQL and real files, with no JVM."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets.cli import main as cli
from incremental_assets.config import Project
from incremental_assets.cursor import CursorType
from incremental_assets.definitions import build_definitions
from incremental_assets.errors import SourceError
from incremental_assets.factory import build_table_asset
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.sensors import evaluate
from incremental_assets.state import read_stored_state, record_cursor_override
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets_tests.support.databases import SourceDb
from incremental_assets_tests.support.mariadb import Database
from incremental_assets_tests.support.postgres import PostgresServer, Schema
from incremental_assets_tests.support.project import ProjectBuilder, materialize, write_project

DEFAULTS = {"name": "orders", "mode": "append", "transaction_cap": False}


def _requested(result: dg.SensorResult | dg.SkipReason) -> str | None:
    if isinstance(result, dg.SkipReason) or not result.run_requests:
        return None
    (request,) = result.run_requests
    return request.run_key


def _tick(
    instance: dg.DagsterInstance, project: Project, last_run_key: str | None
) -> tuple[str | None, dict[str, Any] | None]:
    """A tick of the table's sensor as Dagster runs it, its observation of the source recorded:
    the run key it asks for, and what it observed."""
    table = project.table(project.tables[0].name)
    source = IncrementalAssetsTranslator(project.lake).source_asset_key(table)
    result = evaluate(instance, table, dg.AssetKey(table.name), last_run_key, None, source)
    events = [] if isinstance(result, dg.SkipReason) else list(result.asset_events)
    for event in events:
        assert isinstance(event, dg.AssetObservation) and event.asset_key == source
        instance.report_runless_asset_event(event)
    observed = [{k: v.value for k, v in event.metadata.items()} for event in events]
    assert len(observed) <= 1
    return _requested(result), observed[0] if observed else None


def test_a_run_is_requested_only_when_rows_pass_the_stored_cursor(
    make_project: ProjectBuilder,
    db: SourceDb,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    db.execute("INSERT INTO orders VALUES (1, 10), (2, 20)")
    project = make_project(db, DEFAULTS, cursor="at")
    table, key = project.table("orders"), dg.AssetKey("orders")

    first = _requested(evaluate(instance, table, key, None))
    assert first == "orders:20"  # never loaded: ask for the first run
    assert materialize(project, "orders", instance, spark_resource).success
    assert _requested(evaluate(instance, table, key, first)) is None  # nothing past cursor 20

    db.execute("INSERT INTO orders VALUES (3, 30)")
    second = _requested(evaluate(instance, table, key, first))
    assert second == "orders:20->30"
    # The same new rows seen by the next tick don't launch a second run.
    assert _requested(evaluate(instance, table, key, second)) is None


def _flush_change_counters(db: SourceDb) -> None:
    if db.kind == "postgres":
        db.execute("SELECT pg_stat_force_next_flush()")
    else:
        time.sleep(1.1)  # InnoDB's UPDATE_TIME counts in whole seconds


def test_a_tick_records_how_far_the_source_is_ahead_of_the_lake_when_that_changes(
    make_project: ProjectBuilder,
    db: SourceDb,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    db.execute("INSERT INTO orders VALUES (1, 10), (2, 20)")
    project = make_project(db, DEFAULTS, cursor="at")

    first_key, first = _tick(instance, project, None)
    _, unchanged = _tick(instance, project, first_key)
    db.execute("INSERT INTO orders VALUES (3, 30)")
    _, more = _tick(instance, project, first_key)
    assert materialize(project, "orders", instance, spark_resource).success
    _, caught_up = _tick(instance, project, first_key)

    assert first == {"table": "orders", "lake_cursor": "", "newest_cursor": "20", "rows_waiting": 2}
    assert unchanged is None  # nothing moved: nothing recorded
    assert more is not None and (more["newest_cursor"], more["rows_waiting"]) == ("30", 3)
    # Caught up: the row at the cursor, which every run reads again, is in the lake already.
    assert caught_up is not None
    assert (caught_up["lake_cursor"], caught_up["newest_cursor"]) == ("30", "30")
    assert caught_up["rows_waiting"] == 0


def test_a_tick_says_how_far_behind_a_time_cursor_is_in_seconds_and_readably(
    make_project: ProjectBuilder, db: SourceDb, instance: dg.DagsterInstance
) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, at timestamp NOT NULL)")
    db.execute(
        "INSERT INTO orders VALUES (1, '2025-01-01 00:00:00'), (2, '2025-01-01 00:00:00'), "
        "(3, '2025-01-01 02:05:00')"
    )
    project = make_project(db, DEFAULTS, cursor="at")
    table = project.table("orders")
    previous = read_stored_state(instance, dg.AssetKey("orders"))
    record_cursor_override(
        instance,
        dg.AssetKey("orders"),
        previous,
        "2025-01-01T00:00:00.000000",
        "at",
        CursorType.TIMESTAMP,
        "as if a run had loaded the first two",
    )

    _, observed = _tick(instance, project, None)

    assert observed is not None and table.name == observed["table"]
    assert (observed["behind_seconds"], observed["behind"]) == (7_500.0, "2 h 5 min")
    assert observed["rows_waiting"] == 1  # the two rows at the cursor are not waiting


def _files_table(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """An empty landing folder `events` and the config of the files table reading it."""
    landing = tmp_path / "landing" / "events"
    landing.mkdir(parents=True)
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"drop": {"type": "files", "path": str(tmp_path / "landing")}},
        "tables": [{"name": "events", "source": "drop", "table": "events", "cursor": "at"}],
    }
    return landing, config


def test_a_files_tick_records_the_files_waiting_for_a_run(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing, config = _files_table(tmp_path)
    project = write_project(tmp_path, config)

    assert _tick(instance, project, None) == (None, None)  # an empty folder: nothing to say
    pq.write_table(pa.table({"at": [1]}), landing / "a.parquet")
    key, one = _tick(instance, project, None)
    pq.write_table(pa.table({"at": [2]}), landing / "b.parquet")
    _, two = _tick(instance, project, key)

    assert one is not None and one["files_waiting"] == 1 and one["newest_file_modified"]
    assert two is not None and two["files_waiting"] == 2
    assert IncrementalAssetsTranslator(project.lake).source_asset_key(
        project.table("events")
    ) == dg.AssetKey(["drop", "events_source"])


def test_a_table_without_a_cursor_is_watched_through_its_change_counters(
    make_project: ProjectBuilder, db: SourceDb, instance: dg.DagsterInstance
) -> None:
    db.execute("CREATE TABLE orders (code {key_text} PRIMARY KEY)")
    db.execute("INSERT INTO orders VALUES ('a')")
    project = make_project(db, DEFAULTS, mode="full_refresh")
    table, key = project.table("orders"), dg.AssetKey("orders")
    _flush_change_counters(db)

    marker = _requested(evaluate(instance, table, key, None))
    assert _requested(evaluate(instance, table, key, marker)) is None
    db.execute("UPDATE orders SET code = 'b'")
    _flush_change_counters(db)
    assert _requested(evaluate(instance, table, key, marker)) not in (None, marker)


def test_a_mysql_change_asks_for_a_run_once_its_second_has_passed(
    make_project: ProjectBuilder, my: Database, instance: dg.DagsterInstance
) -> None:
    """UPDATE_TIME counts whole seconds: a run asked for inside one would miss a change committed
    later in it, which leaves UPDATE_TIME, and so the run key, as they were."""
    my.execute("CREATE TABLE orders (code varchar(10) PRIMARY KEY)")
    project = make_project(my, DEFAULTS, mode="full_refresh")
    table, key = project.table("orders"), dg.AssetKey("orders")
    for _ in range(5):  # until a change and a tick fall in the same second
        (fraction,) = my.query("SELECT MICROSECOND(NOW(6))")[0]
        time.sleep((1_000_000 - fraction) / 1e6 + 0.05)
        my.execute("REPLACE INTO orders VALUES ('a')")
        early = _requested(evaluate(instance, table, key, None))
        ((changed, now),) = my.query(
            "SELECT UPDATE_TIME, NOW() FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA = '{my.name}' AND TABLE_NAME = 'orders'"
        )
        if changed == now:
            break
    assert changed == now, "no tick fell in the second of its change"
    assert early is None
    time.sleep(1.1)
    assert _requested(evaluate(instance, table, key, None)) == f"orders:changes:{changed}"


def test_a_missing_table_without_a_cursor_fails_the_tick_naming_it(
    make_project: ProjectBuilder, db: SourceDb, instance: dg.DagsterInstance
) -> None:
    project = make_project(db, DEFAULTS, mode="full_refresh")

    with pytest.raises(SourceError, match=r"Table 'orders'.*orders.*the sensor"):
        evaluate(instance, project.table("orders"), dg.AssetKey("orders"), None)


def test_a_view_without_a_cursor_fails_the_tick_saying_how_to_watch_it(
    make_project: ProjectBuilder, db: SourceDb, instance: dg.DagsterInstance
) -> None:
    """A view has no change record: MySQL's UPDATE_TIME is NULL, which once asked for one run."""
    db.execute(
        "CREATE TABLE orders (code {key_text} PRIMARY KEY)",
        "CREATE VIEW recent AS SELECT * FROM orders",
    )
    project = make_project(db, {**DEFAULTS, "name": "recent"}, mode="full_refresh")

    with pytest.raises(SourceError, match=r"Table 'recent'.*no record of its changes.*cursor"):
        evaluate(instance, project.table("recent"), dg.AssetKey("recent"), None)


def test_a_files_source_is_watched_through_modification_times(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing, config = _files_table(tmp_path)
    table, key = write_project(tmp_path, config).table("events"), dg.AssetKey("events")
    assert _requested(evaluate(instance, table, key, None)) is None  # an empty folder
    pq.write_table(pa.table({"at": [1]}), landing / "a.parquet")
    marker = _requested(evaluate(instance, table, key, None))
    assert marker is not None
    assert _requested(evaluate(instance, table, key, marker)) is None
    pq.write_table(pa.table({"at": [2]}), landing / "b.parquet")
    assert _requested(evaluate(instance, table, key, marker)) not in (None, marker)


def test_a_tick_starts_no_jvm(make_project: ProjectBuilder, tmp_path: Path, db: SourceDb) -> None:
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    db.execute("INSERT INTO orders VALUES (1, 10)")
    config = tmp_path / "incremental_assets.yaml"
    make_project(db, DEFAULTS, cursor="at")
    script = textwrap.dedent(
        f"""
        import dagster as dg
        from pyspark import SparkContext
        from incremental_assets.config import load_project
        from incremental_assets.definitions import build_definitions
        defs = build_definitions(load_project({str(config)!r}))
        sensor = defs.resolve_sensor_def("orders_source_sensor")
        with dg.instance_for_test() as instance:
            result = sensor(dg.build_sensor_context(instance=instance))
        assert result.run_requests[0].run_key == "orders:10", result
        assert SparkContext._gateway is None, "a JVM was started"
        print("no jvm")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no jvm" in done.stdout


def _first_key(result: dg.SensorResult | dg.SkipReason) -> str:
    key = _requested(result)
    assert key is not None, result
    return key


def test_rows_held_back_by_the_safety_lag_ask_for_a_run_once_the_lag_has_passed(
    make_project: ProjectBuilder,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    # A wall-clock cursor in a zone far from UTC: the lag must be measured in that zone.
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at timestamp NOT NULL)")
    pg.execute(
        "INSERT INTO orders VALUES (1, TIMESTAMP '2025-01-01 00:00:00'), "
        "(2, now() AT TIME ZONE 'Asia/Tokyo')"
    )
    # A lag long enough that a slow machine's first run still sees row 2 as too young.
    project = make_project(pg, DEFAULTS, cursor="at", safety_lag="10s", timezone="Asia/Tokyo")
    table, key = project.table("orders"), dg.AssetKey("orders")

    first = _first_key(evaluate(instance, table, key, None))
    assert first == "orders:2025-01-01T00:00:00.000000"  # row 2 is younger than the lag
    assert materialize(project, "orders", instance, spark_resource).success
    assert _requested(evaluate(instance, table, key, first)) is None  # row 2 is still held back
    time.sleep(10.5)

    second = _first_key(evaluate(instance, table, key, first))
    assert second.startswith("orders:2025-01-01T00:00:00.000000->20")
    run = materialize(project, "orders", instance, spark_resource)
    assert run.success and run.metadata["rows_written"] == 1
    assert _requested(evaluate(instance, table, key, second)) is None


def test_rows_held_back_by_an_open_transaction_ask_for_a_run_once_it_ends(
    make_project: ProjectBuilder,
    pg: Schema,
    postgres: PostgresServer,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at timestamptz NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, TIMESTAMPTZ '2025-01-01 00:00:00+00')")
    project = make_project(pg, DEFAULTS, cursor="at", transaction_cap=True)
    table, key = project.table("orders"), dg.AssetKey("orders")
    assert materialize(project, "orders", instance, spark_resource).success
    with postgres.connect(autocommit=False) as open_transaction:
        open_transaction.execute("SELECT 1")  # the transaction has started: rows after it wait
        pg.execute("INSERT INTO orders VALUES (2, now())")
        assert _requested(evaluate(instance, table, key, None)) is None
    new = _first_key(evaluate(instance, table, key, None))
    assert new.startswith("orders:2025-01-01T00:00:00.000000+00:00->20")
    run = materialize(project, "orders", instance, spark_resource)
    assert run.success and run.metadata["rows_written"] == 1


def _files_project(tmp_path: Path, table: str, **extra: Any) -> Any:
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"drop": {"type": "files", "path": str(tmp_path / "landing")}},
        "tables": [{"name": "events", "source": "drop", "table": table, "cursor": "at", **extra}],
    }
    return write_project(tmp_path, config)


def test_a_glob_table_is_watched_through_the_files_it_matches(
    tmp_path: Path, instance: dg.DagsterInstance, spark_resource: IncrementalSparkResource
) -> None:
    landing = tmp_path / "landing" / "events"
    (landing / "2025").mkdir(parents=True)
    project = _files_project(tmp_path, "events/*/*.parquet")
    table, key = project.table("events"), dg.AssetKey("events")
    pq.write_table(pa.table({"at": [1]}), landing / "2025" / "a.parquet")
    pq.write_table(pa.table({"at": [5]}), landing / "outside.parquet")  # not matched

    first = _first_key(evaluate(instance, table, key, None))
    assert first.startswith("events:1 files, newest modified ")
    assert materialize(project, "events", instance, spark_resource).success
    assert _requested(evaluate(instance, table, key, first)) is None
    (landing / "2025" / "notes.txt").write_text("not matched")
    pq.write_table(pa.table({"at": [6]}), landing / "2025" / "_tmp.parquet")  # hidden from Spark
    assert _requested(evaluate(instance, table, key, first)) is None
    pq.write_table(pa.table({"at": [2]}), landing / "2025" / "b.parquet")
    assert _requested(evaluate(instance, table, key, first)) not in (None, first)


def test_a_files_sensor_switched_on_after_the_last_run_asks_for_nothing(
    tmp_path: Path, instance: dg.DagsterInstance, spark_resource: IncrementalSparkResource
) -> None:
    landing = tmp_path / "landing" / "events"
    landing.mkdir(parents=True)
    pq.write_table(pa.table({"at": [1]}), landing / "a.parquet")
    project = _files_project(tmp_path, "events")
    table, key = project.table("events"), dg.AssetKey("events")
    assert materialize(project, "events", instance, spark_resource).success

    assert _requested(evaluate(instance, table, key, None)) is None


def test_a_hand_set_cursor_asks_for_a_run_even_under_a_used_run_key(
    make_project: ProjectBuilder,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, 10), (2, 20)")
    project = make_project(pg, DEFAULTS, cursor="at")
    table, key = project.table("orders"), dg.AssetKey("orders")
    first = _first_key(evaluate(instance, table, key, None))
    assert materialize(project, "orders", instance, spark_resource).success
    monkeypatch.setenv("DAGSTER_HOME", str(instance.root_directory))

    assert cli(["--config", project.path, "cursor", "reset", "orders", "--reason", "again"]) == 0
    again = _first_key(evaluate(instance, table, key, first))

    assert again.startswith("orders:20 (after cursor reset #")


def test_a_failing_probe_fails_the_tick(tmp_path: Path, pg: Schema) -> None:
    # pgjdbc's ssl=true means verify-full; the test server has no SSL, so the probe must fail.
    source = {**pg.source(), "url": pg.source()["url"] + "?ssl=true"}
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"shop": source},
        "tables": [{"name": "orders", "source": "shop", "table": "orders", "cursor": "at"}],
    }
    project = write_project(tmp_path, config)
    sensor = build_definitions(project).resolve_sensor_def("orders_source_sensor")

    with dg.instance_for_test() as instance:
        with pytest.raises(SourceError, match=r"Table 'orders' .*the sensor's probe failed: .*SSL"):
            evaluate(instance, project.table("orders"), dg.AssetKey("orders"), None)
        with pytest.raises(SourceError):
            sensor(dg.build_sensor_context(instance=instance))


def test_rows_a_run_would_hold_back_on_a_date_cursor_do_not_ask_for_a_run(
    make_project: ProjectBuilder,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    """Under the transaction cap a date cursor loads up to yesterday: today may still change."""
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, day date NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, current_date - 2), (2, current_date - 1)")
    project = make_project(pg, DEFAULTS, cursor="day", transaction_cap=True)
    table, key = project.table("orders"), dg.AssetKey("orders")
    assert materialize(project, "orders", instance, spark_resource).success
    pg.execute("INSERT INTO orders VALUES (3, current_date)")

    assert _requested(evaluate(instance, table, key, None)) is None
    run = materialize(project, "orders", instance, spark_resource)
    assert run.metadata["cursor"] == run.metadata["previous_cursor"]  # the run agrees: nothing


def test_a_run_the_sensor_asked_for_that_failed_is_asked_for_again(
    make_project: ProjectBuilder,
    tmp_path: Path,
    pg: Schema,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
) -> None:
    """Dagster launches a run key once; a failed run's key must not stop the sensor for good."""
    pg.execute("CREATE TABLE orders (id int PRIMARY KEY, at bigint NOT NULL)")
    pg.execute("INSERT INTO orders VALUES (1, 10)")
    project = make_project(pg, DEFAULTS, cursor="at")
    table, key = project.table("orders"), dg.AssetKey("orders")
    blocker = tmp_path / "lake" / "orders"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the lake table's folder belongs: the run fails")

    first = _requested(evaluate(instance, table, key, None))
    failed = _launch(project, instance, spark_resource, first)
    again = _requested(evaluate(instance, table, key, first))
    blocker.unlink()
    loaded = _launch(project, instance, spark_resource, again)

    assert first is not None and not failed.success
    assert again is not None and again != first
    assert loaded.success
    assert _requested(evaluate(instance, table, key, again)) is None


def _launch(
    project: Any,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    run_key: str | None,
) -> dg.ExecuteInProcessResult:
    """Run the table as the daemon does for the sensor's request: tagged with its key and name."""
    spec = project.table("orders")
    asset = build_table_asset(project, spec, IncrementalAssetsTranslator(project.lake))
    return dg.materialize(
        [asset],
        instance=instance,
        resources={"spark": spark_resource},
        tags={"dagster/run_key": str(run_key), "dagster/sensor_name": "orders_source_sensor"},
        raise_on_error=False,
    )
