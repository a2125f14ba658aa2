"""Write plans for tests that call the writers' pieces directly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from incremental_assets.config import LakeSpec, Mode
from incremental_assets.lake import LakeFacts, LakeTable, open_lake
from incremental_assets.lake.names import new_txn
from incremental_assets.results import WriteOutcome
from incremental_assets.writers import writer_for
from incremental_assets.writers.base import WritePlan, Writer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def lake_write_plan(lake: LakeTable, batch: int, **changes: object) -> WritePlan:
    """A run's write plan into `lake` as it is now, batch `batch`, `changes` made."""
    values: dict[str, object] = {
        "lake": lake,
        "facts": lake.facts(),
        "txn": new_txn(),
        "cursor": None,
        "batch": batch,
        "replace_all": False,
        "primary_key": ("id",),
        "cursor_column": "c",
        "delete_column": "gone",
        "buckets": 4,
        "bucket_rows": 50,
        "compression": "zstd",
        "max_rows_per_file": 1_000_000,
    }
    values.update(changes)
    return WritePlan(**values)  # type: ignore[arg-type]


def written(mode: Mode, spark: SparkSession, frame: DataFrame, plan: WritePlan) -> WriteOutcome:
    """One run's write: its stage, then its commit, by the lake format's writer for `mode`."""
    session = plan.lake.session(spark)  # as a run binds its session to the lake's catalog
    rows = session.createDataFrame(frame.collect(), frame.schema)
    writer: Writer[Any] = writer_for(mode, session, plan.lake)
    return writer.commit(writer.stage(rows, plan), plan)
