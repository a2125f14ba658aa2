"""One source-change sensor per table: a run only when the source has something new.

A tick reads the table's stored state from the instance and probes the source (`probes.py`):
PostgreSQL over a plain DB-API connection, files by listing their modification times. No JVM starts.
The run key names the stored cursor and what is new (`orders:2025-01-01T...->2025-01-02T...`): a
tick that sees the same new rows again doesn't launch a second run, and a run that could not move
the cursor (rows held back) doesn't make the next tick ask again, while a run that did move it makes
new rows ask for a new run. A probe that fails fails the tick. Sensors are stopped unless the
table's config says `sensor: true` or `sensor: {interval: ...}`.

A tick also records what it saw of the source as an observation of the table's source asset (its
newest cursor, the lake's, what a run would read now, how far behind the lake is), when that
changed since the table's last one, so the UI shows how far behind each table is.

The checks sensor (`build_checks_sensor`) runs a table's checks alone after a run that failed
before evaluating them, so that Dagster shows them skipped, not "Execution failed" (`checks.py`).
Dagster's daemon writes INFO lines to its log (`make ui`'s terminal) at every tick of every
sensor, whatever the sensor finds and however it says so (a `SkipReason` or nothing): two for a
plain sensor, and for an automation-condition sensor about seven plus one per check it evaluates,
which is why this one is a plain sensor. It ticks every `CHECKS_INTERVAL`: a check shown
"Execution failed" a few minutes longer after a failed run costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from incremental_assets.checks import CHECKS_AFTER_FAILED_RUN, CHECKS_ONLY_TAGS
from incremental_assets.config import FilesSourceSpec, Project, TableSpec
from incremental_assets.lag import readable_duration, seconds_behind
from incremental_assets.metadata import (
    BEHIND,
    BEHIND_SECONDS,
    FILES_WAITING,
    LAKE_CURSOR,
    LOG_BEHIND_BYTES,
    LOG_RETAINED_BYTES,
    NEWEST_CURSOR,
    NEWEST_FILE,
    OBSERVED_FOR,
    ROWS_WAITING,
)
from incremental_assets.pool_slots import GUARD_INTERVAL, free_dead, sensor_cursor, sensor_watch
from incremental_assets.probes import Probe, probe_source
from incremental_assets.results import StoredState
from incremental_assets.state import (
    StateRecords,
    last_incremental_materialization,
    newest_record,
    read_state_records,
    record_of,
)
from incremental_assets.translator import (
    AUTOMATION_SENSOR,
    IncrementalAssetsTranslator,
    sensor_name_of,
)

__all__ = ["AUTOMATION_SENSOR", "build_checks_sensor", "build_sensors", "evaluate", "run_key_for"]
# The tag Dagster puts on every run a sensor requests.
SENSOR_NAME_TAG = "dagster/sensor_name"
# How often the checks sensor looks for a failed run's checks to mark skipped.
CHECKS_INTERVAL = timedelta(minutes=5)


def build_sensors(
    project: Project, translator: IncrementalAssetsTranslator
) -> list[dg.SensorDefinition]:
    specs = {table.name: translator.get_asset_spec(table) for table in project.tables}
    sensors = [
        _sensor_for(
            table,
            specs[table.name].key,
            translator.sensor_name(table),
            translator.source_asset_key(table),
        )
        for table in project.tables
    ]
    automated = [spec.key for spec in specs.values() if spec.automation_condition is not None]
    if not automated:
        return sensors
    return [*sensors, _automation_sensor(translator.automation_sensor_name, automated)]


def build_checks_sensor(name: str, checks: Sequence[dg.AssetCheckKey]) -> dg.SensorDefinition:
    """Every `CHECKS_INTERVAL`, running from the start: the checks a failed run planned and left
    unevaluated are run again alone, once, in a checks-only run that records nothing
    (`checks.py`)."""

    @dg.sensor(
        name=name,
        minimum_interval_seconds=int(CHECKS_INTERVAL.total_seconds()),
        default_status=dg.DefaultSensorStatus.RUNNING,
        target=dg.AssetSelection.checks(*checks),
        description="Marks skipped, in a checks-only run that loads nothing, the checks of a run "
        'that failed before evaluating them, which Dagster would otherwise show as "Execution '
        'failed". Dagster can only show a check skipped in a run that did not fail: a check '
        "result recorded without a run is passed or failed.",
    )
    def mark_checks_skipped(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        left = checks_left_by_failed_runs(context.instance, checks)
        if not left:
            return dg.SkipReason("no failed run left checks unevaluated")
        return dg.RunRequest(
            run_key=f"after failed runs {' '.join(sorted(set(left.values())))}",
            asset_selection=[],
            asset_check_keys=sorted(left, key=lambda key: key.to_user_string()),
            tags=CHECKS_ONLY_TAGS,
        )

    return mark_checks_skipped


def checks_left_by_failed_runs(
    instance: dg.DagsterInstance, checks: Sequence[dg.AssetCheckKey]
) -> dict[dg.AssetCheckKey, str]:
    """The checks whose latest execution a failed run planned and never evaluated (Dagster shows
    them "Execution failed"), with that run's id. A checks-only run that failed is not run again:
    it would fail the same way at every tick."""
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(list(checks))
    planned = {key: r.run_id for key, r in latest.items() if r.status.value == "PLANNED"}
    if not planned:
        return {}
    failed = instance.get_run_records(
        dg.RunsFilter(run_ids=list(set(planned.values())), statuses=[dg.DagsterRunStatus.FAILURE])
    )
    again = {
        r.dagster_run.run_id for r in failed if CHECKS_AFTER_FAILED_RUN not in r.dagster_run.tags
    }
    return {key: run for key, run in planned.items() if run in again}


def build_pool_guard_sensor(name: str, pools: Sequence[str]) -> dg.SensorDefinition:
    """Frees the pool slots of the tables' runs that died, running from the start: Dagster's run
    queue holds a run of a table whose slot a dead run holds, before any worker of its own could
    free it (`pool_slots`)."""

    @dg.sensor(
        name=name,
        minimum_interval_seconds=int(GUARD_INTERVAL.total_seconds()),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Frees the tables' pool slots held by runs that died (their process is gone, "
        "or they stopped saying they are alive), marking those runs failed.",
    )
    def pool_guard(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        watch = sensor_watch(context.cursor)
        freed = free_dead(context.instance, pools, "", f"the sensor {name}", watch)
        for line in freed:
            context.log.warning(line)
        return dg.SensorResult(
            skip_reason=" ".join(freed) or "no table's pool slot is held by a run that died",
            cursor=sensor_cursor(watch),
        )

    return pool_guard


def _automation_sensor(name: str, keys: list[dg.AssetKey]) -> dg.SensorDefinition:
    """Evaluates the tables' `automation:` conditions, running from the start.

    Dagster's own default automation sensor starts stopped, so without this one `automation:`
    would do nothing until someone switched that sensor on.
    """
    return dg.AutomationConditionSensorDefinition(
        name,
        target=dg.AssetSelection.assets(*keys).without_checks(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests runs of the tables whose `automation:` condition is met.",
    )


def _sensor_for(
    table: TableSpec, key: dg.AssetKey, name: str, source_key: dg.AssetKey
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=max(1, int(table.sensor.interval.total_seconds())),
        default_status=dg.DefaultSensorStatus.RUNNING
        if table.sensor.running
        else dg.DefaultSensorStatus.STOPPED,
        target=dg.AssetSelection.assets(key),
        description=(
            f"Requests a run of {table.name} when its source has rows past the stored cursor."
        ),
    )
    def source_changed(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        return evaluate(context.instance, table, key, context.cursor, name, source_key)

    return source_changed


def evaluate(
    instance: dg.DagsterInstance,
    table: TableSpec,
    key: dg.AssetKey,
    last_run_key: str | None,
    sensor_name: str | None = None,
    source_key: dg.AssetKey | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """One tick: a run request when the source has what a run would load, else why not; with
    `source_key`, and what the probe saw changed, an observation of the source asset."""
    records = read_state_records(instance, key)
    stored = records.stored_state()
    last_run = _last_run_start(instance, key, records) if _reads_files(table) else None
    last_seen = _last_observation(instance, table, source_key) if source_key else None
    probe = probe_source(
        table, stored, last_run, lambda newest: _changed(last_seen, newest, stored.cursor)
    )
    observed = []
    if source_key is not None:
        observed = _observation(table, source_key, stored, probe, last_seen)
    if probe.new is None:
        why = (
            f"nothing new in {table.source_object} for a run to load "
            f"(stored cursor {stored.cursor})"
        )
        return (
            dg.SensorResult(skip_reason=why, asset_events=observed)
            if observed
            else dg.SkipReason(why)
        )
    run_key = run_key_for(table, records, probe.new)
    failed = _failed_since(instance, sensor_name or sensor_name_of(key), records)
    if failed is not None:
        run_key += f" (again after failed run {failed})"
    if run_key == last_run_key:
        why = f"a run was already requested for {run_key}"
        return (
            dg.SensorResult(skip_reason=why, asset_events=observed)
            if observed
            else dg.SkipReason(why)
        )
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=run_key, asset_selection=[key])],
        cursor=run_key,
        asset_events=observed,
    )


def _last_observation(
    instance: dg.DagsterInstance, table: TableSpec, source_key: dg.AssetKey
) -> dict[str, Any]:
    """What the table's sensor last recorded of its source ({} before its first observation).

    Two tables reading one source table share its asset: each compares with its own."""
    record = newest_record(
        instance.fetch_observations,
        dg.AssetRecordsFilter(asset_key=source_key),
        lambda r: _values(r).get(OBSERVED_FOR) == table.name,
    )
    return _values(record) if record is not None else {}


def _values(record: dg.EventLogRecord) -> dict[str, Any]:
    observation = record.event_log_entry.asset_observation
    metadata = observation.metadata if observation is not None else {}
    return {name: value.value for name, value in metadata.items()}


def _changed(last_seen: dict[str, Any] | None, newest: str | None, lake: str | None) -> bool:
    """Whether the source's newest cursor, or the lake's, moved since the last observation."""
    if last_seen is None:
        return False
    seen = (last_seen.get(NEWEST_CURSOR), last_seen.get(LAKE_CURSOR))
    return not last_seen or seen != (newest or "", lake or "")


def _observation(
    table: TableSpec,
    source_key: dg.AssetKey,
    stored: StoredState,
    probe: Probe,
    last_seen: dict[str, Any] | None,
) -> list[dg.AssetObservation]:
    """The source asset's observation, when what the probe saw differs from the last one."""
    if probe.newest is None:
        return []
    metadata: dict[str, Any] = {OBSERVED_FOR: table.name, LAKE_CURSOR: stored.cursor or ""}
    if table.capture == "log" and probe.newest is not None:
        metadata[NEWEST_CURSOR] = probe.newest
        if probe.retained is not None:
            metadata[LOG_RETAINED_BYTES] = probe.retained
        if probe.behind is not None:
            metadata[LOG_BEHIND_BYTES] = probe.behind
        unchanged = last_seen is not None and all(
            last_seen.get(name) == value for name, value in metadata.items()
        )
    elif _reads_files(table):
        metadata[NEWEST_FILE] = probe.newest
        metadata[FILES_WAITING] = probe.waiting or 0
        unchanged = last_seen is not None and all(
            last_seen.get(name) == value for name, value in metadata.items()
        )
    else:
        if probe.waiting is None:  # the cursors are as they were last time: nothing to record
            return []
        metadata[NEWEST_CURSOR] = probe.newest
        metadata[ROWS_WAITING] = probe.waiting
        behind = seconds_behind(stored.cursor_type, stored.cursor, probe.newest)
        if behind is not None:
            metadata[BEHIND_SECONDS] = behind
            metadata[BEHIND] = readable_duration(behind)
        unchanged = False
    if unchanged:
        return []
    return [dg.AssetObservation(asset_key=source_key, metadata=metadata)]


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
