"""The plain Parquet lake: a flat folder of data files, changed only by journaled commits.

    <lake>/<table>/
      part-<group>-<txn>-<n>.parquet   data files (`names.py`)
      _staging/<txn>/                  Spark's output for a run that has not committed yet
      _journal/<txn>.json              a commit in progress (`journal.py`)
      _head                            the table's identity and its last commit
      _snapshot                        the batch of the last commit that replaced the table
      _columns, _key                   the writers' records
      _lock                            the writer lock (`lock.py`)

Names starting with `_` are skipped by Spark and pyarrow readers, so the table reads as one
dataset of complete files; a reader listing it during a commit can see a bucket's old and new
files together. Every file operation goes through pyarrow's file systems, without the JVM.
"""

from __future__ import annotations

import uuid
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from incremental_assets.errors import ConcurrentRunError, TableProblem, WriteError
from incremental_assets.lake.facts import (
    COLUMNS,
    HEAD,
    KEY,
    SNAPSHOT,
    LakeFacts,
    LakeHead,
    Layout,
    files_digest,
)
from incremental_assets.lake.files import ParquetFolder
from incremental_assets.lake.journal import (
    commit_journaled,
    has_journal,
    journal_path,
    roll_forward,
)
from incremental_assets.lake.lock import folder_lock
from incremental_assets.lake.names import DataFile
from incremental_assets.lake.table import Commit, LakeFormat
from incremental_assets.spark_api import T, column_named, held_twice

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class ParquetLake:
    format: LakeFormat = "parquet"
    identifier: str | None = None

    def __init__(self, uri: str, table_name: str | None = None) -> None:
        self.folder = ParquetFolder(uri)
        self.uri = self.folder.uri
        self.table_name = table_name or self.uri.rsplit("/", 1)[-1]

    def describe(self) -> str:
        return self.uri

    def facts(self, with_files: bool = True) -> LakeFacts:
        folder = self.folder
        files = folder.list_data_files()
        snapshot = folder.read_json(folder.join(SNAPSHOT))
        return LakeFacts(
            uri=self.uri,
            files=tuple(files),
            schema=self.spark_schema(files[-1]) if files else None,
            head=LakeHead.from_record(_record(folder.read_json(folder.join(HEAD)))),
            replaced_batch=None if not snapshot else int(_record(snapshot)["batch"]),
            key=_record(folder.read_json(folder.join(KEY))) or None,
            columns=_record(folder.read_json(folder.join(COLUMNS))) or None,
            pending=has_journal(folder) or folder.has_staging(),
            layout=layout_of(files),
            holds_rows=bool(files),
        )

    def recover(self) -> list[str]:
        done = roll_forward(self.folder)
        done += [f"removed uncommitted staging {txn}" for txn in self.folder.remove_staging()]
        return done

    def lock(self, table_name: str, owner: str, timeout: timedelta) -> AbstractContextManager[None]:
        return folder_lock(self.folder, table_name, owner, timeout)

    def session(self, spark: SparkSession) -> SparkSession:
        return spark

    def storable(self, schema: T.StructType) -> T.StructType:
        return schema

    def redact(self, text: str) -> str:
        return text

    def maintain(self, spark: SparkSession) -> str | None:
        return None  # a commit leaves nothing behind: no history is kept

    def duplicate_keys(
        self, spark: SparkSession, key: list[str], written: list[str] | None
    ) -> tuple[int, int]:
        """Keys held twice in the data files `written` names (every file with None): a key
        always lands in the same bucket, so the buckets a merge wrote hold all of its keys."""
        files = self.folder.list_data_files()
        if written is not None:
            names = set(written)
            files = [f for f in files if f.name in names]
            if len(files) < len(names):
                # Never a pass over files it didn't read: the check reports it as not run.
                raise RuntimeError(
                    f"another commit replaced {len(names) - len(files)} of the files this run "
                    "wrote before they were read back (two runs of the table at once, without "
                    "the lock?)"
                )
        if not files:
            return 0, 0
        columns = [column_named(c) for c in key]
        rows = spark.read.parquet(*self.file_uris(files)).groupBy(*columns)
        return held_twice(rows).count(), len(files)

    def staging_uri(self, txn: str) -> str:
        return self.folder.staging_uri(txn)

    def staged_parquet(self, txn: str, subdir: str) -> list[str]:
        return self.folder.staged_parquet(txn, subdir)

    def file_uris(self, files: list[DataFile]) -> list[str]:
        return [self.folder.spark_uri(f.name) for f in files]

    def spark_schema(self, file: DataFile) -> T.StructType:
        return self.folder.footer_schema(self.folder.join(file.name))

    def files_reaching(self, files: list[DataFile], column: str, lower: object) -> list[DataFile]:
        return self.folder.reaching({self.folder.join(f.name): f for f in files}, column, lower)

    def commit(self, commit: Commit, facts: LakeFacts) -> LakeHead:
        now = LakeHead.from_record(_record(self.folder.read_json(self.folder.join(HEAD))))
        if now != facts.head:
            raise ConcurrentRunError(
                TableProblem(
                    self.table_name,
                    f"another run committed to {self.uri} (commit {now.txn if now else 'none'}) "
                    "after this run read it, so this run's commit would overwrite that one's. "
                    "Nothing was committed and the cursor did not move.",
                    fix="run again; on an object store, give the table's Dagster pool a limit "
                    "of 1, or use lake.format: iceberg, whose catalog keeps writers apart.",
                )
            )
        removed = set(commit.removes)
        kept = [f.name for f in facts.files if f.name not in removed]
        head = LakeHead(
            table_id=facts.head.table_id if facts.head else uuid.uuid4().hex,
            txn=commit.txn,
            batch=commit.batch,
            cursor=commit.cursor,
            files=files_digest([*kept, *(final for _, final in commit.adds)]),
        )
        records: dict[str, Any] = {**commit.records, HEAD: head.to_record()}
        if commit.replace_all:
            records[SNAPSHOT] = {"batch": commit.batch, "txn": commit.txn}
        commit_journaled(self.folder, commit.txn, commit.adds, commit.removes, records)
        return head

    def drop_records(self) -> None:
        """Remove the format's own records (after the table became an Iceberg table's files)."""
        for name in (HEAD, SNAPSHOT, COLUMNS, KEY):
            if self.folder.is_file(self.folder.join(name)):
                self.folder.fs.delete_file(self.folder.join(name))

    def discard(self, txn: str) -> bool:
        if self.folder.is_file(journal_path(self.folder, txn)):
            return False  # part applied, maybe: only its staged files can finish it
        self.folder.remove_staging(txn)
        return True

    def unfinished_error(
        self, table_name: str, txn: str, cause: str, took: bool = False
    ) -> WriteError:
        return WriteError(
            TableProblem(
                table_name,
                f"the commit into the lake at {self.uri} failed part way: {cause}. It is "
                f"journaled (_journal/{txn}.json) and its staged files are kept: until the next "
                "run of this table, readers may see some of the new files next to the ones they "
                "replace. The next run finishes this commit before anything else, then reads "
                "again from the cursor, which did not move.",
                fix="fix the cause and run again.",
            )
        )

    def count_rows(self) -> int:
        files = [self.folder.join(f.name) for f in self.folder.list_data_files()]
        if not files:
            return 0
        # Imported here: pyarrow.dataset loads pandas, most of a second of every process's start,
        # and a run with nothing new never counts.
        import pyarrow.dataset as pads

        return int(pads.dataset(files, filesystem=self.folder.fs, format="parquet").count_rows())


def layout_of(files: list[DataFile]) -> Layout | None:
    """What the files' names say they hold: buckets of a key, or batches (the newest file's)."""
    if not files:
        return None
    return "merge" if files[-1].bucket is not None else "batches"


def _record(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}
