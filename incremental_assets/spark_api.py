"""PySpark, imported on first use.

Loading the definitions, a sensor's tick and a run with nothing new start no JVM, and with this
they don't import pyspark either (with numpy, about a fifth of a second of every process's
start). Modules use `F`, `T` and `sql` from here at run time (and `column_named`, the one way to
name a column), and import pyspark's classes for their annotations only under `TYPE_CHECKING`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from incremental_assets.dialects import SPARK_SQL

__all__ = ["F", "T", "column_named", "held_twice", "sql"]


class _Deferred(ModuleType):
    """A module imported on the first access to one of its attributes."""

    def __getattr__(self, name: str) -> object:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(vars(module))  # later accesses don't come back here
        return getattr(module, name)


if TYPE_CHECKING:
    import pyspark.sql as sql
    from pyspark.sql import Column, DataFrame, GroupedData
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
else:
    F = _Deferred("pyspark.sql.functions")
    T = _Deferred("pyspark.sql.types")
    sql = _Deferred("pyspark.sql")


def column_named(name: str) -> Column:
    """The column called `name`, whatever it holds (a dot, a space, a backtick): Spark reads an
    unquoted name as a path, and a backtick ends a quoted one unless doubled."""
    return F.col(SPARK_SQL.quote(name))


def held_twice(groups: GroupedData) -> DataFrame:
    """The groups of more than one row. Counted into a column of its own: `.count()` names its
    column `count`, which a key column may be called too."""
    counted = groups.agg(F.count(F.lit(1)).alias("__rows"))
    return counted.where(F.col("__rows") > 1)
