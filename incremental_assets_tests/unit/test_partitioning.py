from __future__ import annotations

import pytest

from incremental_assets.sources.base import partition_count, split_ranges


@pytest.mark.parametrize(
    ("low", "high", "parts", "expected"),
    [
        (1, 100, 1, [(None, None)]),
        (1, 100, 4, [(None, 26), (26, 51), (51, 76), (76, None)]),
        (5, 6, 8, [(None, 6), (6, None)]),  # never more parts than values
        (-10, 9, 2, [(None, 0), (0, None)]),
    ],
)
def test_ranges_cover_every_value_with_open_ends(
    low: int, high: int, parts: int, expected: list[tuple[int | None, int | None]]
) -> None:
    ranges = split_ranges(low, high, parts)
    assert ranges == expected
    for value in range(low - 5, high + 5):
        owners = [
            r for r in ranges if (r[0] is None or value >= r[0]) and (r[1] is None or value < r[1])
        ]
        assert len(owners) == 1


@pytest.mark.parametrize(
    ("rows", "expected"), [(0, 1), (1, 1), (250_000, 1), (250_001, 2), (10_000_000, 8)]
)
def test_partition_count_follows_the_delta_up_to_a_cap(rows: int, expected: int) -> None:
    assert partition_count(rows, 250_000, 8) == expected
