"""A run that dies holding its table's pool slot (the shipped dagster.yaml gives each table's pool
one) never leaves the table waiting: the next run frees the slot of a run it can tell is dead,
waits for a live one, and fails within `UNKNOWN_WAIT` naming one it can't judge and the command
that frees it; under the daemon, the pool guard sensor frees it. No Spark: the holder is a real
`dagster asset materialize` of an asset in the pool (`support/pool_holder.py`); the Spark runs
killed at each pause point are in test_crash_safety.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from incremental_assets import pool_slots
from incremental_assets.errors import ConcurrentRunError
from incremental_assets.pool_slots import BEAT_TAG, WORKER_TAG, free_dead, guarding, judge
from incremental_assets.run_liveness import BeatWatch, Worker
from incremental_assets.sensors import build_pool_guard_sensor
from incremental_assets_tests.support import pool_holder
from incremental_assets_tests.support.cli import DAGSTER
from incremental_assets_tests.support.postgres import wait_for
from incremental_assets_tests.support.project import pool_holders, shipped_home

POOL = pool_holder.POOL
INCREMENTAL_ASSETS = str(Path(DAGSTER).with_name("incremental-assets"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return shipped_home(tmp_path / "home")


@pytest.fixture
def instance(home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


def _start(home: Path, *, executor: str = "ours") -> tuple[subprocess.Popen[str], Path]:
    marker = home.parent / f"holding-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "POOL_HOLDER_MARKER": str(marker),
        "POOL_HOLDER_EXECUTOR": executor,
    }
    process = subprocess.Popen(
        [DAGSTER, "asset", "materialize", "-f", pool_holder.__file__, "--select", "holder"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, marker


def _holding(
    home: Path, instance: dg.DagsterInstance, *, executor: str = "ours"
) -> tuple[subprocess.Popen[str], str]:
    """A run that holds the pool's slot: the process, and its run id."""
    process, marker = _start(home, executor=executor)
    wait_for(lambda: marker.exists() or process.poll() is not None, timeout=120)
    assert marker.exists(), process.communicate()[1][-3000:]
    (run_id,) = pool_holders(instance, "orders")
    return process, run_id


def _kill(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)


def _free_slots(home: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    """`incremental-assets free-slots RUN_ID`, as the on-call runs it."""
    return subprocess.run(
        [INCREMENTAL_ASSETS, "free-slots", run_id],
        env={**os.environ, "DAGSTER_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _status(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRunStatus:
    run = instance.get_run_by_id(run_id)
    assert run is not None
    return run.status


def _guard(instance: dg.DagsterInstance) -> list[str]:
    """What a new run's guard says before its steps claim the pool (and after, at once)."""
    said: list[str] = []
    with guarding(instance, str(uuid.uuid4()), {POOL}, said.append):
        pass
    return said


def test_a_live_holder_is_waited_for_and_a_dead_one_marked_failed_and_freed(
    home: Path, instance: dg.DagsterInstance
) -> None:
    process, held_by = _holding(home, instance)
    try:
        said = _guard(instance)
        assert pool_holders(instance, "orders") == {held_by}
        assert said == [
            f"waiting for run {held_by}, which holds the pool {POOL}: it runs as pid "
            f"{process.pid} on "
            f"{Worker.from_tag(instance.get_run_by_id(held_by).tags[WORKER_TAG]).host}."  # type: ignore[union-attr]
        ]
    finally:
        _kill(process)

    said = _guard(instance)

    assert pool_holders(instance, "orders") == set()
    assert _status(instance, held_by) == dg.DagsterRunStatus.FAILURE
    assert said == [
        f"run {held_by} held the pool {POOL}, but its process (pid {process.pid} on "
        f"{os.uname().nodename}) is gone: it was marked failed and its slots freed."
    ]


def test_a_run_waiting_for_the_slot_takes_it_once_its_holder_dies(
    home: Path, instance: dg.DagsterInstance
) -> None:
    first, held_by = _holding(home, instance)
    second, marker = _start(home)
    try:
        wait_for(
            lambda: len(instance.event_log_storage.get_concurrency_info(POOL).pending_steps) == 2,
            120,
        )
        assert not marker.exists()  # blocked by the live first run
        _kill(first)
        # The second run's guard sees its holder die (a beat later), frees the slot, and the
        # second run's step claims it.
        wait_for(lambda: marker.exists() or second.poll() is not None, timeout=60)
        assert marker.exists(), second.communicate()[1][-3000:]
        assert _status(instance, held_by) == dg.DagsterRunStatus.FAILURE
    finally:
        _kill(second)
        if first.poll() is None:
            _kill(first)


def test_a_holder_that_recorded_nothing_fails_the_run_naming_it_and_the_command_that_frees_it(
    home: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    process, held_by = _holding(home, instance, executor="dagster")
    _kill(process)
    monkeypatch.setattr(pool_slots, "UNKNOWN_WAIT", timedelta(seconds=1))

    with pytest.raises(ConcurrentRunError) as refused:
        _guard(instance)

    message = str(refused.value)
    assert f"run {held_by} ({POOL})" in message
    assert "recorded nothing this package can read of its process" in message
    assert f"`incremental-assets free-slots {held_by}`" in message
    assert pool_holders(instance, "orders") == {held_by}

    freed = _free_slots(home, held_by)

    assert freed.returncode == 0, freed.stderr
    assert f"run {held_by} held the pool {POOL}" in freed.stdout
    assert pool_holders(instance, "orders") == set()
    assert _status(instance, held_by) == dg.DagsterRunStatus.FAILURE


def test_free_slots_refuses_a_run_seen_alive(home: Path, instance: dg.DagsterInstance) -> None:
    process, held_by = _holding(home, instance)
    try:
        refused = _free_slots(home, held_by)
        assert refused.returncode == 1
        assert f"run {held_by} is alive" in refused.stderr and "Traceback" not in refused.stderr
        assert pool_holders(instance, "orders") == {held_by}
    finally:
        _kill(process)


def test_a_holder_on_another_machine_is_dead_once_its_beat_stops_moving_whatever_its_clock(
    home: Path, instance: dg.DagsterInstance
) -> None:
    """Its beat is watched with the judge's own clock: a beat stamped 90 s in the past by a
    machine whose clock is behind is alive while it moves (the review's finding: it was judged
    dead on sight), and a beat that stops moving for a minute is dead."""
    process, held_by = _holding(home, instance)
    _kill(process)
    run = instance.get_run_by_id(held_by)
    assert run is not None
    worker = Worker.from_tag(run.tags[WORKER_TAG])
    assert worker is not None
    elsewhere = Worker("another-host", "another-boot", worker.pid_namespace, worker.pid, "1")
    behind = (datetime.now(UTC) - timedelta(seconds=90)).isoformat()  # a clock 90 s behind
    instance.add_run_tags(held_by, {WORKER_TAG: elsewhere.to_tag(), BEAT_TAG: behind})
    watch = BeatWatch()

    assert [j.verdict.kind for j in judge(instance, {POOL}, "judge", watch)] == ["live"]
    moved = (datetime.now(UTC) - timedelta(seconds=80)).isoformat()
    instance.add_run_tags(held_by, {BEAT_TAG: moved})
    later = {held_by: (moved, time.monotonic() - 30)}  # seen 30 s ago, unchanged since
    assert [j.verdict.kind for j in judge(instance, {POOL}, "judge", BeatWatch(later))] == ["live"]
    assert pool_holders(instance, "orders") == {held_by}

    silent = BeatWatch({held_by: (moved, time.monotonic() - 61)})  # unchanged for 61 s
    said = free_dead(instance, {POOL}, "judge", "a test", silent)

    assert said == [
        f"run {held_by} held the pool {POOL}, but it runs as pid {worker.pid} on another-host, "
        "and its beat hasn't moved for 61 s: it was marked failed and its slots freed."
    ]
    assert pool_holders(instance, "orders") == set()


def test_a_queued_run_that_recorded_nothing_never_fails_the_next(
    home: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's finding: behind a live holder, a run of another executor only queued for
    the slot (it holds nothing) failed the next run after a minute, which named it as holding
    the pool and offered to free a live run's slots."""
    holding, held_by = _holding(home, instance)
    queued, _ = _start(home, executor="dagster")
    try:
        wait_for(
            lambda: len(instance.event_log_storage.get_concurrency_info(POOL).pending_steps) == 2,
            120,
        )
        monkeypatch.setattr(pool_slots, "UNKNOWN_WAIT", timedelta(seconds=1))
        said = _guard(instance)
        assert len(said) == 1 and said[0].startswith(f"waiting for run {held_by}, which holds")
    finally:
        _kill(queued)
        _kill(holding)


def test_free_slots_says_plainly_when_there_is_nothing_to_free(
    home: Path, instance: dg.DagsterInstance
) -> None:
    """The review's finding: a mistyped run id, or a run that ended holding nothing, got "it was
    marked failed and its slots freed"."""
    process, held_by = _holding(home, instance)
    _kill(process)
    assert _free_slots(home, held_by).returncode == 0  # its slots freed: it holds none now

    again = _free_slots(home, held_by)
    missing = _free_slots(home, "no-such-run")

    assert again.returncode == 0
    assert (
        again.stdout.strip()
        == f"run {held_by} (FAILURE) holds no pool slot and is queued for none."
    )
    assert missing.returncode == 1 and "there is no run no-such-run" in missing.stderr


def test_under_the_daemon_the_pool_guard_sensor_frees_a_dead_runs_slot(
    home: Path, instance: dg.DagsterInstance
) -> None:
    """Dagster's run queue holds a run whose pool is full before it has a worker of its own."""
    process, held_by = _holding(home, instance)
    sensor = build_pool_guard_sensor("pool_guard", [POOL])
    with dg.build_sensor_context(instance=instance) as context:
        alive = sensor(context)
    assert isinstance(alive, dg.SensorResult) and alive.skip_reason is not None
    assert "no table's pool slot" in str(alive.skip_reason.skip_message)
    _kill(process)

    with dg.build_sensor_context(instance=instance, cursor=alive.cursor) as context:
        freed = sensor(context)

    assert isinstance(freed, dg.SensorResult) and freed.skip_reason is not None
    assert f"run {held_by} held the pool {POOL}" in str(freed.skip_reason.skip_message)
    assert pool_holders(instance, "orders") == set()
    assert _status(instance, held_by) == dg.DagsterRunStatus.FAILURE
