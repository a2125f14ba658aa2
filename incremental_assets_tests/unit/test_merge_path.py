"""The plain Parquet merge's path, a pure choice from the facts and `lake.merge_tuning`: every
branch of it, table-driven, with no Spark and no module global to set."""

from __future__ import annotations

import pytest

from incremental_assets.config import MergeTuning
from incremental_assets.results import MergeStrategy
from incremental_assets.writers.merge_path import choose_merge_path, touches_most

TUNING = MergeTuning(patch_rows=1_000, patch_buckets=3, patch_min_bytes=100, most_buckets=0.75)
EIGHT = set(range(8))


@pytest.mark.parametrize(
    ("touched", "every", "rows", "size", "path"),
    [
        ({1}, False, 10, 500, "patch buckets"),  # a small delta into large buckets
        ({1}, False, 10, 99, "rank buckets"),  # the buckets too small for a job each
        ({1}, False, 1_001, 500, "rank buckets"),  # too many rows to patch
        ({1, 2, 3, 4}, False, 10, 500, "rank buckets"),  # too many buckets to patch
        (set(range(6)), False, 10, 500, "rewrite table"),  # three quarters of them
        ({1}, True, 10, 500, "rewrite table"),  # a full refresh or a new key
        (set(), False, 10, 500, "schema only"),  # nothing touched: only the schema changes
    ],
)
def test_the_merge_path_follows_the_facts_and_the_tuning(
    touched: set[int], every: bool, rows: int, size: int, path: MergeStrategy
) -> None:
    chosen = choose_merge_path(
        touched=touched,
        buckets=EIGHT,
        rewrites_every_bucket=every,
        delta_rows=rows,
        touched_bytes=size,
        tuning=TUNING,
    )

    assert chosen == path


@pytest.mark.parametrize(
    ("touched", "buckets", "most"),
    [({0, 1, 2, 3, 4, 5}, EIGHT, True), ({0, 1, 2, 3, 4}, EIGHT, False), ({0}, {0}, False)],
)
def test_most_buckets_means_a_share_of_several(
    touched: set[int], buckets: set[int], most: bool
) -> None:
    """One bucket of one is not "most": a single-bucket table still patches or ranks it."""
    assert touches_most(touched, buckets, TUNING) is most
