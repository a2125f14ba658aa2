"""The checks in Dagster runs: a run that fails before it commits evaluates none of them, and the
checks sensor leaves them skipped; `primary_key_unique` keeps the assets downstream of the table
from running; a hand-set cursor's observation says what the next run reads, before that run, and
no check passes for a cursor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets import checks, factory
from incremental_assets.cli import main as cli
from incremental_assets.config import Project
from incremental_assets.definitions import build_definitions
from incremental_assets.factory import build_table_asset
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets_tests.support.project import materialize, write_project

ORDERS = {
    "name": "orders",
    "source": "landing",
    "table": "orders",
    "mode": "merge",
    "cursor": {"column": "at", "type": "integer"},
    "primary_key": ["id"],
}


def _project(tmp_path: Path, rows: int = 10, **table: Any) -> Project:
    """A landing folder holding `rows` orders (`at` = `id`), and the table reading it."""
    folder = tmp_path / "landing" / "orders"
    folder.mkdir(parents=True)
    ids = list(range(1, rows + 1))
    pq.write_table(pa.table({"id": ids, "at": ids}), folder / "part-0.parquet")
    config = {
        "lake": {"path": str(tmp_path / "lake"), "format": "parquet"},
        "sources": {"landing": {"type": "files", "path": str(tmp_path / "landing")}},
        "tables": [{**ORDERS, **table}],
    }
    return write_project(tmp_path, config)


def _tick(
    sensor: dg.SensorDefinition, defs: dg.Definitions, instance: dg.DagsterInstance
) -> dg.RunRequest | dg.SkipReason:
    """The sensor's one tick, as the daemon runs it."""
    result = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
    assert isinstance(result, dg.RunRequest | dg.SkipReason)
    return result


def _checks_only(
    defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest
) -> dg.ExecuteInProcessResult:
    """The run `request` asks for: the checks alone, with its tags."""
    after = dg.define_asset_job(
        "after",
        selection=dg.AssetSelection.checks(*(request.asset_check_keys or ())),
        tags=request.tags,
    )
    job = dg.Definitions.merge(defs, dg.Definitions(jobs=[after])).resolve_job_def("after")
    return job.execute_in_process(instance=instance, raise_on_error=False)


def _evaluations(instance: dg.DagsterInstance, run_id: str) -> dict[str, dg.AssetCheckEvaluation]:
    found = {}
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.dagster_event.asset_check_evaluation_data  # type: ignore[union-attr]
        found[evaluation.check_name] = evaluation
    return found


def test_a_run_that_fails_before_it_commits_evaluates_no_check_and_they_end_skipped(
    tmp_path: Path, instance: dg.DagsterInstance, spark_resource: IncrementalSparkResource
) -> None:
    project = _project(tmp_path, table="missing")  # a folder that isn't there: the run fails
    defs = build_definitions(project, spark=spark_resource)
    sensor = defs.resolve_sensor_def(IncrementalAssetsTranslator(project.lake).checks_sensor_name)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    quiet = _tick(sensor, defs, instance)

    failed = materialize(project, "orders", instance, spark_resource)

    assert not failed.success and not _evaluations(instance, failed.run_id)
    # Dagster shows the two checks the run planned "Execution failed" until the sensor ticks.
    request = _tick(sensor, defs, instance)
    assert isinstance(quiet, dg.SkipReason) and isinstance(request, dg.RunRequest)
    assert request.run_key == f"after failed runs {failed.run_id}"
    assert {key.name for key in request.asset_check_keys or ()} == {
        checks.CURSOR_FORWARD,
        checks.KEY_UNIQUE,
    }
    # What the sensor starts: the checks alone, tagged, which record nothing.
    run = _checks_only(defs, instance, request)
    assert isinstance(_tick(sensor, defs, instance), dg.SkipReason)  # once
    assert run.success  # the checks it planned and left unevaluated: Dagster shows them skipped
    assert not _evaluations(instance, run.run_id)
    # A checks-only run, which says why the checks are skipped, and loads nothing.
    planned = instance.all_logs(
        run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED
    )
    assert (
        len(planned) == 2
        and run.dagster_run.tags[checks.CHECKS_AFTER_FAILED_RUN] == "after failure"
    )
    said = [entry.user_message for entry in instance.all_logs(run.run_id)]
    assert (
        "orders: checks only, nothing loaded: the run before failed without evaluating its "
        "checks and committed nothing new for them to examine, so they are marked skipped"
    ) in said
    assert not run.get_asset_materialization_events()


def test_a_checks_only_run_that_failed_is_not_asked_for_again(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = _project(tmp_path, table="missing")
    defs = build_definitions(project, spark=spark_resource)
    sensor = defs.resolve_sensor_def(IncrementalAssetsTranslator(project.lake).checks_sensor_name)
    assert not materialize(project, "orders", instance, spark_resource).success
    request = _tick(sensor, defs, instance)
    assert isinstance(request, dg.RunRequest)

    def broken(*_: object) -> None:
        raise RuntimeError("the checks-only run fails too")

    monkeypatch.setattr(factory, "_checks_alone", broken)
    assert not _checks_only(defs, instance, request).success

    # Its checks show "Execution failed" again, and asking again would fail at every tick.
    assert isinstance(_tick(sensor, defs, instance), dg.SkipReason)


@pytest.mark.parametrize("blocking", [True, False])
def test_a_key_held_twice_keeps_the_assets_downstream_of_the_table_from_running(
    blocking: bool,
    tmp_path: Path,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doubled = dg.AssetCheckResult(
        check_name=checks.KEY_UNIQUE, passed=False, severity=checks.ERROR, metadata={"n": 2}
    )
    monkeypatch.setattr(checks, "primary_key_unique", lambda *_: doubled)
    project = _project(tmp_path, checks={"key_unique_blocking": blocking})
    table = build_table_asset(
        project, project.table("orders"), IncrementalAssetsTranslator(project.lake)
    )
    ran = []

    @dg.asset(deps=[dg.AssetKey("orders")])
    def order_report() -> None:
        ran.append("order_report")

    result = dg.materialize(
        [table, order_report],
        instance=instance,
        resources={"spark": spark_resource},
        raise_on_error=False,
    )

    materialized = [e.asset_key for e in result.get_asset_materialization_events()]
    if blocking:
        assert not result.success and ran == []
        assert materialized == [dg.AssetKey("orders")]  # the table itself is committed
    else:
        assert result.success and ran == ["order_report"]
    [key_check] = [
        e for e in result.get_asset_check_evaluations() if e.check_name == "primary_key_unique"
    ]
    assert not key_check.passed and key_check.blocking is blocking


def test_a_hand_set_cursor_is_the_one_the_page_shows_and_the_next_run_reads(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = _project(tmp_path)
    first = materialize(project, "orders", instance, spark_resource)
    assert first.success
    monkeypatch.setenv("DAGSTER_HOME", str(instance.root_directory))

    assert (
        cli(["--config", project.path, "cursor", "set", "orders", "4", "--reason", "replay"]) == 0
    )
    shown = _latest_observation(instance)
    run = materialize(project, "orders", instance, spark_resource)
    assert cli(["--config", project.path, "cursor", "reset", "orders", "--reason", "redo"]) == 0
    reset = _latest_observation(instance)

    assert shown.metadata["cursor"].value == "4"
    assert str(shown.description).startswith("The next run reads from 4: cursor set by hand (")
    assert "replay (set by " in str(shown.description)
    assert run.metadata["previous_cursor"] == "4"  # the run read what the page showed
    assert str(reset.description).startswith(
        "The next run reads everything and replaces the table: cursor reset by hand (redo"
    )
    # A value, not a verdict: no check passes for the cursor, before or after the run.
    passed = [name for r in (first, run) for name in _evaluations(instance, r.run_id)]
    assert sorted(passed) == ["cursor_not_backwards"] * 2 + ["primary_key_unique"] * 2


def _latest_observation(instance: dg.DagsterInstance) -> dg.AssetObservation:
    (record,) = instance.fetch_observations(dg.AssetKey("orders"), limit=1).records
    observation = record.event_log_entry.asset_observation
    assert observation is not None
    return observation
