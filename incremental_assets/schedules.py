"""One schedule per table that has `schedule:` in the configuration."""

from __future__ import annotations

import dagster as dg

from incremental_assets.config import Project
from incremental_assets.translator import IncrementalAssetsTranslator


def build_schedules(
    project: Project, translator: IncrementalAssetsTranslator
) -> list[dg.ScheduleDefinition]:
    schedules = []
    for table in project.tables:
        if table.schedule is None:
            continue
        schedules.append(
            dg.ScheduleDefinition(
                name=translator.schedule_name(table),
                cron_schedule=table.schedule,
                target=dg.AssetSelection.assets(translator.asset_key(table)),
                description=f"Loads table {table.name} on '{table.schedule}' (UTC).",
                # Writing `schedule:` in the config is the request to run it.
                default_status=dg.DefaultScheduleStatus.RUNNING,
            )
        )
    return schedules
