"""Wiring: the configuration file -> assets (each table's, and the source tables they read, once
each), the all-tables job, schedules, sensors and the Spark resource.

A table whose settings are wrong doesn't take the others down: it becomes an asset whose every
run fails at once with the configuration's message, and the rest load. Under `dg check defs`
(and `dagster definitions validate`) the definitions fail instead, with the same message.
"""

import os
import sys
from collections.abc import Sequence
from types import TracebackType

import dagster as dg

from incremental_assets.config import InvalidTable, Project, load_config
from incremental_assets.errors import ConfigError, IncrementalAssetsError
from incremental_assets.factory import TableRunConfig, build_table_asset, failing_cleanly
from incremental_assets.maintenance_job import build_maintenance
from incremental_assets.pool_slots import in_process_executor
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.schedules import build_schedules
from incremental_assets.sensors import build_checks_sensor, build_pool_guard_sensor, build_sensors
from incremental_assets.translator import (
    ALL_TABLES_JOB,
    IncrementalAssetsTranslator,
    translator_for,
)

__all__ = ["ALL_TABLES_JOB", "build_definitions", "defs"]

# Set by Dagster's `dg check defs` and `dagster definitions validate` while they load the code.
VALIDATING = "DAGSTER_IS_DEFS_VALIDATION_CLI"


def build_definitions(
    project: Project,
    translator: IncrementalAssetsTranslator | None = None,
    spark: IncrementalSparkResource | None = None,
    invalid_tables: Sequence[InvalidTable] = (),
) -> dg.Definitions:
    """The project's assets, job, schedules, sensors and Spark resource.

    `translator` defaults to the one the configuration names; `spark` lets several projects in
    one code location share one resource object, as Dagster requires. Each of `invalid_tables`
    (`config.load_config`) becomes an asset that fails, unless Dagster is validating the code,
    which then fails with their problems.
    """
    if invalid_tables and os.environ.get(VALIDATING) == "1":
        problems = dict.fromkeys(p for table in invalid_tables for p in table.problems)
        raise ConfigError(problems=list(problems), file=project.path)
    translator = translator or translator_for(project)
    assets = [build_table_asset(project, table, translator) for table in project.tables]
    assets += [build_invalid_table_asset(table, translator) for table in invalid_tables]
    all_tables = dg.define_asset_job(
        translator.job_name,
        selection=dg.AssetSelection.assets(*assets),
        description="Materialize every configured table, sharing one Spark session.",
    )
    sensors = build_sensors(project, translator)
    tables = [*project.tables, *(invalid.table for invalid in invalid_tables)]
    pools = [translator.pool(table) for table in tables]
    sensors.append(build_pool_guard_sensor(translator.pool_guard_sensor_name, pools))
    checked = [key for asset in assets for key in asset.check_keys]
    if checked:
        sensors.append(build_checks_sensor(translator.checks_sensor_name, checked))
    maintenance_jobs, maintenance_schedules = build_maintenance(project, translator)
    return dg.Definitions(
        assets=[*assets, *source_specs(project, translator)],
        jobs=[all_tables, *maintenance_jobs],
        schedules=[*build_schedules(project, translator), *maintenance_schedules],
        sensors=sensors,
        resources={"spark": spark or IncrementalSparkResource.from_spec(project.spark)},
        executor=in_process_executor,
    )


def source_specs(project: Project, translator: IncrementalAssetsTranslator) -> list[dg.AssetSpec]:
    """The source tables' assets, upstream of the tables: one per key, however many tables read
    it (the first table's spec, its description saying how to switch on that table's sensor)."""
    specs: dict[dg.AssetKey, dg.AssetSpec] = {}
    for table in project.tables:
        spec = translator.get_source_asset_spec(table)
        if spec.key not in specs:
            described = "\n\n".join(
                filter(None, [spec.description, translator.source_sensor_help(table)])
            )
            specs[spec.key] = spec.replace_attributes(description=described)
    return list(specs.values())


def build_invalid_table_asset(
    invalid: InvalidTable, translator: IncrementalAssetsTranslator
) -> dg.AssetsDefinition:
    """The asset of a table whose settings are wrong, under the key it would have: every run
    fails at once, with the configuration's message naming the file, the table and the field."""
    named = translator.get_asset_spec(invalid.table)
    error = invalid.error
    spec = dg.AssetSpec(
        key=named.key,
        group_name=named.group_name,
        description=f"Not loaded: its configuration is invalid. Every run fails until it is "
        f"fixed:\n\n```\n{error}\n```",
    )

    @dg.multi_asset(
        specs=[spec], name=translator.op_name(invalid.table), pool=translator.pool(invalid.table)
    )
    def invalid_table(config: TableRunConfig) -> None:  # the tables' run config is accepted
        with failing_cleanly():
            raise error

    return invalid_table


def definitions_from_file(path: str | None = None) -> dg.Definitions:
    """Definitions from `path`, `$INCREMENTAL_ASSETS_CONFIG` or `./incremental_assets.yaml`."""
    loaded = load_config(path)
    return build_definitions(loaded.project, invalid_tables=loaded.invalid_tables)


@dg.definitions
def defs() -> dg.Definitions:
    """Definitions from `incremental_assets.yaml` (or $INCREMENTAL_ASSETS_CONFIG)."""
    try:
        return definitions_from_file()
    except IncrementalAssetsError:
        _report_without_traceback()
        raise


def _report_without_traceback() -> None:
    """If our error ends the process (the `dagster` CLI), print its message, not a traceback.

    In the webserver the error is caught and shown on the code location instead.
    """
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if isinstance(value, IncrementalAssetsError):
            print(f"incremental_assets: {value}", file=sys.stderr)
        else:
            previous(kind, value, tb)

    sys.excepthook = hook
