"""Whether a run holding a pool slot is alive: the verdict, from what it recorded of itself and
what this machine sees of its process."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from incremental_assets.run_liveness import (
    LEASE,
    Holder,
    Worker,
    process_of,
    this_worker,
    verdict,
)

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)
WORKER = Worker("host-a", "boot-a", "pid:[1]", 4242, "991")


def _holder(**changes: object) -> Holder:
    base = Holder("run-1", "STARTED", False, WORKER, NOW, "running")
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("holder", "kind", "reason"),
    [
        (_holder(), "live", "it runs as pid 4242 on host-a"),
        (_holder(process="gone"), "dead", "its process (pid 4242 on host-a) is gone"),
        (_holder(status="FAILURE", ended=True), "dead", "it ended (FAILURE) without freeing"),
        (_holder(status="deleted", ended=True, worker=None), "dead", "it ended (deleted)"),
        (_holder(worker=None, process="elsewhere"), "unknown", "recorded nothing of its process"),
        (_holder(process="elsewhere"), "live", "alive at 2026-11-27T12:00:00+00:00"),
        (
            _holder(process="elsewhere", beat=NOW - LEASE),
            "live",
            "alive at 2026-11-27T11:59:00+00:00",
        ),
        (
            _holder(process="elsewhere", beat=NOW - LEASE - timedelta(seconds=1)),
            "dead",
            "said it was alive not since 2026-11-27T11:58:59+00:00",
        ),
        (_holder(process="elsewhere", beat=None), "dead", "said it was alive never"),
        # Seen running on this machine, a run is alive whatever its beat says.
        (_holder(beat=NOW - timedelta(days=1)), "live", "it runs as pid 4242 on host-a"),
    ],
)
def test_a_holder_is_judged_by_its_process_here_else_by_its_beat(
    holder: Holder, kind: str, reason: str
) -> None:
    judged = verdict(holder, NOW)
    assert (judged.kind, reason in judged.reason) == (kind, True), judged.reason


def test_a_worker_round_trips_through_its_tag_and_a_bad_tag_is_no_worker() -> None:
    assert Worker.from_tag(WORKER.to_tag()) == WORKER
    assert Worker.from_tag(None) is None
    assert Worker.from_tag("not json") is None
    assert Worker.from_tag('{"host": "h"}') is None


def test_this_machine_sees_a_process_running_gone_or_its_pid_reused() -> None:
    here = this_worker()
    assert process_of(here, here) == "running"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_of(replace(here, pid=child.pid, started=""), here) == "gone"
    # The same pid, started at another time: another process now.
    assert process_of(replace(here, started=str(int(here.started) + 1)), here) == "gone"
    assert process_of(replace(here, host="elsewhere"), here) == "elsewhere"
    assert process_of(replace(here, pid_namespace="pid:[0]"), here) == "elsewhere"
    assert process_of(replace(here, boot="another boot"), here) == "elsewhere"
    assert here.pid == os.getpid()
