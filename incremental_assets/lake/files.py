"""A folder of Parquet data files as Spark wrote them, on any file system pyarrow reaches.

Both lake formats keep their data this way: a run's Spark output lands under `_staging/<txn>/`,
where no reader looks, and a commit gives each file its name (`names.py`). This module lists,
reads footers and moves files, without the JVM; the formats decide what makes a file part of
the table (a journal and the folder's listing, or an Iceberg snapshot).
"""

from __future__ import annotations

import contextlib
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from incremental_assets.errors import WriteError
from incremental_assets.lake.names import DataFile, data_file
from incremental_assets.spark_api import T

STAGING = "_staging"
SPARK_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"


def arrow_uri(uri: str) -> str:
    """A Hadoop URI as pyarrow's file systems name it (`s3a://` is their `s3://`)."""
    return "s3://" + uri[len("s3a://") :] if uri.startswith("s3a://") else uri


class ParquetFolder:
    """One table's folder: `uri` as Spark names it, `path` within pyarrow's file system `fs`."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.path = pafs.FileSystem.from_uri(arrow_uri(self.uri))
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    def join(self, *parts: str) -> str:
        return "/".join([self.path, *parts])

    def spark_uri(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    def entries(self, *folder: str, recursive: bool = False) -> list[pafs.FileInfo]:
        """What is in `folder` (the table's own by default; none if it doesn't exist)."""
        selector = pafs.FileSelector(self.join(*folder), recursive=recursive, allow_not_found=True)
        return list(self.fs.get_file_info(selector))

    def list_data_files(self, *folder: str) -> list[DataFile]:
        """The data files directly in `folder` (the table's own by default), by name."""
        found = (
            data_file(info.base_name, info.size)
            for info in self.entries(*folder)
            if info.type == pafs.FileType.File
        )
        return sorted((f for f in found if f is not None), key=lambda f: f.name)

    def list_names(self, *folder: str) -> list[str]:
        """The names of what is directly in `folder` (none if it doesn't exist)."""
        return [info.base_name for info in self.entries(*folder)]

    def holds_plain_table(self) -> bool:
        """Whether the folder holds a table in the plain format: its records or data files at its
        root, and no Iceberg metadata (a converted table keeps its files at the root)."""
        try:
            infos = self.entries()
        except OSError:  # not a folder: the run says so when it writes there
            return False
        names = {info.base_name for info in infos}
        if "metadata" in names:
            return False
        return bool(names & {"_head", "_snapshot", "_journal"}) or any(
            data_file(name) is not None for name in names
        )

    def staging_uri(self, txn: str) -> str:
        return self.spark_uri(STAGING, txn)

    def staged_parquet(self, txn: str, subdir: str) -> list[str]:
        """Staged Parquet files under `_staging/<txn>/<subdir>`, as paths relative to it."""
        root = self.join(STAGING, txn, subdir)
        return sorted(
            info.path[len(root) + 1 :]
            for info in self.entries(STAGING, txn, subdir, recursive=True)
            if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
        )

    def has_staging(self) -> bool:
        return bool(self.entries(STAGING))

    def remove_staging(self, txn: str | None = None) -> list[str]:
        """Delete a run's staging (every run's, without `txn`); name what was removed."""
        if txn is not None:
            with contextlib.suppress(FileNotFoundError, OSError):
                self.fs.delete_dir(self.join(STAGING, txn))
            return [txn]
        removed = []
        for info in self.entries(STAGING):
            self.fs.delete_dir(info.path)
            removed.append(info.base_name)
        return removed

    def footer_schema(self, path: str) -> T.StructType:
        """A data file's schema as Spark wrote it (kept in the footer), without starting a job."""
        metadata = pq.read_metadata(path, filesystem=self.fs).metadata or {}
        text = metadata.get(SPARK_SCHEMA)
        if text is None:
            raise WriteError(
                f"{self.uri}: {os.path.basename(path)} was not written by Spark; the lake table "
                "holds a foreign file."
            )
        return T.StructType.fromJson(json.loads(text))

    def reaching(self, paths: dict[str, DataFile], column: str, lower: object) -> list[DataFile]:
        """The files whose footer statistics say `column` may reach `lower` (or can't tell)."""
        return [
            file
            for path, file in paths.items()
            if _may_reach(pq.read_metadata(path, filesystem=self.fs), column, lower)
        ]

    def is_file(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type == pafs.FileType.File)

    def read_json(self, path: str) -> object:
        if not self.is_file(path):
            return None
        with self.fs.open_input_stream(path) as stream:
            return json.loads(stream.read())

    def write_durably(self, path: str, data: bytes) -> None:
        """Write a small file whole: on a local disk to a temporary name, fsynced, then renamed."""
        if self.is_local:
            temporary = path + ".tmp"
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
            self.sync_dir(os.path.dirname(path))
            return
        with self.fs.open_output_stream(path) as stream:  # object stores publish on close
            stream.write(data)

    def sync_staged(self, txn: str, staged: list[str]) -> None:
        """Flush staged files, and the folders naming them, to disk before a commit points at them.

        Spark closes files without fsync; after a power cut a file a commit adds could be empty
        while the one it replaced is gone. Object stores publish a file whole on close.
        """
        if not self.is_local:
            return
        folders = set()
        for path in staged:
            full = self.join(STAGING, txn, path)
            fsync_path(full)
            folders.add(os.path.dirname(full))
        for folder in sorted(folders):
            self.sync_dir(folder)

    def sync_dir(self, path: str) -> None:
        if self.is_local:
            fsync_path(path)


def local_path(uri: str) -> str:
    """`file:///a`, `file:/a` and `/a` alike (writers spell a local path each their own way)."""
    for scheme in ("file://", "file:"):
        if uri.startswith(scheme):
            return uri[len(scheme) :]
    return uri


def fsync_path(path: str) -> None:
    """Flush a local file's or folder's contents to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _may_reach(metadata: pq.FileMetaData, column: str, lower: object) -> bool:
    """False only when every row group's maximum of `column` is known to be below `lower`.

    Strings are never pruned: text is ordered by a collation, not by Parquet's statistics
    (`cursor.order_of`).
    """
    schema = metadata.schema.to_arrow_schema()
    if column not in schema.names or pa.types.is_string(schema.field(column).type):
        return True
    leaves = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    if column not in leaves:
        return True
    index = leaves.index(column)
    kind = schema.field(column).type
    try:
        bound = pa.scalar(lower, type=kind)
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            if stats is None or not stats.has_min_max:
                return True
            if pc.greater_equal(pa.scalar(stats.max, type=kind), bound).as_py():
                return True
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return True
    return bool(metadata.num_row_groups == 0)
