"""Whether a Dagster run is still alive, from what it recorded of itself: where its process runs
(`Worker`) and when it last said it was alive (its beat).

A run on this machine is judged by its process: gone (or its pid reused by another process) means
dead, at once. A run elsewhere can only be judged by its beat: none for `LEASE` means dead. A run
that ended, or that recorded nothing of itself (started by an older version of the package, or
by a job with another executor), is judged by its status alone.

`verdict` is pure; `process_of` and `this_worker` read this machine's /proc (Linux; elsewhere a
process is judged by its beat).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

# How often a live run says so, and how long without a word makes a run elsewhere dead: long
# enough for a busy machine's or a skewed clock's delays, short enough to free a slot in a minute.
BEAT = timedelta(seconds=10)
LEASE = timedelta(seconds=60)

Process = Literal["running", "gone", "elsewhere"]
Kind = Literal["live", "dead", "unknown"]


@dataclass(frozen=True)
class Worker:
    """Where a run's process runs: enough to tell, from the same machine, whether it still does
    (the pid namespace and boot tell a container or a reboot apart; the start time a reused pid)."""

    host: str
    boot: str
    pid_namespace: str
    pid: int
    started: str  # the process's start time, in clock ticks since boot ("" if unknown)

    def to_tag(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_tag(text: str | None) -> Worker | None:
        if not text:
            return None
        try:
            fields = json.loads(text)
            return Worker(**{**fields, "pid": int(fields["pid"])})
        except (ValueError, TypeError, KeyError):
            return None

    def same_machine(self, other: Worker) -> bool:
        return (self.host, self.boot, self.pid_namespace) == (
            other.host,
            other.boot,
            other.pid_namespace,
        ) and bool(self.boot)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


@dataclass(frozen=True)
class Holder:
    """A run that holds (or waits for) a pool's slot, as the instance and this machine see it."""

    run_id: str
    status: str  # Dagster's run status
    ended: bool  # the status is a final one
    worker: Worker | None
    beat: datetime | None
    process: Process


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    reason: str  # why, for the message naming the run


def verdict(holder: Holder, now: datetime) -> Verdict:
    """Whether `holder` is alive (`live`), surely not (`dead`), or can't be told (`unknown`)."""
    if holder.ended:
        return Verdict("dead", f"it ended ({holder.status}) without freeing its slot")
    worker = holder.worker
    if worker is None:
        return Verdict(
            "unknown",
            f"it is {holder.status} and recorded nothing of its process (a run started by an "
            "older version of incremental_assets, or by a job with another executor)",
        )
    if holder.process == "gone":
        return Verdict("dead", f"its process ({worker.describe()}) is gone")
    if holder.process == "running":
        return Verdict("live", f"it runs as {worker.describe()}")
    if holder.beat is None or now - holder.beat > LEASE:
        since = "never" if holder.beat is None else f"not since {holder.beat.isoformat()}"
        return Verdict("dead", f"it runs as {worker.describe()} and said it was alive {since}")
    return Verdict("live", f"it runs as {worker.describe()}, alive at {holder.beat.isoformat()}")


def this_worker() -> Worker:
    pid = os.getpid()
    return Worker(
        host=socket.gethostname(),
        boot=_read("/proc/sys/kernel/random/boot_id"),
        pid_namespace=_link("/proc/self/ns/pid"),
        pid=pid,
        started=_start_time(pid),
    )


def process_of(worker: Worker, here: Worker) -> Process:
    """What this machine sees of `worker`'s process."""
    if not here.same_machine(worker):
        return "elsewhere"
    stat = _read(f"/proc/{worker.pid}/stat")
    if not stat:
        return "gone"
    state, started = _stat_fields(stat)
    if state in ("Z", "X") or (worker.started and started != worker.started):
        return "gone"
    return "running"


def _start_time(pid: int) -> str:
    stat = _read(f"/proc/{pid}/stat")
    return _stat_fields(stat)[1] if stat else ""


def _stat_fields(stat: str) -> tuple[str, str]:
    """The state and the start time of a /proc/<pid>/stat line (the command, in parentheses,
    may hold spaces: fields are counted after its closing one)."""
    fields = stat.rpartition(")")[2].split()
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""
