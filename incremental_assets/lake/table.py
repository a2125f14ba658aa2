"""The lake table: what the load and the writers need from a table's storage, in any format.

A run reads the table's facts once (`facts`), lets Spark write its files under `staging_uri`,
and makes them part of the table with one `commit`: all of them or none, with the records the
writers keep beside the data and a new head. The plain Parquet format commits through a journal
in the table's folder; the Iceberg format through its catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from incremental_assets.errors import TableProblem, WriteError, unknown_cause_fix
from incremental_assets.lake.facts import LakeFacts
from incremental_assets.spark_api import T

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LakeFormat = Literal["parquet", "iceberg"]


@dataclass(frozen=True, kw_only=True)
class Commit:
    """One run's change to the table."""

    txn: str
    batch: int
    replace_all: bool  # the commit replaces every file the table held
    cursor: str | None  # the cursor the run is to record, kept with the commit
    adds: list[tuple[str, str]]  # (path under `_staging/<txn>/`, final file name)
    removes: list[str]  # names of the files the commit replaces
    records: Mapping[str, Any] = field(default_factory=dict)  # `_columns`, `_key`, `_snapshot`


class LakeTable(Protocol):
    uri: str  # where the table's files are, as Spark names it
    format: LakeFormat
    identifier: str | None  # the table's name in its catalog (Iceberg), if it has one

    def describe(self) -> str:
        """The table for messages: its folder, and its catalog identifier if it has one."""
        ...

    def facts(self, with_files: bool = True) -> LakeFacts:
        """What a run reads about the table once. `with_files=False`: the data files and their
        schema may be left out where the format can tell its head and records without them (an
        Iceberg table's metadata file, read without PyIceberg), for a run that only checks the
        table is still at the commit it recorded; the plain format lists its files either way."""
        ...

    def recover(self) -> list[str]:
        """Finish or drop what a dead run left; say what was done."""
        ...

    def lock(self, table_name: str, owner: str, timeout: timedelta) -> AbstractContextManager[None]:
        """The writer lock where the storage offers one; a no-op elsewhere."""
        ...

    def session(self, spark: SparkSession) -> SparkSession:
        """The session a run of this table uses: `spark`, or one where its catalog is `spark`'s."""
        ...

    def storable(self, schema: T.StructType) -> T.StructType:
        """The source's schema as the table holds it."""
        ...

    def discard(self, txn: str) -> bool:
        """Drop a failed run's staging unless its commit may be part applied; say whether it did."""
        ...

    def unfinished_error(
        self, table_name: str, txn: str, cause: str, took: bool = False
    ) -> WriteError:
        """The failure of a run whose commit `discard` couldn't drop, or whose outcome was lost
        (`took`: the catalog took it, and only reading it back failed): what readers see, what
        the next run does."""
        ...

    def redact(self, text: str) -> str:
        """`text` without the secrets of the lake's catalog."""
        ...

    def maintain(self, spark: SparkSession) -> str | None:
        """The table's maintenance after a commit, where it is due; what it did."""
        ...

    def duplicate_keys(
        self, spark: SparkSession, key: list[str], written: list[str] | None
    ) -> tuple[int, int]:
        """Keys held more than once, and the files read to tell: in the files `written` names
        where every row of a key is in one file of them (the plain format's buckets), else in the
        whole table."""
        ...

    def count_rows(self) -> int: ...


def lake_error(table_name: str, uri: str, cause: str) -> WriteError:
    return WriteError(
        TableProblem(
            table_name,
            f"writing to the lake at {uri} failed: {cause}. Nothing was committed and the cursor "
            "did not move.",
            fix=unknown_cause_fix(table_name),
        )
    )
