"""`lake.maintenance`: after each run's commit (the default, test_iceberg.py), as a Dagster job of
its own on a schedule, or not at all.

With `scheduled`, runs keep no table; the job compacts what is due, in each table's pool, and
says what it did; the table reads the same, and the next run still adds to it incrementally.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from incremental_assets.definitions import build_definitions
from incremental_assets.errors import ConfigError
from incremental_assets.maintenance_job import MAINTAINED
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.translator import IncrementalAssetsTranslator
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.orders import (
    ICEBERG,
    change_orders,
    create_orders,
    orders_held,
)
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import rows_by


def merged_four_times(loads: Loads, pg: Schema, maintenance: str) -> list[dict[str, Any]]:
    """A merge table loaded, then a quarter of its rows changed four times: each run's metadata
    (enough deletes that compaction is due)."""
    create_orders(pg, 200)
    loads.configure(pg, ORDERS_MERGE, lake={**ICEBERG, "maintenance": maintenance})
    assert loads.run().success
    ran = []
    for run in range(1, 5):
        change_orders(pg, run, new=2, every=4)
        result = loads.run()
        assert result.success, result.failure
        ran.append(result.metadata)
    return ran


def what_it_did(done: dg.ExecuteInProcessResult) -> str:
    """The maintenance op's output metadata: what it did."""
    (output,) = [e for e in done.all_events if e.event_type == dg.DagsterEventType.STEP_OUTPUT]
    data = output.step_output_data
    return str(data.metadata[MAINTAINED].value)


def test_a_scheduled_job_keeps_the_tables_and_the_runs_dont(loads: Loads, pg: Schema) -> None:
    ran = merged_four_times(loads, pg, "scheduled")
    defs = build_definitions(loads.project, spark=loads.spark_resource)
    translator = IncrementalAssetsTranslator(loads.project.lake)
    table = loads.project.table("orders")

    job = defs.get_job_def(translator.maintenance_job_name)
    schedule = defs.get_schedule_def(translator.maintenance_schedule_name)
    done = job.execute_in_process(instance=loads.instance)

    assert [m.get("maintenance") for m in ran] == [None] * 4
    assert schedule.cron_schedule == "0 3 * * *"
    assert job.graph.node_defs[0].pools == {translator.pool(table)}  # never beside a run
    said = what_it_did(done)
    assert said.startswith("compact:"), said
    iceberg = loads.iceberg_table()
    assert rows_by(iceberg.scan().to_arrow(), ["id", "note"]) == orders_held(pg)
    assert iceberg.current_snapshot().summary.operation.value == "replace"
    change_orders(pg, 5, new=2, every=4)
    after = loads.run()
    assert after.success, after.failure
    assert after.metadata["full_refresh"] is False
    assert rows_by(loads.iceberg_table().scan().to_arrow(), ["id", "note"]) == orders_held(pg)


def test_with_nothing_due_the_job_starts_no_spark_and_says_so(loads: Loads, pg: Schema) -> None:
    create_orders(pg, 20)
    loads.configure(pg, ORDERS_MERGE, lake={**ICEBERG, "maintenance": "scheduled"})
    assert loads.run().success
    translator = IncrementalAssetsTranslator(loads.project.lake)
    unstarted = IncrementalSparkResource(spark_config={})  # a session of its own, if asked
    defs = build_definitions(loads.project, spark=unstarted)

    done = defs.get_job_def(translator.maintenance_job_name).execute_in_process(
        instance=loads.instance
    )

    assert done.success
    assert what_it_did(done) == "nothing due"
    assert unstarted._spark_session is None


def test_off_keeps_nothing_and_defines_no_job(loads: Loads, pg: Schema) -> None:
    ran = merged_four_times(loads, pg, "off")
    defs = build_definitions(loads.project, spark=loads.spark_resource)
    translator = IncrementalAssetsTranslator(loads.project.lake)

    assert [m.get("maintenance") for m in ran] == [None] * 4
    # The last merge's append (after its delete) is the head: no maintenance commit followed.
    assert loads.iceberg_table().current_snapshot().summary.operation.value == "append"
    assert translator.maintenance_job_name not in {j.name for j in defs.jobs or []}
    assert isinstance(defs.get_job_def(translator.job_name), dg.JobDefinition)


def test_a_copied_lakes_job_never_keeps_the_table_its_catalog_names_elsewhere(
    loads: Loads, pg: Schema, tmp_path: Path
) -> None:
    """A lake folder copied with its catalog names the first lake's files: its runs refuse the
    table as moved, and its maintenance leaves it alone (compacting or sweeping it would commit
    to, and delete files of, the lake it was copied from)."""
    ran = merged_four_times(loads, pg, "scheduled")
    copy = tmp_path / "copied-lake"
    shutil.copytree(loads.lake_dir, copy)
    config = loads.config(pg, ORDERS_MERGE, lake={**ICEBERG, "maintenance": "scheduled"})
    project = loads.write({**config, "lake": {**config["lake"], "path": str(copy)}})
    translator = IncrementalAssetsTranslator(project.lake)
    unstarted = IncrementalSparkResource(spark_config={})
    defs = build_definitions(project, spark=unstarted)

    done = defs.get_job_def(translator.maintenance_job_name).execute_in_process(
        instance=loads.instance
    )

    assert what_it_did(done).startswith("not kept: "), what_it_did(done)
    assert unstarted._spark_session is None
    assert [m.get("maintenance") for m in ran] == [None] * 4
    original = loads.iceberg_table()  # still the first lake's, untouched
    assert original.current_snapshot().summary.operation.value == "append"  # the last merge's


def test_a_table_named_like_a_maintenance_op_is_refused_with_the_fix(
    loads: Loads, pg: Schema
) -> None:
    create_orders(pg, 5)
    config = loads.config(pg, ORDERS_MERGE, lake={**ICEBERG, "maintenance": "scheduled"})
    clash = {**config["tables"][0], "name": "incremental_assets_maintenance__orders"}
    project = loads.write({**config, "tables": [*config["tables"], clash]})

    with pytest.raises(ConfigError) as refused:
        build_definitions(project, spark=loads.spark_resource)

    assert "field 'name'" in str(refused.value)
    assert "lake.maintenance: after_commit" in str(refused.value)
