"""The Iceberg lake table: an Apache Iceberg table that Spark writes, in the lake's catalog.

    <lake>/_catalog.db           the default catalog (SQLite, WAL): Iceberg's JDBC catalog tables
    <lake>/<table>/              the table's location
      data/                      data files and delete files, as Iceberg's Spark writer names them
      metadata/                  table metadata, manifest lists and manifests
      _lock                      the writer lock, where the storage has one (`lock.py`)

A run reads the table's facts from its metadata (`metadata.py`, `records.py`), then writes with
Spark through a commit (`commits.py`): its snapshot is made on a branch of its own, and `main` is
moved to it only if `main` is still the snapshot the run read. Nothing of a run is in the
table's folder but files that Iceberg itself tracks or cleans up.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from incremental_assets.config import LakeSpec
from incremental_assets.dialects import SPARK_SQL
from incremental_assets.errors import TableProblem, WriteError
from incremental_assets.lake.facts import LakeFacts
from incremental_assets.lake.files import ParquetFolder
from incremental_assets.lake.iceberg.catalog import IcebergCatalog, bind, catalog_of
from incremental_assets.lake.iceberg.maintenance import Policy, Target, Task, due, maintain
from incremental_assets.lake.iceberg.metadata import (
    Misplaced,
    misplacement,
    read_quickly,
    read_state,
    split_identifier,
)
from incremental_assets.lake.iceberg.records import (
    TableState,
    branch_name,
    facts_of,
    landed,
    live_rows,
)
from incremental_assets.lake.iceberg.schema import spark_schema, storable
from incremental_assets.lake.lock import folder_lock
from incremental_assets.lake.table import LakeFormat
from incremental_assets.spark_api import T, column_named, held_twice

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def now() -> datetime:
    return datetime.now(UTC)


class IcebergLake:
    format: LakeFormat = "iceberg"

    def __init__(self, spec: LakeSpec, table_name: str, identifier: str) -> None:
        self.spec = spec
        self.catalog: IcebergCatalog = catalog_of(spec)
        self.uri = spec.table_uri(table_name).rstrip("/")
        self.local = "://" not in self.uri
        self.table_name = table_name
        self.name = identifier
        self.identifier: str | None = identifier
        self.namespace, self.short_name = split_identifier(identifier)

    def describe(self) -> str:
        return f"Iceberg table {self.name} at {self.uri}"

    # -- reading ---------------------------------------------------------------------------

    def facts(self, with_files: bool = True) -> LakeFacts:
        """The table as its current metadata file has it. `with_files=False`: without its
        schema, where the standard library can read the head alone (a run with nothing new)."""
        found = read_quickly(self.catalog, self.name) if not with_files else None
        if found is None:
            self._ensure_catalog_folder()
            found = read_state(self.catalog, self.name)
        if isinstance(found, Misplaced):
            return LakeFacts(uri=self.uri, misplaced=found.reason)
        if not isinstance(found, TableState):
            return LakeFacts(uri=self.uri)
        misplaced = misplacement(found, self.uri)
        if misplaced is not None:
            return LakeFacts(uri=self.uri, misplaced=misplaced.reason)
        facts = facts_of(found, self.uri)
        if with_files and found.schema is not None:
            facts = replace(facts, schema=spark_schema(found.schema))
        return facts

    def state(self) -> TableState | None:
        """The table's metadata now, through PyIceberg (None: no such table, or not this lake's)."""
        found = read_state(self.catalog, self.name)
        return found if isinstance(found, TableState) else None

    def count_rows(self) -> int:
        state = self.state()
        current = state.current if state is not None else None
        return live_rows(current) if current is not None else 0

    def maintenance_due(self) -> list[Task]:
        """The maintenance tasks due now (`maintenance.due`), read without Spark."""
        state = self._kept_state()
        return due(state, self._policy(), now()) if state is not None else []

    def maintain(self, spark: SparkSession) -> str | None:
        """The table's maintenance, where any is due (`maintenance.py`): what it did."""
        state = self._kept_state()
        if state is None:
            return None
        policy = self._policy()
        tasks = due(state, policy, now())
        if not tasks:
            return None
        return maintain(self.session(spark), self.target(), state, tasks, policy, now()).describe()

    def _kept_state(self) -> TableState | None:
        """The table's metadata, when it is this lake's to keep: a copied lake's catalog names
        the files of the lake it was copied from, which maintenance must never touch."""
        state = self.state()
        return state if state is not None and misplacement(state, self.uri) is None else None

    def _policy(self) -> Policy:
        return Policy(
            keep_snapshots=self.spec.keep_snapshots,
            keep_snapshots_for=self.spec.keep_snapshots_for,
        )

    def redact(self, text: str) -> str:
        return self.catalog.redact(text)

    def duplicate_keys(
        self, spark: SparkSession, key: list[str], written: list[str] | None
    ) -> tuple[int, int]:
        """Keys held twice in the whole table (a merge counts its own as it commits)."""
        session = self.session(spark)
        columns = [column_named(c) for c in key]
        table = session.read.table(self.reference())
        duplicates = held_twice(table.groupBy(*columns)).count()
        files = session.sql(f"SELECT count(*) FROM {self.reference()}.data_files").first()
        return duplicates, int(files[0]) if files is not None else 0

    def storable(self, schema: T.StructType) -> T.StructType:
        """The source's schema as the table holds it (no 8- or 16-bit integers, ...)."""
        held = storable(schema)
        assert isinstance(held, T.StructType)
        return held

    # -- Spark ----------------------------------------------------------------------------

    def session(self, spark: SparkSession) -> SparkSession:
        """A session in which the lake's catalog is registered (`catalog.bind`)."""
        return bind(spark, self.catalog)

    def rows(self, spark: SparkSession, snapshot: int | None) -> DataFrame:
        """The table's rows as of `snapshot` (None: as it is)."""
        reader = self.session(spark).read
        if snapshot is not None:
            reader = reader.option("versionAsOf", str(snapshot))
        return reader.table(self.reference())

    def reference(self, branch: str | None = None) -> str:
        """The table in Spark SQL: `catalog`.`namespace`.`table`[.`branch_<branch>`]."""
        parts = [self.catalog.name, *self.namespace.split("."), self.short_name]
        if branch is not None:
            parts.append(f"branch_{branch}")
        return ".".join(SPARK_SQL.quote(part) for part in parts)

    def procedure_table(self) -> str:
        """The table as Iceberg's procedures take it, a string naming its catalog."""
        return f"{self.catalog.name}.{self.name}"

    def target(self) -> Target:
        """The table as maintenance names it."""
        return Target(self.catalog.name, self.procedure_table(), self.reference())

    # -- writing ---------------------------------------------------------------------------

    def lock(self, table_name: str, owner: str, timeout: timedelta) -> AbstractContextManager[None]:
        if not self.spec.lock or not self.local:
            return (
                contextlib.nullcontext()
            )  # an object store has no lock: the branch keeps writers apart
        return folder_lock(ParquetFolder(self.uri), table_name, owner, timeout)

    def recover(self) -> list[str]:
        """Nothing to finish: a run's snapshot is on its own branch until `main` takes it, and
        the branches runs left are dropped by the next commit (`commits.py`)."""
        return []

    def discard(self, txn: str) -> bool:
        """Whether a failed run's commit is not on main, as far as the catalog answers: its
        branch is the commit's to drop as it fails (`commits.apply`), or the next commit's once
        it is a day old. A commit whose outcome was lost fails as `CommitUnknown` instead."""
        try:
            state = self.state()
        except WriteError:
            return True
        return state is None or not landed(state, txn)

    def unfinished_error(
        self, table_name: str, txn: str, cause: str, took: bool = False
    ) -> WriteError:
        try:
            state = self.state()
        except WriteError:
            state = None
        if took or (state is not None and landed(state, txn)):
            return WriteError(
                TableProblem(
                    table_name,
                    f"this run's snapshot is the {self.describe()}'s now, but reading the table "
                    f"back failed: {self.catalog.redact(cause)}. The run is not recorded, so the "
                    "cursor did not move; the next run recognises the commit and records it "
                    "without applying it twice.",
                    fix="fix the cause (the catalog's connection, most often) and run again.",
                )
            )
        return WriteError(
            TableProblem(
                table_name,
                f"moving the {self.describe()} to this run's snapshot failed, and whether the "
                f"catalog took it could not be told: {self.catalog.redact(cause)}. Readers see "
                f"the table either as it was or with this run's snapshot, never part of it; what "
                f"the run wrote is kept (its branch {branch_name(txn)}, if it made one). The next "
                "run tells which, and goes "
                "on from there (a snapshot that landed is recognised and not applied twice); the "
                "cursor did not move.",
                fix="fix the cause (the catalog's connection, most often) and run again.",
            )
        )

    def forget(self) -> None:
        """Drop the catalog's entry of the table, leaving its files, in the lake's own catalog
        only (no other lake shares it); for a full refresh after the lake was copied or moved."""
        if not self.catalog.own or self.catalog.sqlite_path is None:
            raise WriteError(
                TableProblem(
                    self.table_name,
                    f"the catalog ({self.catalog.describe()}) names {self.name}, but not as this "
                    "lake's table, and a shared catalog's entry is never dropped or replaced "
                    "here: it may be another lake's. Nothing was written.",
                    "lake.namespace",
                    "give this lake a namespace of its own (lake.namespace), or drop the entry "
                    "yourself if you are sure it is no one's.",
                )
            )
        with contextlib.closing(sqlite3.connect(self.catalog.sqlite_path)) as db, db:
            db.execute(
                "DELETE FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? "
                "AND table_name = ?",
                (self.catalog.name, self.namespace, self.short_name),
            )

    def _ensure_catalog_folder(self) -> None:
        if self.catalog.own:  # the default SQLite file, in the lake's root (a local lake)
            os.makedirs(self.spec.path, exist_ok=True)
