from __future__ import annotations

import pytest

from incremental_assets.writers.base import WritePlan
from incremental_assets.writers.lake import BucketScheme, DataFile, LakeTable, parse_bucket
from incremental_assets.writers.merge import choose_scheme


@pytest.mark.parametrize(
    ("scheme", "index", "group"),
    [
        (BucketScheme("hash", 16), 3, "h00003of00016"),
        (BucketScheme("range", 1_000_000), 12, "rp000000000012w1000000"),
        (BucketScheme("range", 500), -2, "rn000000000002w500"),
    ],
)
def test_bucket_groups_round_trip_through_file_names(
    scheme: BucketScheme, index: int, group: str
) -> None:
    assert scheme.group(index) == group
    assert parse_bucket(group) == (scheme, index)
    assert DataFile(f"part-{group}-20260101T000000abcd-00000.parquet", group).bucket == (
        scheme,
        index,
    )


def _plan() -> WritePlan:
    return WritePlan(
        LakeTable("/tmp/x"), "t", 1, True, ("id",), "c", None, 16, 1_000_000, "zstd", 10
    )


@pytest.mark.parametrize(
    ("rows", "low", "high", "expected"),
    [
        (
            10_000_000,
            1,
            10_000_000,
            BucketScheme("range", 1_000_000),
        ),  # dense keys: ~1M rows a range
        (100, 1, 100, BucketScheme("range", 1_000_000)),  # a small first load: still wide ranges
        # sparse keys: ranges widen so each still holds ~1M rows
        (10_000_000, 1, 10**12, BucketScheme("range", 100_000_000_000)),
        (10, None, None, BucketScheme("hash", 16)),  # no integer key
    ],
)
def test_the_scheme_follows_the_key(
    rows: int, low: int | None, high: int | None, expected: BucketScheme
) -> None:
    assert choose_scheme(_plan(), rows, low, high) == expected
