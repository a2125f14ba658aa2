"""Whether a Dagster run is still alive, from what it recorded of itself: where its process runs
(`Worker`) and a beat it renews while it lives.

A run on this machine is judged by its process: gone (or its pid reused by another process) means
dead, at once. A run elsewhere can only be judged by its beat, and only by watching it with this
machine's own clock (the beat's time is the other machine's, whose clock may be off): a beat seen
unchanged for `LEASE` means dead. A run that ended is dead; one that recorded nothing of itself
(started by an older version of the package, or by a job with another executor), or whose record
can't be read, can't be judged.

`verdict` is pure; `BeatWatch` keeps what a judge has seen of beats; `process_of` and
`this_worker` read this machine's /proc (Linux; elsewhere a process is judged by its beat).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal

# How often a live run renews its beat, and how long a beat seen unchanged makes a run elsewhere
# dead: long enough for a busy machine's delays, short enough to free a slot in about a minute.
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
        """The worker a tag records; None if it records none, or nothing this package wrote."""
        if not text:
            return None
        try:
            fields = json.loads(text)
            worker = Worker(**{**fields, "pid": int(fields["pid"])})
        except (ValueError, TypeError, KeyError, OverflowError):
            return None
        texts = (worker.host, worker.boot, worker.pid_namespace, worker.started)
        return worker if all(isinstance(t, str) for t in texts) and worker.pid > 0 else None

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
    """A run that holds a pool's slot, or is queued for one, as the instance and this machine
    see it."""

    run_id: str
    status: str  # Dagster's run status ("deleted": the instance has no such run)
    ended: bool  # the status is a final one
    worker: Worker | None
    beat: str | None  # the beat as the run last wrote it (its own clock's time)
    process: Process
    holds: bool  # it holds a slot (else it is only queued for one)


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    reason: str  # why, for the message naming the run


def verdict(holder: Holder, beat_unchanged_for: timedelta | None) -> Verdict:
    """Whether `holder` is alive (`live`), surely not (`dead`), or can't be told (`unknown`).
    `beat_unchanged_for`: how long this judge has seen the holder's beat as it is now (None:
    not watched yet)."""
    if holder.ended:
        return Verdict("dead", f"it ended ({holder.status})")
    worker = holder.worker
    if worker is None:
        return Verdict(
            "unknown",
            f"it is {holder.status} and recorded nothing this package can read of its process "
            "(a run started by an older version of incremental_assets, or by a job with "
            "another executor)",
        )
    if holder.process == "gone":
        return Verdict("dead", f"its process ({worker.describe()}) is gone")
    if holder.process == "running":
        return Verdict("live", f"it runs as {worker.describe()}")
    if beat_unchanged_for is not None and beat_unchanged_for >= LEASE:
        seconds = int(beat_unchanged_for.total_seconds())
        return Verdict(
            "dead",
            f"it runs as {worker.describe()}, and its beat hasn't moved for {seconds} s",
        )
    return Verdict("live", f"it runs as {worker.describe()}, and its beat moves")


@dataclass
class BeatWatch:
    """The beats a judge has seen, each with when (by the judge's own monotonic clock) it first
    saw it as it is now."""

    seen: dict[str, tuple[str, float]] = field(default_factory=dict)

    def unchanged_for(self, run_id: str, beat: str | None, now: float) -> timedelta | None:
        """How long `run_id`'s beat has been `beat`, as far as this watch knows (None: just
        seen, or changed since)."""
        if beat is None:
            return None
        earlier = self.seen.get(run_id)
        if earlier is None or earlier[0] != beat:
            self.seen[run_id] = (beat, now)
            return None
        return timedelta(seconds=now - earlier[1])

    def forget_except(self, run_ids: set[str]) -> None:
        self.seen = {r: s for r, s in self.seen.items() if r in run_ids}


def this_worker() -> Worker:
    pid = os.getpid()
    return Worker(
        host=socket.gethostname(),
        boot=_read(Path("/proc/sys/kernel/random/boot_id")) or "",
        pid_namespace=_link("/proc/self/ns/pid"),
        pid=pid,
        started=_start_time(pid) or "",
    )


def process_of(worker: Worker, here: Worker) -> Process:
    """What this machine sees of `worker`'s process. A process /proc doesn't show (another
    user's, under `hidepid`) is running if signal 0 says it exists."""
    if not here.same_machine(worker):
        return "elsewhere"
    stat = _read(Path(f"/proc/{worker.pid}/stat"))
    if stat is None:
        return "running" if _exists(worker.pid) else "gone"
    state, started = _stat_fields(stat)
    if state in ("Z", "X") or (worker.started and started != worker.started):
        return "gone"
    return "running"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def _start_time(pid: int) -> str | None:
    stat = _read(Path(f"/proc/{pid}/stat"))
    return _stat_fields(stat)[1] if stat else None


def _stat_fields(stat: str) -> tuple[str, str]:
    """The state and the start time of a /proc/<pid>/stat line (the command, in parentheses,
    may hold spaces: fields are counted after its closing one)."""
    fields = stat.rpartition(")")[2].split()
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""
