"""A lake table: a flat directory of Parquet files, changed only by journaled commits.

Layout of `<lake>/<table>/`:

    part-<group>-<txn>-<n>.parquet   data files; <group> says which batch or bucket they hold
    _staging/<txn>/                  Spark's output for a run that has not committed yet
    _journal/<txn>.json              a commit in progress: files to add, files to remove
    _snapshot                        the batch number of the last commit that replaced the table
    _columns                         append tables: since which batch each column is in the source
    _key                             merge tables: the key columns the buckets hash
    _lock                            the writer lock (local file systems)

Names starting with `_` are skipped by Spark and pyarrow readers, so the table always reads as one
dataset of complete files. A commit writes its journal, renames the staged files into place, then
removes the files they replace. If the process dies or fails part way, the next run rolls the
journal forward before doing anything else, so a journaled commit's staging is never discarded;
runs that failed before journaling leave only staging behind, which is deleted. File operations
go through pyarrow's file systems, so a lake on s3a:// or hdfs:// works the same way, without
the JVM.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import types as T

from incremental_assets.errors import ConcurrentRunError, WriteError
from incremental_assets.pause_points import pause_point

# Numbers are zero-padded to a minimum width, never cut to it: a 100,001st file of a commit, a
# batch past 10^12 or a range of keys near 2^63 only make the number longer.
_DATA_FILE = re.compile(
    r"^part-(?P<group>b\d{12,}|h\d{5}of\d{5}|r[pn]\d{12,}w\d+)-(?P<txn>[0-9A-Za-z]+)-\d{5,}\.parquet$"
)
_HASH_GROUP = re.compile(r"^h(\d{5})of(\d{5})$")
_RANGE_GROUP = re.compile(r"^r([pn])(\d{12,})w(\d+)$")
STAGING = "_staging"
JOURNAL = "_journal"
SNAPSHOT = "_snapshot"
COLUMNS = "_columns"
KEY = "_key"
LOCK = "_lock"


def new_txn() -> str:
    """Sortable, unique commit id: UTC time then random hex."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + secrets.token_hex(4)


def batch_group(batch: int) -> str:
    return f"b{batch:012d}"


@dataclass(frozen=True)
class BucketScheme:
    """How a merge table's keys map to buckets: `hash` into `size` buckets, or `range` of `size` keys."""

    kind: str
    size: int

    def group(self, index: int) -> str:
        if self.kind == "hash":
            return f"h{index:05d}of{self.size:05d}"
        return f"r{'n' if index < 0 else 'p'}{abs(index):012d}w{self.size}"


def parse_bucket(group: str) -> tuple[BucketScheme, int] | None:
    if match := _HASH_GROUP.match(group):
        return BucketScheme("hash", int(match.group(2))), int(match.group(1))
    if match := _RANGE_GROUP.match(group):
        index = int(match.group(2))
        return BucketScheme("range", int(match.group(3))), -index if match.group(
            1
        ) == "n" else index
    return None


@dataclass(frozen=True)
class DataFile:
    name: str
    group: str
    size: int = 0  # bytes

    @property
    def batch(self) -> int | None:
        return int(self.group[1:]) if self.group.startswith("b") else None

    @property
    def bucket(self) -> tuple[BucketScheme, int] | None:
        return parse_bucket(self.group)


def arrow_uri(uri: str) -> str:
    """A Hadoop URI as pyarrow's file systems name it (`s3a://` is their `s3://`)."""
    return "s3://" + uri[len("s3a://") :] if uri.startswith("s3a://") else uri


class LakeTable:
    """One table's directory in the lake."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs, self.path = pafs.FileSystem.from_uri(arrow_uri(self.uri))
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    def _join(self, *parts: str) -> str:
        return "/".join([self.path, *parts])

    def spark_uri(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    def data_files(self) -> list[DataFile]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        files = []
        for info in infos:
            match = _DATA_FILE.match(info.base_name)
            if info.type == pafs.FileType.File and match:
                files.append(DataFile(info.base_name, match.group("group"), info.size))
        return sorted(files, key=lambda f: f.name)

    def file_uris(self, files: list[DataFile]) -> list[str]:
        return [self.spark_uri(f.name) for f in files]

    def staging_uri(self, txn: str) -> str:
        return self.spark_uri(STAGING, txn)

    def staged_parquet(self, txn: str, subdir: str) -> list[str]:
        """Staged Parquet files under `_staging/<txn>/<subdir>`, as paths relative to it."""
        root = self._join(STAGING, txn, subdir)
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        return sorted(
            info.path[len(root) + 1 :]
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
        )

    def spark_schema(self, file: DataFile) -> T.StructType:
        """A data file's schema as Spark wrote it (kept in the footer), without starting a job."""
        metadata = pq.read_metadata(self._join(file.name), filesystem=self.fs).metadata or {}
        text = metadata.get(b"org.apache.spark.sql.parquet.row.metadata")
        if text is None:
            raise WriteError(
                f"{self.uri}/{file.name} was not written by Spark; the lake table holds a foreign file."
            )
        return T.StructType.fromJson(json.loads(text))

    def files_reaching(self, files: list[DataFile], column: str, lower: object) -> list[DataFile]:
        """The files whose footer statistics say `column` may reach `lower` (or can't tell)."""
        kept = []
        for file in files:
            metadata = pq.read_metadata(self._join(file.name), filesystem=self.fs)
            if _may_reach(metadata, column, lower):
                kept.append(file)
        return kept

    def count_rows(self) -> int:
        files = [self._join(f.name) for f in self.data_files()]
        if not files:
            return 0
        # Imported here: pyarrow.dataset loads pandas, most of a second of every process's start,
        # and a run with nothing new never counts.
        import pyarrow.dataset as pads

        return int(pads.dataset(files, filesystem=self.fs, format="parquet").count_rows())

    def commit(
        self,
        txn: str,
        adds: list[tuple[str, str]],
        removes: list[str],
        records: Mapping[str, Any] | None = None,
    ) -> None:
        """Atomically (by roll-forward) add staged files and remove replaced ones.

        `adds` pairs a path relative to `_staging/<txn>/` with a final file name. `records` replace
        the lake's small JSON records (`_snapshot`, `_columns`, `_key`) in the same commit.
        """
        journal = {"txn": txn, "adds": adds, "removes": removes, "records": dict(records or {})}
        self._sync_staged(txn, [staged for staged, _ in adds])
        self.fs.create_dir(self._join(JOURNAL), recursive=True)
        self._write_durably(self._join(JOURNAL, f"{txn}.json"), json.dumps(journal).encode())
        self._apply(journal)

    def recover(self) -> list[str]:
        """Finish commits a dead run journaled, and drop staging no commit refers to."""
        done = []
        selector = pafs.FileSelector(self._join(JOURNAL), allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if info.base_name.endswith(".json"):
                with self.fs.open_input_stream(info.path) as stream:
                    journal = json.loads(stream.read())
                self._check_adds_present(journal)
                self._apply(journal)
                done.append(f"rolled forward commit {journal['txn']}")
            else:
                self.fs.delete_file(info.path)
        staging = self.fs.get_file_info(
            pafs.FileSelector(self._join(STAGING), allow_not_found=True)
        )
        for info in staging:
            self.fs.delete_dir(info.path)
            done.append(f"removed uncommitted staging {info.base_name}")
        return done

    def has_pending_commit(self) -> bool:
        """Whether a journaled commit or a run's staging waits for `recover`."""
        return any(
            self.fs.get_file_info(pafs.FileSelector(self._join(name), allow_not_found=True))
            for name in (JOURNAL, STAGING)
        )

    def discard(self, txn: str) -> bool:
        """Remove a failed run's staging, unless its commit is journaled; say whether it did.

        A journaled commit may be part applied, and only its staged files can finish it: they
        stay for the next run's `recover`.
        """
        if self._is_file(self._join(JOURNAL, f"{txn}.json")):
            return False
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(self._join(STAGING, txn))
        return True

    def snapshot_batch(self) -> int | None:
        """The batch number of the last commit that replaced the whole table, if known."""
        marker = self.record(SNAPSHOT)
        return None if marker is None else int(marker["batch"])

    def record(self, name: str) -> Any:
        """The JSON record `name` (`_snapshot`, `_columns`, `_key`) the last commit left, if any."""
        path = self._join(name)
        if not self._is_file(path):
            return None
        with self.fs.open_input_stream(path) as stream:
            return json.loads(stream.read())

    def _is_file(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type == pafs.FileType.File)

    def _apply(self, journal: Mapping[str, Any]) -> None:
        txn = str(journal["txn"])
        records = dict(journal.get("records") or {})
        if journal.get("snapshot_batch") is not None:  # a journal written before `records`
            records[SNAPSHOT] = {"batch": journal["snapshot_batch"], "txn": txn}
        for name, content in records.items():
            self._write_durably(self._join(name), json.dumps(content).encode())
        for staged, final in journal["adds"]:
            source = self._join(STAGING, txn, staged)
            if self._is_file(source):
                self.fs.move(source, self._join(final))
                pause_point("mid-commit")
        # The new names must be durable before the files they replace go.
        self._sync_dir(self.path)
        for name in journal["removes"]:
            target = self._join(name)
            if self._is_file(target):
                self.fs.delete_file(target)
        self._sync_dir(self.path)
        with contextlib.suppress(FileNotFoundError, OSError):
            self.fs.delete_dir(self._join(STAGING, txn))
        self.fs.delete_file(self._join(JOURNAL, f"{txn}.json"))

    def _check_adds_present(self, journal: Mapping[str, Any]) -> None:
        """Refuse to finish a commit whose new files are gone: its removals would lose rows."""
        txn = str(journal["txn"])
        for staged, final in journal["adds"]:
            if not (
                self._is_file(self._join(STAGING, txn, staged)) or self._is_file(self._join(final))
            ):
                raise WriteError(
                    f"The lake table {self.uri} has an unfinished commit ({JOURNAL}/{txn}.json) "
                    f"whose staged file {STAGING}/{txn}/{staged} is missing and was never moved "
                    f"into place as {final}. Finishing the commit would remove the files it "
                    "replaces without adding their replacements, so nothing was changed. Fix: "
                    "restore the staged file, or delete the journal and run a full refresh (asset "
                    "config full_refresh: true) to rebuild the table."
                )

    def _sync_staged(self, txn: str, staged: list[str]) -> None:
        """Flush staged files, and the folders naming them, to disk before a journal points at them.

        Spark closes files without fsync; after a power cut a file the journal adds could be empty
        while the one it replaced is gone. Object stores publish a file whole on close.
        """
        if not self.is_local:
            return
        folders = set()
        for path in staged:
            full = self._join(STAGING, txn, path)
            _fsync(full)
            folders.add(os.path.dirname(full))
        for folder in sorted(folders):
            self._sync_dir(folder)

    def _write_durably(self, path: str, data: bytes) -> None:
        temporary = path + ".tmp"
        if self.is_local:
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
            self._sync_dir(os.path.dirname(path))
            return
        with self.fs.open_output_stream(path) as stream:  # object stores publish on close
            stream.write(data)

    def _sync_dir(self, path: str) -> None:
        if self.is_local:
            _fsync(path)

    @contextlib.contextmanager
    def lock(self, table_name: str, owner: str, timeout: timedelta) -> Iterator[None]:
        """Hold the table's writer lock; wait up to `timeout`, then fail naming the holder.

        The lock is an OS file lock, released by the kernel if the process dies. It only works
        where the lake is a local or shared POSIX file system; for object stores, Dagster's
        concurrency pool on the asset is the guard.
        """
        if not self.is_local:
            yield
            return
        self.fs.create_dir(self.path, recursive=True)
        with open(self._join(LOCK), "a+") as handle:
            self._acquire(handle, table_name, timeout)
            handle.seek(0)
            handle.truncate()
            handle.write(
                f"{owner} (pid {os.getpid()} on {socket.gethostname()}, since {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ})"
            )
            handle.flush()
            try:
                yield
            finally:
                handle.truncate(0)
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _acquire(self, handle: object, table_name: str, timeout: timedelta) -> None:
        deadline = time.monotonic() + timeout.total_seconds()
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
        with open(self._join(LOCK)) as reader:
            holder = reader.read().strip() or "another process"
        raise ConcurrentRunError(
            f"Table '{table_name}': another run is writing {self.uri} and still holds its lock "
            f"after {timeout}: {holder}. Wait for that run to finish, or raise lake.lock_timeout "
            "to queue behind it."
        )


def _fsync(path: str) -> None:
    """Flush a local file's or folder's contents to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def lake_error(table_name: str, uri: str, cause: str) -> WriteError:
    return WriteError(
        f"Table '{table_name}': writing to the lake at {uri} failed: {cause}. Nothing was committed "
        "and the cursor did not move; fix the cause and run again."
    )


def unfinished_commit_error(table_name: str, uri: str, txn: str, cause: str) -> WriteError:
    return WriteError(
        f"Table '{table_name}': the commit into the lake at {uri} failed part way: {cause}. It is "
        f"journaled ({JOURNAL}/{txn}.json) and its staged files are kept: until the next run of "
        "this table, readers may see some of the new files next to the ones they replace. The "
        "next run finishes this commit before anything else, then reads again from the cursor, "
        "which did not move. Fix the cause and run again."
    )


def _may_reach(metadata: pq.FileMetaData, column: str, lower: object) -> bool:
    """False only when every row group's maximum of `column` is known to be below `lower`.

    Strings are never pruned: the cursor's order is the database's collation, not Parquet's.
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
    return metadata.num_row_groups == 0
