"""What a run knows about its lake table: read once, before anything is decided or written.

`LakeFacts` holds the data files, their schema, the small records the writers keep beside them,
and the head: the table's identity and its last commit. A run reads them once (`LakeTable.facts`),
and every decision about the lake (does it fit the mode, is it the table the stored cursor
describes, did a commit go unrecorded) is a pure function of them (`plan.py`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from incremental_assets.lake.names import DataFile
from incremental_assets.spark_api import T

# What a table's rows are laid out for: `merge` (matched on a key), `batches` (append and
# full_refresh tables). A table written in one can't take the other's runs incrementally.
Layout = Literal["merge", "batches"]

# The records a commit writes beside its data files, by name.
SNAPSHOT = "_snapshot"  # {"batch", "txn"}: the last commit that replaced the whole table
COLUMNS = "_columns"  # append tables: since which batch each column is in the source
KEY = "_key"  # merge tables: the columns rows are matched on, and their weights' collations
HEAD = "_head"  # {"table_id", "txn", "batch", "cursor"}: the identity and the last commit
RecordName = Literal["_snapshot", "_columns", "_key", "_head"]


@dataclass(frozen=True, kw_only=True)
class LakeHead:
    """The table's identity and its last commit."""

    # Created with the table and kept by every commit: a folder deleted and written again, or
    # another lake at the same place, has another one.
    table_id: str
    txn: str  # the last commit's id
    batch: int  # the batch number of the run that made it
    cursor: str | None = None  # the cursor that run was to record
    # The data files the commit left (`files_digest`): the plain Parquet format has no other
    # record of which files make up the table, so one deleted or added behind its back shows.
    files: str | None = None
    snapshot_id: int | None = None  # Iceberg: the snapshot the commit made
    # Iceberg: the metadata file current once the commit was made, for readers that take one
    # (DuckDB's `iceberg_scan`, engines without the catalog); None where it wasn't read.
    metadata_location: str | None = field(default=None, compare=False)

    def to_record(self) -> dict[str, Any]:
        return {
            "table_id": self.table_id,
            "txn": self.txn,
            "batch": self.batch,
            "cursor": self.cursor,
            "files": self.files,
        }

    @staticmethod
    def from_record(record: Mapping[str, Any] | None) -> LakeHead | None:
        if not record:
            return None
        return LakeHead(
            table_id=str(record["table_id"]),
            txn=str(record["txn"]),
            batch=int(record["batch"]),
            cursor=record.get("cursor"),
            files=record.get("files"),
        )


def files_digest(names: Iterable[str]) -> str:
    """How many data files, and a digest of their names: `<count>:<md5>`."""
    ordered = sorted(names)
    digest = hashlib.md5("\n".join(ordered).encode(), usedforsecurity=False).hexdigest()
    return f"{len(ordered)}:{digest}"


@dataclass(frozen=True, kw_only=True)
class LakeFacts:
    uri: str
    files: tuple[DataFile, ...] = ()
    schema: T.StructType | None = None  # the newest data file's, as Spark wrote it; all agree
    head: LakeHead | None = None  # None: a table no commit of this version has made
    replaced_batch: int | None = None  # the batch of the last commit that replaced the table
    key: Mapping[str, Any] | None = None  # the `_key` record
    columns: Mapping[str, Any] | None = None  # the `_columns` record
    pending: bool = False  # a commit or a run's staging waits for `LakeTable.recover`
    layout: Layout | None = None  # None: nothing written yet
    holds_rows: bool = False  # the table has rows (a plain table: data files)
    # The catalog names the table, but not here: its metadata lives at another place (the lake
    # was copied or moved, or the name is another lake's), or can't be read. Says which.
    misplaced: str | None = None
    # Iceberg: the snapshot main is at, which a commit must still find there (maintenance may
    # have made one after the head, the last commit of ours)
    current_snapshot: int | None = None
    format_version: int | None = None  # Iceberg: the table's format version (3: deletion vectors)

    @property
    def exists(self) -> bool:
        """Whether the lake holds anything of this table: data files or a commit."""
        return bool(self.files) or self.head is not None

    @property
    def key_columns(self) -> list[str] | None:
        """The columns the buckets are keyed on, as the last merge recorded them."""
        return None if self.key is None else list(self.key["columns"])

    @property
    def weighed_by(self) -> dict[str, str]:
        """The collation each weight column in the lake was taken under."""
        return dict((self.key or {}).get("weighed_by", {}))
