"""What a run's progress line says, from what Spark reported about the run's stages: pure, so
the line is the same whichever session (local, cluster, Spark Connect) reported them.

    orders: progress: reading the source and staging the rows for 45 s; Spark stage 7 (save) 12/40
    tasks done, 2 running, about 1 min left; so far 120,000 rows (3.4 MiB) read, 118,000 rows
    (2.1 MiB) written
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Every progress line reads "<table>: progress: ...": what a reader (or a test) looks for.
MARK = "progress:"

# The run's phases, as its progress lines name them (`progress.phase`).
PLANNING = "planning (the lake's and the source's facts, the window)"
STAGING = "reading the source and staging the rows"
COMMITTING = "committing"
MAINTAINING = "maintaining the lake"


@dataclass(frozen=True, kw_only=True)
class StageTally:
    """One Spark stage of the run, as last reported. Rows and bytes written are None where
    the session doesn't report them (Spark Connect reports bytes read only)."""

    stage_id: int
    tasks: int
    tasks_done: int
    done: bool
    name: str | None = None
    rows_read: int | None = None
    bytes_read: int = 0
    rows_written: int | None = None
    bytes_written: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """The run's stages so far, and how many tasks are running now."""

    stages: tuple[StageTally, ...] = ()
    running_tasks: int = 0


@dataclass(frozen=True)
class FirstSeen:
    """When the reporter first saw a stage running, and its finished tasks then."""

    at: float
    tasks_done: int


def seen_first(
    snapshot: Snapshot, seen: Mapping[int, FirstSeen], now: float
) -> dict[int, FirstSeen]:
    """`seen`, with the running stages it didn't know yet, seen now."""
    new = {s.stage_id: FirstSeen(now, s.tasks_done) for s in snapshot.stages if not s.done}
    return {**new, **seen}


def seconds_left(stage: StageTally, first: FirstSeen | None, now: float) -> float | None:
    """The stage's remaining tasks at the pace its tasks finished since it was first seen; None
    until one has."""
    finished = stage.tasks_done - first.tasks_done if first else 0
    if first is None or finished <= 0 or stage.done:
        return None
    return (stage.tasks - stage.tasks_done) * (now - first.at) / finished


def progress_line(
    table: str,
    phase: str,
    phase_seconds: float,
    snapshot: Snapshot,
    seen: Mapping[int, FirstSeen],
    now: float,
) -> str:
    """One line: the phase and how long it has run, the running stages (tasks done of total,
    tasks running, time left when their pace is known) and what the run read and wrote so far."""
    parts = [
        f"{table}: {MARK} {phase} for {duration(phase_seconds)}",
        _running(snapshot, seen, now),
    ]
    volume = _volume(snapshot.stages)
    if volume:
        parts.append(f"so far {volume}")
    return "; ".join(parts)


def _running(snapshot: Snapshot, seen: Mapping[int, FirstSeen], now: float) -> str:
    running = [s for s in snapshot.stages if not s.done]
    if not running:
        return "no Spark stage running"
    stages = ", ".join(
        f"Spark stage {s.stage_id}{f' ({s.name})' if s.name else ''} "
        f"{s.tasks_done}/{s.tasks} tasks done"
        for s in running
    )
    text = f"{stages}, {snapshot.running_tasks} running"
    lefts = [seconds_left(s, seen.get(s.stage_id), now) for s in running]
    known = [left for left in lefts if left is not None]
    if known and len(known) == len(lefts):
        text += f", about {duration(max(known))} left"
    return text


def _volume(stages: Sequence[StageTally]) -> str:
    """What the stages read and wrote: rows and bytes, each where reported and not nothing."""
    read = _amount(_total([s.rows_read for s in stages]), sum(s.bytes_read for s in stages) or None)
    written = _amount(
        _total([s.rows_written for s in stages]), _total([s.bytes_written for s in stages])
    )
    said = [f"{read} read" if read else "", f"{written} written" if written else ""]
    return ", ".join(part for part in said if part)


def _total(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return (sum(known) or None) if known else None


def _amount(rows: int | None, size: int | None) -> str:
    if rows is None:
        return size_text(size) if size else ""
    return f"{rows:,} rows ({size_text(size)})" if size else f"{rows:,} rows"


def size_text(size: int) -> str:
    """Bytes in the largest binary unit that keeps a number of at least 1: 3.4 MiB."""
    value, unit = float(size), "B"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"


def duration(seconds: float) -> str:
    """45 s, 65 min, 1 h 40 min."""
    whole = round(seconds)
    if whole < 90:
        return f"{whole} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
