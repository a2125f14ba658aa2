"""Wiring: the configuration file -> assets, the all-tables job, schedules and the Spark resource."""

from __future__ import annotations

import sys
from types import TracebackType

import dagster as dg

from incremental_assets.config import Project, load_project
from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.factory import build_table_asset
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.schedules import build_schedules
from incremental_assets.sensors import build_sensors
from incremental_assets.translator import (
    ALL_TABLES_JOB,
    IncrementalAssetsTranslator,
    translator_for,
)

__all__ = ["ALL_TABLES_JOB", "build_definitions", "defs"]


def build_definitions(
    project: Project,
    translator: IncrementalAssetsTranslator | None = None,
    spark: IncrementalSparkResource | None = None,
) -> dg.Definitions:
    """The project's assets, job, schedules, sensors and Spark resource.

    `translator` defaults to the one the configuration names; `spark` lets several projects in
    one code location share one resource object, as Dagster requires.
    """
    translator = translator or translator_for(project)
    assets = [build_table_asset(project, table, translator) for table in project.tables]
    all_tables = dg.define_asset_job(
        translator.job_name,
        selection=dg.AssetSelection.assets(*assets),
        description="Materialize every configured table, sharing one Spark session.",
    )
    return dg.Definitions(
        assets=assets,
        jobs=[all_tables],
        schedules=build_schedules(project, translator),
        sensors=build_sensors(project, translator),
        resources={"spark": spark or IncrementalSparkResource.from_spec(project.spark)},
        # One process per run: Spark's JVM starts once and serves every table.
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Definitions from `incremental_assets.yaml` (or $INCREMENTAL_ASSETS_CONFIG)."""
    try:
        return build_definitions(load_project())
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
