"""The lag between the lake and its source, in seconds and as a person reads it."""

from __future__ import annotations

import pytest

from incremental_assets.cursor import CursorType
from incremental_assets.lag import readable_duration, seconds_behind


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (0.4, "0 s"),
        (0.6, "1 s"),
        (45, "45 s"),
        (59.6, "1 min"),
        (90, "1 min 30 s"),
        (3_600, "1 h"),
        (3_630, "1 h"),  # the unit below the largest is 0 min: left out, seconds are not shown
        (7_500, "2 h 5 min"),
        (86_400 + 59, "1 d"),
        (2 * 86_400 + 3 * 3_600, "2 d 3 h"),
        (365 * 86_400, "1 y"),
        (59_800_541.027, "1 y 327 d"),
        (-7_500, "-2 h 5 min"),
        (-0.2, "0 s"),
    ],
)
def test_a_lag_reads_in_its_largest_unit_and_the_next(seconds: float, shown: str) -> None:
    assert readable_duration(seconds) == shown


@pytest.mark.parametrize(
    ("kind", "lake", "newest", "behind"),
    [
        (CursorType.DATE, "2025-01-01", "2025-01-03", 172_800.0),
        (
            CursorType.TIMESTAMPTZ,
            "2025-01-01T00:00:00.000000+00:00",
            "2025-01-01T02:05:00.250000+00:00",
            7_500.25,
        ),
        (CursorType.TIMESTAMP, "2025-01-01T00:00:00.000000", "2025-01-01T00:00:01.000000", 1.0),
        (CursorType.INTEGER, "10", "30", None),  # not a time
        (CursorType.DATE, None, "2025-01-03", None),  # nothing loaded yet
    ],
)
def test_seconds_behind_measures_time_cursors_only(
    kind: CursorType, lake: str | None, newest: str, behind: float | None
) -> None:
    assert seconds_behind(kind, lake, newest) == behind
