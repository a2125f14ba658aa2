"""One source-change sensor per table: a run only when the source has something new.

A tick reads the table's stored state from the instance and probes the source (`probes.py`):
PostgreSQL over a plain DB-API connection, files by listing their modification times. No JVM
starts. The run key is the probe's change marker (for example the newest cursor value), so a tick
that sees the same new rows twice doesn't launch a second run. Sensors are stopped unless the
table's config says `sensor: true` or `sensor: {interval: ...}`.
"""

from __future__ import annotations

import dagster as dg

from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.probes import probe_source
from incremental_assets.spec import Project, TableSpec
from incremental_assets.state import read_stored_state
from incremental_assets.translator import IncrementalAssetsTranslator


def build_sensors(
    project: Project, translator: IncrementalAssetsTranslator
) -> list[dg.SensorDefinition]:
    return [_sensor_for(table, translator.get_asset_spec(table).key) for table in project.tables]


def _sensor_for(table: TableSpec, key: dg.AssetKey) -> dg.SensorDefinition:
    @dg.sensor(
        name=f"{'__'.join(key.path)}_source_sensor",
        minimum_interval_seconds=max(1, int(table.sensor.interval.total_seconds())),
        default_status=dg.DefaultSensorStatus.RUNNING
        if table.sensor.running
        else dg.DefaultSensorStatus.STOPPED,
        target=dg.AssetSelection.assets(key),
        description=f"Requests a run of {table.name} when its source has rows past the stored cursor.",
    )
    def source_changed(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        return evaluate(context.instance, table, key, context.cursor)

    return source_changed


def evaluate(
    instance: dg.DagsterInstance, table: TableSpec, key: dg.AssetKey, last_marker: str | None
) -> dg.SensorResult | dg.SkipReason:
    stored = read_stored_state(instance, key)
    try:
        marker = probe_source(table, stored)
    except IncrementalAssetsError as exc:
        return dg.SkipReason(str(exc))
    if marker is None:
        return dg.SkipReason(f"nothing in the source past the cursor {stored.cursor}")
    if marker == last_marker:
        return dg.SkipReason(f"a run was already requested for {marker}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=marker, asset_selection=[key])], cursor=marker
    )
