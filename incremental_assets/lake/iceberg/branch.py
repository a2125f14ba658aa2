"""A run's branch as the writer's rows reach it: what `commits.apply` hands a write.

Branch    the branch `ia-<txn>`, made where main must still be on first use (a write with
          nothing to commit makes none), the table's rows as the commit is computed
          against them, and the run's frames as views its SQL can name
OnBranch  a write on the branch, which says whether there is anything to commit
Whole     the rows of a replacement of the whole table
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL
from incremental_assets.lake.iceberg.records import branch_name
from incremental_assets.lake.iceberg.table import IcebergLake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Branch:
    """The run's branch as its write sees it, made where main must still be on first use."""

    lake: IcebergLake
    spark: SparkSession
    txn: str
    base: int | None  # the snapshot the commit is computed against
    made: bool = False

    @property
    def name(self) -> str:
        return branch_name(self.txn)

    @property
    def reference(self) -> str:
        if not self.made:
            # Made as far as cleaning up goes: the catalog may take it and its answer be lost.
            self.made = True
            at = f" AS OF VERSION {self.base}" if self.base is not None else ""
            self.spark.sql(
                f"ALTER TABLE {self.lake.reference()} CREATE BRANCH "
                f"{SPARK_SQL.quote(self.name)}{at}"
            )
        return self.lake.reference(self.name)

    def rows(self) -> DataFrame:
        """The table's rows as the commit is computed against them."""
        return self.lake.rows(self.spark, self.base)

    def sql(self, statement: str) -> None:
        self.spark.sql(statement)

    @contextmanager
    def viewed(self, frame: DataFrame, what: str) -> Iterator[str]:
        """`frame` under a name the branch's SQL can use, whichever session made it (a global
        temporary view: the application's sessions share them)."""
        name = f"ia_{self.txn}_{what}"
        frame.createOrReplaceGlobalTempView(name)
        try:
            yield f"global_temp.{SPARK_SQL.quote(name)}"
        finally:
            frame.sparkSession.catalog.dropGlobalTempView(name)


@dataclass(frozen=True)
class OnBranch:
    """A run's rows written on its branch by `write`, which says whether there is anything to
    commit; `cast` gives the table's rows the run's types, where the plan rewrites them."""

    write: Callable[[Branch], bool]
    cast: Callable[[DataFrame], DataFrame] = lambda rows: rows


@dataclass(frozen=True)
class Whole:
    """The table's rows, all of them: a replacement's."""

    rows: DataFrame
