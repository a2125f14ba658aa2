"""The words of a run's progress line, from the stages Spark reported."""

from __future__ import annotations

import pytest

from incremental_assets.progress_lines import (
    COMMITTING,
    STAGING,
    FirstSeen,
    Snapshot,
    StageTally,
    duration,
    progress_line,
    seconds_left,
    seen_first,
    size_text,
)

LOCAL_DONE = StageTally(
    stage_id=3,
    tasks=4,
    tasks_done=4,
    done=True,
    name="parquet",
    rows_read=120_000,
    bytes_read=0,
    rows_written=118_000,
    bytes_written=3 * 1024 * 1024,
)
LOCAL_RUNNING = StageTally(
    stage_id=4, tasks=40, tasks_done=12, done=False, name="save", rows_read=5_000, rows_written=0
)
CONNECT_RUNNING = StageTally(stage_id=9, tasks=10, tasks_done=4, done=False, bytes_read=2048)


@pytest.mark.parametrize(
    ("phase", "snapshot", "seen", "line"),
    [
        (
            STAGING,
            Snapshot((LOCAL_DONE, LOCAL_RUNNING), running_tasks=2),
            {4: FirstSeen(at=70.0, tasks_done=2)},
            "orders: progress: reading the source and staging the rows for 45 s; Spark stage 4 "
            "(save) 12/40 tasks done, 2 running, about 84 s left; so far 125,000 rows read, "
            "118,000 rows (3.0 MiB) written",
        ),
        (
            STAGING,
            Snapshot((CONNECT_RUNNING,), running_tasks=3),
            {},
            "orders: progress: reading the source and staging the rows for 45 s; Spark stage 9 "
            "4/10 tasks done, 3 running; so far 2.0 KiB read",
        ),
        (
            COMMITTING,
            Snapshot((LOCAL_DONE,)),
            {},
            "orders: progress: committing for 45 s; no Spark stage running; so far 120,000 rows "
            "read, 118,000 rows (3.0 MiB) written",
        ),
        (
            COMMITTING,
            Snapshot(),
            {},
            "orders: progress: committing for 45 s; no Spark stage running",
        ),
    ],
)
def test_a_line_says_the_phase_the_running_stages_and_what_was_read_and_written(
    phase: str, snapshot: Snapshot, seen: dict[int, FirstSeen], line: str
) -> None:
    assert progress_line("orders", phase, 45.0, snapshot, seen, now=100.0) == line


@pytest.mark.parametrize(
    ("first", "left"),
    [
        (FirstSeen(at=70.0, tasks_done=2), 84.0),  # 10 tasks in 30 s; 28 to go
        (FirstSeen(at=70.0, tasks_done=12), None),  # none finished since: no pace yet
        (None, None),
    ],
)
def test_the_time_left_is_the_remaining_tasks_at_the_pace_seen(
    first: FirstSeen | None, left: float | None
) -> None:
    assert seconds_left(LOCAL_RUNNING, first, now=100.0) == left


def test_a_stage_is_seen_first_once_while_it_runs() -> None:
    seen = seen_first(Snapshot((LOCAL_DONE, LOCAL_RUNNING)), {}, now=10.0)
    again = seen_first(Snapshot((LOCAL_RUNNING,)), seen, now=20.0)
    assert seen == again == {4: FirstSeen(at=10.0, tasks_done=12)}


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (3_500_000, "3.3 MiB"), (2**41, "2.0 TiB")],
)
def test_sizes_are_in_binary_units(size: int, text: str) -> None:
    assert size_text(size) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(4.4, "4 s"), (89, "89 s"), (150, "2 min"), (3900, "65 min"), (6000, "1 h 40 min")],
)
def test_durations_are_in_seconds_minutes_or_hours(seconds: float, text: str) -> None:
    assert duration(seconds) == text
