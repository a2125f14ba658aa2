"""How a plain Parquet merge applies its delta, chosen from the facts alone: pure Python.

    the buckets the lake holds, the ones the delta touches, whether the commit rewrites every
    bucket anyway, the delta's rows, the touched buckets' bytes  ->  the merge path

A merge touching most of several buckets rewrites them all (`rewrite table`); a small delta into
large buckets patches each touched bucket in a job of its own (`patch buckets`); otherwise every
version in the touched buckets is ranked in one shuffle (`rank buckets`); with no bucket touched,
only the schema changes (`schema only`). The thresholds are `lake.merge_tuning`.
"""

from __future__ import annotations

from incremental_assets.config import MergeTuning
from incremental_assets.results import MergeStrategy


def touches_most(touched: set[int], buckets: set[int], tuning: MergeTuning) -> bool:
    """Whether a merge touches so many of several buckets that rewriting them all costs less than
    finding out which rows of the rest changed (and leaves the table as one set of files)."""
    return len(buckets) > 1 and len(touched & buckets) >= tuning.most_buckets * len(buckets)


def choose_merge_path(
    *,
    touched: set[int],
    buckets: set[int],
    rewrites_every_bucket: bool,
    delta_rows: int,
    touched_bytes: int,
    tuning: MergeTuning,
) -> MergeStrategy:
    """The merge path for a delta that touches `touched` of the lake's `buckets`."""
    if rewrites_every_bucket or touches_most(touched, buckets, tuning):
        return "rewrite table"
    if not touched:
        return "schema only"
    if (
        delta_rows <= tuning.patch_rows
        and len(touched) <= tuning.patch_buckets
        and touched_bytes >= tuning.patch_min_bytes
    ):
        return "patch buckets"
    return "rank buckets"
