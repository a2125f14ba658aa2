"""Write plans for tests that call the writers' pieces directly."""

from __future__ import annotations

from typing import Any

from incremental_assets.config import LakeSpec
from incremental_assets.lake import LakeFacts, open_lake
from incremental_assets.writers.base import WritePlan


def write_plan(**settings: Any) -> WritePlan:
    """A merge's write plan with the suite's small settings, `settings` changed."""
    lake = open_lake(LakeSpec(path="/tmp/unused"), "t")
    defaults: dict[str, Any] = {
        "lake": lake,
        "facts": LakeFacts(uri="/tmp/unused"),
        "txn": "t",
        "batch": 1,
        "cursor": None,
        "replace_all": False,
        "primary_key": ("id",),
        "cursor_column": "c",
        "delete_column": None,
        "buckets": 4,
        "bucket_rows": 10,
        "compression": "zstd",
        "max_rows_per_file": 10,
    }
    return WritePlan(**{**defaults, **settings})
