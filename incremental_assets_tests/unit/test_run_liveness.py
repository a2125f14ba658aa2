"""Whether a run holding a pool slot is alive: the verdict, from what it recorded of itself, what
this machine sees of its process, and how long this judge has seen its beat unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from incremental_assets import run_liveness
from incremental_assets.run_liveness import (
    LEASE,
    BeatWatch,
    Holder,
    Worker,
    process_of,
    this_worker,
    verdict,
)

WORKER = Worker("host-a", "boot-a", "pid:[1]", 4242, "991")
BEAT = "2026-11-27T12:00:00+00:00"


def _holder(**changes: object) -> Holder:
    base = Holder("run-1", "STARTED", False, WORKER, BEAT, "running", True)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("holder", "unchanged", "kind", "reason"),
    [
        (_holder(), None, "live", "it runs as pid 4242 on host-a"),
        (_holder(process="gone"), None, "dead", "its process (pid 4242 on host-a) is gone"),
        (_holder(status="FAILURE", ended=True), None, "dead", "it ended (FAILURE)"),
        (_holder(status="deleted", ended=True, worker=None), None, "dead", "it ended (deleted)"),
        (_holder(worker=None, process="elsewhere"), None, "unknown", "recorded nothing"),
        # Elsewhere: judged by how long this judge has seen its beat unchanged, never by the
        # beat's own time (the other machine's clock).
        (_holder(process="elsewhere"), None, "live", "its beat moves"),
        (_holder(process="elsewhere"), LEASE - timedelta(seconds=1), "live", "its beat moves"),
        (_holder(process="elsewhere"), LEASE, "dead", "its beat hasn't moved for 60 s"),
        (_holder(process="elsewhere", beat=None), None, "live", "its beat moves"),
        # Seen running on this machine, a run is alive whatever its beat does.
        (_holder(), timedelta(days=1), "live", "it runs as pid 4242 on host-a"),
    ],
)
def test_a_holder_is_judged_by_its_process_here_else_by_its_beat_as_watched(
    holder: Holder, unchanged: timedelta | None, kind: str, reason: str
) -> None:
    judged = verdict(holder, unchanged)
    assert (judged.kind, reason in judged.reason) == (kind, True), judged.reason


def test_a_beat_is_watched_by_the_judges_clock_and_a_change_starts_it_again() -> None:
    watch = BeatWatch()
    assert watch.unchanged_for("r", "b1", 100.0) is None  # first seen
    assert watch.unchanged_for("r", "b1", 130.0) == timedelta(seconds=30)
    assert watch.unchanged_for("r", "b2", 170.0) is None  # it moved: alive, watched again
    assert watch.unchanged_for("r", "b2", 231.0) == timedelta(seconds=61)
    assert watch.unchanged_for("r", None, 300.0) is None
    watch.forget_except({"other"})
    assert watch.seen == {}


@pytest.mark.parametrize(
    "tag",
    [
        None,
        "not json",
        '{"host": "h"}',
        '{"host":"h","boot":"b","pid_namespace":"n","pid":Infinity,"started":"1"}',
        '{"host":"h","boot":"b","pid_namespace":"n","pid":-1,"started":"1"}',
        '{"host":1,"boot":"b","pid_namespace":"n","pid":3,"started":"1"}',
    ],
)
def test_a_tag_this_package_did_not_write_is_no_worker(tag: str | None) -> None:
    """The review's finding: `"pid": Infinity` raised, and every waiting run failed with it."""
    assert Worker.from_tag(tag) is None


def test_a_worker_round_trips_through_its_tag() -> None:
    assert Worker.from_tag(WORKER.to_tag()) == WORKER


def test_this_machine_sees_a_process_running_gone_or_its_pid_reused() -> None:
    here = this_worker()
    assert here.pid == os.getpid()
    assert process_of(here, here) == "running"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_of(replace(here, pid=child.pid, started=""), here) == "gone"
    # The same pid, started at another time: another process now.
    assert process_of(replace(here, started=str(int(here.started) + 1)), here) == "gone"
    assert process_of(replace(here, host="elsewhere"), here) == "elsewhere"
    assert process_of(replace(here, pid_namespace="pid:[0]"), here) == "elsewhere"
    assert process_of(replace(here, boot="another boot"), here) == "elsewhere"


def test_a_process_proc_hides_is_running_if_it_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's finding: under `hidepid` another user's /proc/<pid> can't be read, and its
    live run was judged gone (its slot given to a second run)."""
    here = this_worker()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    hidden = run_liveness._read

    def hiding(path: Path) -> str | None:
        return None if path.name == "stat" else hidden(path)

    monkeypatch.setattr(run_liveness, "_read", hiding)
    assert process_of(here, here) == "running"
    assert process_of(replace(here, pid=child.pid), here) == "gone"
