"""`checks.key_audit`: a merge table's `primary_key_unique` check, executed alone on a schedule,
reads every file of the lake, not only those a run wrote."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg

from incremental_assets.definitions import build_definitions
from incremental_assets.lake.table import LakeFormat
from incremental_assets_tests.support.loads import ORDERS_MERGE, Loads
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import iceberg_table, lake_file_paths

ORDERS = "CREATE TABLE orders (id bigint PRIMARY KEY, note text, updated_at bigint NOT NULL)"
AUDITED = {**ORDERS_MERGE, "checks": {"key_audit": "0 3 * * *"}}
AUDIT = dg.AssetCheckKey(dg.AssetKey("orders"), "primary_key_unique")


def _audit(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    """What the audit's schedule starts: a run of its target, the check alone."""
    schedule = defs.resolve_schedule_def("orders_key_audit")
    job = defs.resolve_job_def(schedule.job_name)
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not result.get_asset_materialization_events()  # it loads nothing
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.asset_check_key == AUDIT
    # The check blocks what is downstream of the table: a key held twice fails the run.
    assert result.success == evaluation.passed
    return evaluation


def _copy_a_data_file(lake_dir: Path, lake_format: LakeFormat) -> None:
    """A data file held twice (a restore or a copy gone wrong): its keys are in the lake twice."""
    folder = lake_dir / "orders"
    source = (
        next(folder.glob("*.parquet"))
        if lake_format == "parquet"
        else lake_file_paths(lake_dir, "orders")[0]
    )
    # The plain format knows its files by their names: the copy's is one more of the same commit.
    copy = source.with_name(f"{source.stem.rsplit('-', 1)[0]}-99999.parquet")
    shutil.copy2(source, copy)
    if lake_format == "iceberg":
        iceberg_table(lake_dir, "orders").add_files([str(copy)])


def test_the_scheduled_key_audit_reads_every_file_and_finds_a_key_held_twice(
    lake_format: LakeFormat,
    loads: Loads,
    pg: Schema,
) -> None:
    pg.execute(ORDERS)
    pg.execute("INSERT INTO orders SELECT i, 'old', i FROM generate_series(1, 200) i")
    loads.configure(pg, AUDITED)
    assert loads.run().success
    pg.execute("UPDATE orders SET note = 'new', updated_at = 1000 WHERE id = 7")
    assert loads.run().success
    defs = build_definitions(loads.project, spark=loads.spark_resource)
    files = len(loads.files())

    clean = _audit(defs, loads.instance)
    _copy_a_data_file(loads.lake_dir, lake_format)
    doubled = _audit(defs, loads.instance)

    assert clean.passed and clean.metadata["files_checked"].value == files
    assert not doubled.passed
    assert doubled.metadata["files_checked"].value == files + 1
    duplicates = doubled.metadata["duplicate_keys"].value
    assert isinstance(duplicates, int) and duplicates > 0
    assert doubled.severity == dg.AssetCheckSeverity.ERROR
