"""One source-change sensor per table: a run only when the source has something new.

A tick reads the table's stored state from the instance and probes the source (`probes.py`):
PostgreSQL over a plain DB-API connection, files by listing their modification times. No JVM
starts. The run key names the stored cursor and what is new (`orders:2025-01-01T...->2025-01-02T...`):
a tick that sees the same new rows again doesn't launch a second run, and a run that could not
move the cursor (rows held back) doesn't make the next tick ask again, while a run that did move
it makes new rows ask for a new run. A probe that fails fails the tick. Sensors are stopped unless
the table's config says `sensor: true` or `sensor: {interval: ...}`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from incremental_assets.config import FilesSourceSpec, Project, TableSpec
from incremental_assets.probes import probe_source
from incremental_assets.state import (
    StateRecords,
    last_incremental_materialization,
    read_state_records,
    record_of,
)
from incremental_assets.translator import (
    AUTOMATION_SENSOR,
    IncrementalAssetsTranslator,
    sensor_name_of,
)

__all__ = ["AUTOMATION_SENSOR", "build_sensors", "evaluate", "run_key_for"]
# The tag Dagster puts on every run a sensor requests.
SENSOR_NAME_TAG = "dagster/sensor_name"


def build_sensors(
    project: Project, translator: IncrementalAssetsTranslator
) -> list[dg.SensorDefinition]:
    specs = {table.name: translator.get_asset_spec(table) for table in project.tables}
    sensors = [
        _sensor_for(table, specs[table.name].key, translator.sensor_name(table))
        for table in project.tables
    ]
    automated = [spec.key for spec in specs.values() if spec.automation_condition is not None]
    if not automated:
        return sensors
    return [*sensors, _automation_sensor(translator.automation_sensor_name, automated)]


def _automation_sensor(name: str, keys: list[dg.AssetKey]) -> dg.SensorDefinition:
    """Evaluates the tables' `automation:` conditions, running from the start.

    Dagster's own default automation sensor starts stopped, so without this one `automation:`
    would do nothing until someone switched that sensor on.
    """
    return dg.AutomationConditionSensorDefinition(
        name,
        target=dg.AssetSelection.assets(*keys),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests runs of the tables whose `automation:` condition is met.",
    )


def _sensor_for(table: TableSpec, key: dg.AssetKey, name: str) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=max(1, int(table.sensor.interval.total_seconds())),
        default_status=dg.DefaultSensorStatus.RUNNING
        if table.sensor.running
        else dg.DefaultSensorStatus.STOPPED,
        target=dg.AssetSelection.assets(key),
        description=f"Requests a run of {table.name} when its source has rows past the stored cursor.",
    )
    def source_changed(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        return evaluate(context.instance, table, key, context.cursor, name)

    return source_changed


def evaluate(
    instance: dg.DagsterInstance,
    table: TableSpec,
    key: dg.AssetKey,
    last_run_key: str | None,
    sensor_name: str | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """One tick: a run request when the source has what a run would load, else why not."""
    records = read_state_records(instance, key)
    stored = records.stored_state()
    last_run = _last_run_start(instance, key, records) if _reads_files(table) else None
    new = probe_source(table, stored, last_run)
    if new is None:
        return dg.SkipReason(
            f"nothing new in {table.source_object} for a run to load (stored cursor {stored.cursor})"
        )
    run_key = run_key_for(table, records, new)
    failed = _failed_since(instance, sensor_name or sensor_name_of(key), records)
    if failed is not None:
        run_key += f" (again after failed run {failed})"
    if run_key == last_run_key:
        return dg.SkipReason(f"a run was already requested for {run_key}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=run_key, asset_selection=[key])], cursor=run_key
    )


def run_key_for(table: TableSpec, records: StateRecords, new: str) -> str:
    """`<table>:<stored cursor>-><what is new>`, and the hand-set cursor's event when there is one.

    The override's event id makes a `cursor set|reset` ask for a run even when the same key was
    used before it.
    """
    stored = records.stored_state().cursor
    key = f"{table.name}:{stored}->{new}" if stored is not None else f"{table.name}:{new}"
    if records.override is not None:
        action = record_of(records.override).cursor_action
        key += f" (after cursor {action} #{records.override.storage_id})"
    return key


def _failed_since(
    instance: dg.DagsterInstance, sensor_name: str, records: StateRecords
) -> str | None:
    """The id of the newest failed run this sensor requested since the stored state was recorded.

    Its run key is spent (Dagster launches a key once), so without a new key the same rows would
    never be asked for again.
    """
    since = records.latest
    failures = instance.get_run_records(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            tags={SENSOR_NAME_TAG: sensor_name},
            created_after=datetime.fromtimestamp(since.timestamp, UTC) if since else None,
        ),
        limit=1,
    )
    return failures[0].dagster_run.run_id if failures else None


def _reads_files(table: TableSpec) -> bool:
    return isinstance(table.source, FilesSourceSpec)


def _last_run_start(
    instance: dg.DagsterInstance, key: dg.AssetKey, records: StateRecords
) -> datetime | None:
    """When the run that wrote the stored state began; None when a hand-set cursor came after it."""
    if records.override is not None:
        return None
    record = last_incremental_materialization(instance, key)
    if record is None:
        return None
    run = instance.get_run_record_by_id(record.run_id)
    started = run.start_time if run is not None and run.start_time else record.timestamp
    return datetime.fromtimestamp(started, UTC)
