"""PySpark, imported on first use.

Loading the definitions, a sensor's tick and a run with nothing new start no JVM, and with this
they don't import pyspark either (with numpy, about a fifth of a second of every process's
start). Modules use `F`, `T` and `sql` from here at run time, and import pyspark's classes for
their annotations only under `TYPE_CHECKING`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["F", "T", "sql"]


class _Deferred(ModuleType):
    """A module imported on the first access to one of its attributes."""

    def __getattr__(self, name: str) -> object:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(vars(module))  # later accesses don't come back here
        return getattr(module, name)


if TYPE_CHECKING:
    import pyspark.sql as sql
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
else:
    F = _Deferred("pyspark.sql.functions")
    T = _Deferred("pyspark.sql.types")
    sql = _Deferred("pyspark.sql")
