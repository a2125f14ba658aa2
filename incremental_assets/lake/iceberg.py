"""The Iceberg lake: each run's files become one snapshot of an Apache Iceberg table, committed by
the table's catalog (PyIceberg: SQL on SQLite or PostgreSQL, REST, Glue, Hive, ...).

    <lake>/<table>/                  the table's location
      data/part-<group>-<txn>-<n>.parquet   data files, named as in the plain format (`names.py`)
      metadata/                      Iceberg's metadata, manifests and manifest lists
      _staging/<txn>/                Spark's output for a run that has not committed yet
      _lock                          the writer lock, where the storage has one (`lock.py`)

Spark writes the data files exactly as for the plain format; the commit moves them into `data/`
and swaps the table's metadata in the catalog, atomically: readers see the snapshot before or
after, never a part of it. The swap is conditional on the snapshot the run read its facts from,
so of two writers that read the same snapshot one commits and the other fails, whatever the
storage (PyIceberg's own retries are switched off: a merge computed against one snapshot must
not be applied to another). Each snapshot's summary carries the run's batch, commit id and
cursor (`incremental-assets.*`), the writers' records are table properties, and the table's
identity is its Iceberg UUID.

Each commit expires the snapshots beyond `lake.keep_snapshots` in the same swap, then deletes the
files only they referenced; metadata files beyond as many are deleted. Manifests are merged as
they accumulate (`commit.manifest-merge.enabled`), by a merge's overwrite as by an append, so a
table committed every minute keeps a bounded number of them, and what each commit reads to tidy
up doesn't grow with the table's age.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sqlite3
import uuid
from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from incremental_assets.config import LakeSpec
from incremental_assets.errors import ConcurrentRunError, TableProblem, WriteError
from incremental_assets.lake.facts import COLUMNS, KEY, SNAPSHOT, LakeFacts, LakeHead
from incremental_assets.lake.files import STAGING, ParquetFolder, local_path
from incremental_assets.lake.lock import folder_lock
from incremental_assets.lake.names import DataFile, data_file
from incremental_assets.lake.table import Commit, LakeFormat
from incremental_assets.pause_points import pause_point

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile as IcebergFile
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

DATA = "data"
# The record of a conversion from a plain Parquet table: {"from": its table id, "txn"}.
CONVERTED = "_converted"
METADATA = "metadata"
# Snapshot summary properties, and table properties holding the writers' records.
SUMMARY = "incremental-assets."
PROPERTY = "incremental-assets."
# Without the lock (object stores), staging younger than this may be a live run's.
ORPHAN_AGE = timedelta(days=1)
# Every this many commits, the files nothing kept names are deleted (`_delete_orphans`).
SWEEP_EVERY = 100
_TABLE_PROPERTIES = {
    # A commit is computed against the snapshot the run read: never rebased onto another.
    "commit.retry.num-retries": "0",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "16",
    "write.metadata.delete-after-commit.enabled": "true",
}


class IcebergLake:
    format: LakeFormat = "iceberg"

    def __init__(self, spec: LakeSpec, table_name: str, identifier: str) -> None:
        self.spec = spec
        self.folder = ParquetFolder(spec.table_uri(table_name))
        self.uri = self.folder.uri
        self.table_name = table_name
        self.name = identifier
        self.identifier: str | None = identifier
        self._catalog: Catalog | None = None
        self._table: Table | None = None  # as `facts` found it: the base of the next commit
        self._lost = False  # the catalog names the table, but its metadata is gone
        self._files: dict[str, IcebergFile] = {}  # the table's data files, by name
        # Commits whose swap raised without telling whether the catalog took them: the catalog
        # (REST, say) may still be applying one, so its files stay for the next run to judge.
        self._unknown: set[str] = set()

    def describe(self) -> str:
        return f"Iceberg table {self.name} at {self.uri}"

    # -- reading ---------------------------------------------------------------------------

    def facts(self, with_files: bool = True) -> LakeFacts:
        if not with_files and (recorded := self._recorded_facts()) is not None:
            return recorded
        table = self._load()
        self._table, self._files = table, {}
        pending = self.folder.has_staging()
        if table is None:
            return LakeFacts(uri=self.uri, pending=pending)
        snapshot = table.current_snapshot()
        files: list[DataFile] = []
        if snapshot is not None:
            for manifest in snapshot.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    found = self._named(entry.data_file, table.metadata.location.rstrip("/"))
                    self._files[found.name] = entry.data_file
                    files.append(found)
        files.sort(key=lambda f: f.name)
        return _facts(
            self.uri,
            self._head(table),
            table.properties,
            pending,
            files=tuple(files),
            schema=self.spark_schema(files[-1]) if files else None,
        )

    def _recorded_facts(self) -> LakeFacts | None:
        """The head and records from the catalog row and the metadata file alone, read with the
        standard library: PyIceberg and SQLAlchemy take most of a second to import, which a run
        with nothing new would otherwise spend.

        Only for a SQL catalog on a local SQLite file, a local metadata file and a head whose
        manifest list is there; anything else (another catalog, a table that isn't there, a file
        that can't be read) is None, and the caller reads the table through PyIceberg, which
        refuses or explains it as the run with Spark would.
        """
        properties = self.spec.catalog_properties()
        uri = properties.get("uri", "")
        path = uri.removeprefix("sqlite:///")
        if properties.get("type") != "sql" or path == uri or "?" in uri:
            return None
        namespace, name = self.name.rsplit(".", 1)
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
                row = db.execute(
                    "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? "
                    "AND table_namespace = ? AND table_name = ? "
                    "AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')",
                    (properties.get("name", "incremental_assets"), namespace, name),
                ).fetchone()
            location = str(row[0])
            if "://" in location and not location.startswith("file:"):
                return None
            with open(local_path(location), "rb") as file:
                data = file.read()
            if location.endswith(".gz.metadata.json"):
                data = gzip.decompress(data)
            metadata = json.loads(data)
            current = metadata["current-snapshot-id"]
            snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == current)
            if not os.path.isfile(local_path(snapshot["manifest-list"])):
                return None
        except Exception:
            return None
        head = _head_of(str(metadata["table-uuid"]), current, snapshot.get("summary"))
        pending = self.folder.has_staging()
        return _facts(self.uri, head, metadata.get("properties", {}), pending)

    def _named(self, file: IcebergFile, location: str) -> DataFile:
        name = os.path.basename(file.file_path)
        found = data_file(name, file.file_size_in_bytes)
        if found is None or not local_path(file.file_path).startswith(local_path(location) + "/"):
            raise WriteError(
                TableProblem(
                    self.table_name,
                    f"the {self.describe()} holds {file.file_path}, a data file this package "
                    "didn't write (another engine rewrote or added files, or put them outside "
                    "the table's location), so its batches and buckets can't be told.",
                    fix=f"rebuild the table with `incremental-assets run {self.table_name} "
                    "--full`, and leave its files to this package.",
                )
            )
        return found

    def _head(self, table: Table) -> LakeHead | None:
        snapshot = table.current_snapshot()
        if snapshot is None:
            return None
        return _head_of(str(table.metadata.table_uuid), snapshot.snapshot_id, snapshot.summary)

    def staging_uri(self, txn: str) -> str:
        return self.folder.staging_uri(txn)

    def staged_parquet(self, txn: str, subdir: str) -> list[str]:
        return self.folder.staged_parquet(txn, subdir)

    def file_uris(self, files: list[DataFile]) -> list[str]:
        return [self._spark_path(self._files[f.name].file_path) for f in files]

    def spark_schema(self, file: DataFile) -> T.StructType:
        return self.folder.footer_schema(self._path(file))

    def files_reaching(self, files: list[DataFile], column: str, lower: object) -> list[DataFile]:
        return self.folder.reaching({self._path(f): f for f in files}, column, lower)

    def count_rows(self) -> int:
        table = self._load()
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None or snapshot.summary is None:
            return 0
        return int(snapshot.summary["total-records"] or 0)

    def _path(self, file: DataFile) -> str:
        """A data file's path within the lake's file system."""
        return self.folder.join(self._relative(self._files[file.name].file_path))

    def _location(self) -> str:
        assert self._table is not None
        return self._table.metadata.location.rstrip("/")

    def _spark_path(self, iceberg_path: str) -> str:
        """An Iceberg file path as Spark names it (the table's location is `file:` or `s3:`...)."""
        return self.folder.spark_uri(self._relative(iceberg_path))

    def _relative(self, iceberg_path: str) -> str:
        """A path under the table's location (as `_named` found it), relative to it."""
        return local_path(iceberg_path)[len(local_path(self._location())) + 1 :]

    # -- writing ---------------------------------------------------------------------------

    def lock(self, table_name: str, owner: str, timeout: timedelta) -> AbstractContextManager[None]:
        if not self.spec.lock:
            return contextlib.nullcontext()
        return folder_lock(self.folder, table_name, owner, timeout)

    def recover(self) -> list[str]:
        """Drop what runs that died before their commit left: staging, and files moved for it.

        Where the lock keeps other writers out, all of it, and the files moved into `data/` for
        a commit no snapshot made. Elsewhere only stagings older than `ORPHAN_AGE` (a younger one
        may belong to a run under way), and not their moved files: by then the commit's snapshot
        may have expired while older kept ones still name its files. The sweep
        (`_delete_orphans`) removes those once nothing kept names them.
        """
        table = self._load()
        done = []
        for txn in self.folder.list_names(STAGING):
            locked = self._holds_lock()
            if not locked and self._staging_age(txn) < ORPHAN_AGE:
                continue
            if locked and not _landed(table, txn):
                self._delete_moved(txn)
            self.folder.remove_staging(txn)
            done.append(f"removed the staging of {txn}, a run that ended before it finished")
        return done

    def discard(self, txn: str) -> bool:
        if txn in self._unknown:
            return False
        try:
            table = self._load()
        except WriteError:
            return False  # the catalog can't be read: the commit may have landed
        if _landed(table, txn):
            return False  # its snapshot is the table's: the files are too
        self._delete_moved(txn)
        self.folder.remove_staging(txn)
        return True

    def _staging_age(self, txn: str) -> timedelta:
        """How long since a run's staging was last written to: since its commit id was made, or
        its newest file, whichever is younger (a run may stage for longer than `ORPHAN_AGE`)."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.folder.join(STAGING, txn), recursive=True)
        try:
            times = [i.mtime for i in self.folder.fs.get_file_info(selector) if i.mtime is not None]
        except (FileNotFoundError, OSError):
            times = []
        newest = max(times, default=None)
        written = datetime.now(UTC) - newest if newest is not None else ORPHAN_AGE
        return min(_age(txn), written)

    def commit(self, commit: Commit, facts: LakeFacts) -> LakeHead:
        """Move the staged files into `data/`, then swap the table's metadata in the catalog."""
        adds = [(staged, f"{DATA}/{final}") for staged, final in commit.adds]
        if self._lost:
            self._forget_lost_table()
        self.folder.sync_staged(commit.txn, [staged for staged, _ in adds])
        self.folder.fs.create_dir(self.folder.join(DATA), recursive=True)
        for staged, final in adds:
            self.folder.fs.move(
                self.folder.join(STAGING, commit.txn, staged), self.folder.join(final)
            )
            pause_point("mid-commit")
        self.folder.sync_dir(self.folder.join(DATA))
        try:
            table = self._table if facts.head is not None else self._load()
            if table is None:
                table = self._create(adds)
            table_id, snapshot_id = self._swap(table, commit, facts, [final for _, final in adds])
        except Exception as exc:
            outcome = self._outcome(exc, commit.txn, facts)
            if outcome == "unknown":
                self._unknown.add(commit.txn)
                raise  # the files stay: the catalog may take the commit yet (`discard`)
            if outcome == "refused":
                self._delete_moved(commit.txn)
                raise self._conflict(facts) from None
            table_id, snapshot_id = outcome  # it landed: only the catalog's answer was lost
        self.folder.remove_staging(commit.txn)
        return LakeHead(
            table_id=str(table_id),
            txn=commit.txn,
            batch=commit.batch,
            cursor=commit.cursor,
            snapshot_id=snapshot_id,
        )

    def _outcome(
        self, exc: Exception, txn: str, facts: LakeFacts
    ) -> tuple[uuid.UUID, int] | Literal["refused", "unknown"]:
        """What became of a commit whose swap raised: refused (the catalog said so, or the table
        moved on from the snapshot it was computed against, which a late swap can't apply
        to), landed (the snapshot it made, found in the table), or unknown (the catalog can't be
        read, or still holds the snapshot it was computed against)."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        if isinstance(exc, CommitFailedException | ValidationException | ConcurrentRunError):
            return "refused"
        try:
            table = self._load()
        except Exception:
            return "unknown"
        current = table.current_snapshot() if table is not None else None
        ours = next((s for s in _snapshots(table) if _txn_of(s.summary) == txn), None)
        if table is not None and ours is not None:
            return table.metadata.table_uuid, ours.snapshot_id
        if _landed(table, txn):
            return "unknown"  # its files are the table's, its snapshot already expired
        seen = facts.head.snapshot_id if facts.head is not None else None
        if (current.snapshot_id if current is not None else None) != seen:
            return "refused"
        return "unknown"

    def unfinished_error(self, table_name: str, txn: str, cause: str) -> WriteError:
        return WriteError(
            TableProblem(
                table_name,
                f"the commit {txn} into the {self.describe()} failed, and whether the catalog "
                f"took it could not be told: {cause}. Its data files are kept. Readers see the "
                "table before it or after it, never a part of it. The next run reads the table's "
                "head: a commit that landed is recognised (its batch follows the recorded one) "
                "and repeated without doubling a row; one that didn't has its files removed. The "
                "cursor did not move.",
                fix="fix the cause (the catalog's connection, most often) and run again.",
            )
        )

    def converted_from(self, plain_table_id: str | None) -> LakeHead | None:
        """The head of the Iceberg table a conversion of the plain table `plain_table_id` made,
        if no commit has followed it: a conversion whose recording didn't happen (the command
        killed after the snapshot landed) is recorded then instead of refused."""
        table = self._load()
        head = self._head(table) if table is not None else None
        record = _json(table.properties.get(_property(CONVERTED))) if table is not None else None
        if head is None or record is None or plain_table_id is None:
            return None
        if record.get("from") != plain_table_id or record.get("txn") != head.txn:
            return None
        return head

    def adopt(self, commit: Commit, files: list[DataFile]) -> LakeHead:
        """Make the plain Parquet table in this folder an Iceberg table: its data files, where
        they are, become the first snapshot, with `commit`'s batch, cursor and records (and
        `_converted`: which plain table, by which commit)."""
        if self._load() is not None:
            raise WriteError(
                TableProblem(
                    self.table_name,
                    f"{self.describe()} exists already, so there is nothing to convert.",
                    fix="run the table: it adds to that Iceberg table.",
                )
            )
        names = [f.name for f in files]
        table = self._create([(name, name) for name in names[-1:]])
        table_id, snapshot_id = self._swap(table, commit, LakeFacts(uri=self.uri), names)
        return LakeHead(
            table_id=str(table_id),
            txn=commit.txn,
            batch=commit.batch,
            cursor=commit.cursor,
            snapshot_id=snapshot_id,
        )

    def _swap(
        self, table: Table, commit: Commit, facts: LakeFacts, added: list[str]
    ) -> tuple[uuid.UUID, int]:
        current = table.current_snapshot()
        seen = facts.head.snapshot_id if facts.head is not None else None
        if (current.snapshot_id if current is not None else None) != seen:
            raise ConcurrentRunError("the table moved on since this run read it")
        transaction = _transaction(table)
        if added:
            every_file_replaced = set(commit.removes) >= set(self._files)
            _evolve(transaction, self._arrow_schema(added[0]), every_file_replaced)
        records = {_property(name): json.dumps(value) for name, value in commit.records.items()}
        if commit.replace_all:
            records[_property(SNAPSHOT)] = json.dumps({"batch": commit.batch, "txn": commit.txn})
        transaction.set_properties({**_TABLE_PROPERTIES, **_name_mapping(transaction), **records})
        summary = {
            SUMMARY + "txn": commit.txn,
            SUMMARY + "batch": str(commit.batch),
            **({SUMMARY + "cursor": commit.cursor} if commit.cursor is not None else {}),
        }
        if commit.removes:
            producer: Any = _merging_overwrite(transaction, table, summary)
        else:
            producer = transaction.update_snapshot(snapshot_properties=summary).merge_append()
        with producer as change:
            for name in commit.removes:
                change.delete_data_file(self._files[name])
            for path in added:
                location = f"{self._location_of(table)}/{path}"
                change.append_data_file(_data_file(table, transaction, location))
        expired = _expire(transaction, self.spec.keep_snapshots)
        committed = transaction.commit_transaction()
        snapshot = committed.current_snapshot()
        assert snapshot is not None
        # The data is committed: what is left is tidying, which the next commit may finish.
        with contextlib.suppress(Exception):
            self._delete_unreferenced(committed, expired, str(producer.commit_uuid))
        return committed.metadata.table_uuid, snapshot.snapshot_id

    def _create(self, adds: list[tuple[str, str]]) -> Table:
        """The table, created at its location with the schema of the first file it will hold."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError

        catalog = self._catalog_()
        namespace = self.name.rsplit(".", 1)[0]
        with contextlib.suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(namespace)
        schema = self._arrow_schema(adds[0][1]) if adds else pa.schema([])
        optional = pa.schema([field.with_nullable(True) for field in schema])
        table = catalog.create_table(
            self.name,
            schema=optional,
            location=self._iceberg_location(),
            properties={**_TABLE_PROPERTIES, "format-version": "2"},
        )
        self._table = table
        return table

    def _forget_lost_table(self) -> None:
        """Before a table whose metadata is gone is written anew: drop the catalog's entry, which
        names nothing, and the files of the folder's older copy, which no table will name."""
        self._catalog_().drop_table(self.name)
        for folder in (DATA, METADATA):
            with contextlib.suppress(FileNotFoundError, OSError):
                self.folder.fs.delete_dir(self.folder.join(folder))
        self._lost = False

    def _conflict(self, facts: LakeFacts) -> ConcurrentRunError:
        table = self._load()
        now = self._head(table) if table is not None else None
        what = f"commit {now.txn} (batch {now.batch})" if now is not None else "a change"
        read = f"snapshot {facts.head.snapshot_id}" if facts.head is not None else "no snapshot"
        return ConcurrentRunError(
            TableProblem(
                self.table_name,
                f"another run committed {what} to the {self.describe()} after this run read it "
                f"at {read}; the catalog refused this run's commit, so nothing was committed and "
                "the cursor did not move.",
                fix="run again: the next run continues from what that run recorded. To queue "
                "runs instead, limit the table's Dagster pool to 1.",
            )
        )

    # -- housekeeping ----------------------------------------------------------------------

    def _delete_unreferenced(self, table: Table, expired: list[Snapshot], commit_uuid: str) -> None:
        """Delete what no kept snapshot refers to any more: the files only the snapshots this
        commit expired referenced, and the manifests it wrote but merged away before committing
        (PyIceberg leaves those behind)."""
        for path in _only_expired(table, expired):
            with contextlib.suppress(Exception):
                table.io.delete(path)
        current = table.current_snapshot()
        assert current is not None
        listed = {os.path.basename(m.manifest_path) for m in current.manifests(table.io)}
        for name in self.folder.list_names(METADATA):
            if name.startswith(commit_uuid) and name.endswith(".avro") and name not in listed:
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.folder.fs.delete_file(self.folder.join(METADATA, name))
        if (current.sequence_number or 0) % SWEEP_EVERY == 0:
            self._delete_orphans(table)

    def _delete_orphans(self, table: Table) -> None:
        """Delete the files in `data/` and `metadata/` that nothing kept names: what a commit
        killed between its swap and its tidying left, or another tool's failed commit. Every
        kept snapshot's manifests are read, so this runs every `SWEEP_EVERY` commits. Files older
        than `ORPHAN_AGE` only, but for data files where the lock keeps other writers out. Only
        data files named as this package names them, manifests and metadata files: another
        engine's statistics or anything else is left alone."""
        import pyarrow.fs as pafs

        manifests, files = _referenced(table.io, _snapshots(table))
        named = [table.metadata_location, *manifests, *files]
        named += [entry.metadata_file for entry in table.metadata.metadata_log]
        named += [s.manifest_list for s in _snapshots(table)]
        # The table's files are all directly in its data/ and metadata/, with unique names
        # (`_named` refuses others), so names compare alike however a path is spelled.
        kept = {os.path.basename(path) for path in named}
        oldest = datetime.now(UTC) - ORPHAN_AGE
        for folder in (DATA, METADATA):
            selector = pafs.FileSelector(self.folder.join(folder), allow_not_found=True)
            for info in self.folder.fs.get_file_info(selector):
                young = info.mtime is not None and info.mtime > oldest
                ours = data_file(info.base_name) is not None or info.base_name.endswith(
                    (".avro", ".metadata.json")
                )
                # The lock keeps out this package's writers only: another engine's commit under
                # way may have written manifests already.
                unsafe = young and (folder == METADATA or not self._holds_lock())
                if not ours or info.base_name in kept or unsafe:
                    continue
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.folder.fs.delete_file(info.path)

    # -- the catalog -----------------------------------------------------------------------

    def _catalog_(self) -> Catalog:
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            properties = self.spec.catalog_properties()
            name = properties.pop("name", "incremental_assets")
            if not self.spec.catalog:  # the default SQLite file, in the lake's root
                self.folder.fs.create_dir(self.spec.path, recursive=True)
            try:
                self._catalog = load_catalog(name, **properties)
            except Exception as exc:
                raise self._catalog_error(exc) from None
        return self._catalog

    def _load(self) -> Table | None:
        """The table as the catalog has it; None if it has none, or names metadata that is gone
        (the table's folder deleted, or put back from a copy older than the catalog)."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        catalog = self._catalog_()
        try:
            table = catalog.load_table(self.name)
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except Exception as exc:
            if not _gone(exc):
                raise self._catalog_error(exc) from None
            self._lost = True
            return None
        self._lost = False
        return table

    def _catalog_error(self, exc: Exception) -> WriteError:
        cause = " ".join(str(exc).split("(Background on this error")[0].split())
        where = self.spec.catalog_properties().get("uri", "")
        return WriteError(
            TableProblem(
                self.table_name,
                f"the Iceberg catalog ({where}) could not be used to read {self.name}: {cause}. "
                "Nothing was written and the cursor did not move.",
                "lake.catalog",
                "fix the catalog's properties under lake.catalog (type, uri, credentials), or "
                "make it reachable from this process, and run again.",
            )
        )

    def _iceberg_location(self) -> str:
        return self.uri if "://" in self.uri else f"file://{self.uri}"

    def _location_of(self, table: Table) -> str:
        return table.metadata.location.rstrip("/")

    def _arrow_schema(self, path: str) -> pa.Schema:
        return pq.read_schema(self.folder.join(path), filesystem=self.folder.fs)

    def _holds_lock(self) -> bool:
        return self.spec.lock and self.folder.is_local

    def _delete_moved(self, txn: str) -> None:
        """Delete the files a commit of `txn` moved into `data/`: no snapshot refers to them."""
        for file in self.folder.list_data_files(DATA):
            if f"-{txn}-" in file.name:
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.folder.fs.delete_file(self.folder.join(DATA, file.name))


def _gone(exc: Exception) -> bool:
    """Whether reading a table's metadata file failed because it is missing or cut short (by a
    crash of a writer whose FileIO didn't sync it), not unreadable for another reason."""
    from pydantic import ValidationError

    if isinstance(exc, FileNotFoundError | json.JSONDecodeError):
        return True
    cause = exc.__cause__  # PyIceberg wraps pydantic's error in its own
    invalid = cause if isinstance(cause, ValidationError) else exc
    return isinstance(invalid, ValidationError) and all(
        e["type"] == "json_invalid" for e in invalid.errors()
    )


def _snapshots(table: Table | None) -> list[Snapshot]:
    return list(table.metadata.snapshots) if table is not None else []


def _txn_of(summary: Mapping[str, Any] | None) -> str | None:
    """The commit id of ours a snapshot's summary carries (none: another engine's)."""
    txn = (summary or {}).get(SUMMARY + "txn")
    return str(txn) if txn is not None else None


def _landed(table: Table | None, txn: str) -> bool:
    """Whether a commit of `txn` is part of the table: a kept snapshot made it, or the current
    one holds its files (an append's batch outlives the snapshot that added it)."""
    if any(_txn_of(s.summary) == txn for s in _snapshots(table)):
        return True
    current = table.current_snapshot() if table is not None else None
    if table is None or current is None:
        return False
    return any(
        f"-{txn}-" in os.path.basename(entry.data_file.file_path)
        for manifest in current.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    )


def _head_of(table_id: str, snapshot_id: int, summary: Mapping[str, Any] | None) -> LakeHead:
    """The head a snapshot names: the commit, batch and cursor of ours its summary carries."""
    txn, batch = _txn_of(summary), (summary or {}).get(SUMMARY + "batch")
    return LakeHead(
        table_id=table_id,
        # A snapshot another engine made carries no commit of ours: no run recorded it.
        txn=txn if txn is not None else f"snapshot {snapshot_id}",
        batch=int(batch) if batch is not None else -1,
        cursor=(summary or {}).get(SUMMARY + "cursor"),
        snapshot_id=snapshot_id,
    )


def _facts(
    uri: str,
    head: LakeHead | None,
    properties: Mapping[str, str],
    pending: bool,
    files: tuple[DataFile, ...] = (),
    schema: T.StructType | None = None,
) -> LakeFacts:
    replaced = _json(properties.get(_property(SNAPSHOT)))
    return LakeFacts(
        uri=uri,
        files=files,
        schema=schema,
        head=head,
        replaced_batch=None if replaced is None else int(replaced["batch"]),
        key=_json(properties.get(_property(KEY))),
        columns=_json(properties.get(_property(COLUMNS))),
        pending=pending,
    )


def _transaction(table: Table) -> Transaction:
    """A transaction that builds its table's metadata once per staged update.

    PyIceberg's rebuilds it, a deep copy of every kept snapshot, each time `table_metadata` is
    read, which a commit does some thirty times: most of a commit's time once the table keeps its
    100 snapshots. The metadata is a frozen model, and each staged update makes a new tuple of
    them, so a copy kept until then is the one PyIceberg would build.
    """
    from pyiceberg.table import Transaction

    class CachingTransaction(Transaction):
        _built: tuple[tuple[Any, ...], TableMetadata] | None = None

        @property
        def table_metadata(self) -> TableMetadata:
            if self._built is None or self._built[0] is not self._updates:
                self._built = (self._updates, super().table_metadata)
            return self._built[1]

    return CachingTransaction(table)


def _merging_overwrite(transaction: Transaction, table: Table, summary: dict[str, str]) -> Any:
    """An overwrite that merges manifests as `merge_append` does.

    PyIceberg 0.12 merges manifests on appends only, and an overwrite keeps the manifest of the
    entries it deleted: a merge table committed every minute would add a manifest or two per run,
    each read by every later run and commit. The merge is PyIceberg's own (`_ManifestMergeManager`,
    by the table's `commit.manifest*` properties); its classes are private, hence the exact pin.
    """
    from pyiceberg.table import TableProperties as P
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _ManifestMergeManager, _OverwriteFiles

    properties = transaction.table_metadata.properties
    target = int(properties.get(P.MANIFEST_TARGET_SIZE_BYTES, P.MANIFEST_TARGET_SIZE_BYTES_DEFAULT))
    min_count = int(properties.get(P.MANIFEST_MIN_MERGE_COUNT, P.MANIFEST_MIN_MERGE_COUNT_DEFAULT))

    class MergingOverwrite(_OverwriteFiles):
        def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
            merger = _ManifestMergeManager(target, min_count, True, self)
            return merger.merge_manifests(manifests)

    return MergingOverwrite(
        operation=Operation.OVERWRITE,
        transaction=transaction,
        io=table.io,
        snapshot_properties=summary,
    )


def _expire(transaction: Transaction, keep: int) -> list[Snapshot]:
    """Expire the oldest snapshots beyond `keep`, in the same commit; return them."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    metadata = transaction.table_metadata
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    snapshots = sorted(metadata.snapshots, key=lambda s: s.sequence_number or 0)
    expired = [
        s for s in snapshots[: max(0, len(snapshots) - keep)] if s.snapshot_id not in protected
    ]
    if expired:
        ExpireSnapshots(transaction).by_ids([s.snapshot_id for s in expired]).commit()
    return expired


def _only_expired(table: Table, expired: list[Snapshot]) -> set[str]:
    """The manifest lists, manifests and data files that only `expired` referenced.

    A table written by this package alone has one line of snapshots, and a manifest or data file
    a snapshot drops never comes back (data file names are unique): what the oldest kept snapshot
    doesn't list, no later one does, and the data files no kept snapshot holds are those deleted
    by that snapshot or by an expired one. So a few manifest lists are read, not every kept
    snapshot's manifests. With other branches or tags, every kept snapshot is read.
    """
    from pyiceberg.manifest import ManifestEntryStatus

    if not expired:
        return set()
    io = table.io
    kept = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    doomed = {s.manifest_list for s in expired}
    if set(table.metadata.refs) != {"main"}:
        old_manifests, old_files = _referenced(io, expired)
        kept_manifests, kept_files = _referenced(io, kept)
        return doomed | (old_manifests - kept_manifests) | (old_files - kept_files)
    oldest = kept[0].manifests(io)
    listed = {m.manifest_path for m in oldest}
    for snapshot, manifests in [*((s, s.manifests(io)) for s in expired), (kept[0], oldest)]:
        for manifest in manifests:
            if manifest.manifest_path not in listed:
                doomed.add(manifest.manifest_path)
            if manifest.added_snapshot_id == snapshot.snapshot_id and manifest.deleted_files_count:
                doomed.update(
                    entry.data_file.file_path
                    for entry in manifest.fetch_manifest_entry(io, discard_deleted=False)
                    if entry.status == ManifestEntryStatus.DELETED
                )
    return doomed


def _referenced(io: FileIO, snapshots: list[Snapshot]) -> tuple[set[str], set[str]]:
    """The manifests and the live data files of `snapshots`."""
    manifests = {m for s in snapshots for m in s.manifests(io)}
    files = {
        entry.data_file.file_path
        for manifest in manifests
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True)
    }
    return {m.manifest_path for m in manifests}, files


def _data_file(table: Table, transaction: Transaction, location: str) -> IcebergFile:
    """The Iceberg entry of a data file, with its column statistics.

    Values Python's dates can't hold (a PostgreSQL date BC) make PyIceberg's statistics fail;
    such a file is entered with counts only, which readers can still read, just not prune.
    """
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    metadata = transaction.table_metadata
    try:
        return parquet_file_to_data_file(table.io, metadata, location)
    except (ValueError, OverflowError):
        counts = {**metadata.properties, "write.metadata.metrics.default": "counts"}
        return parquet_file_to_data_file(
            table.io, metadata.model_copy(update={"properties": counts}), location
        )


def _evolve(transaction: Transaction, schema: pa.Schema, every_file_replaced: bool) -> None:
    """The table's schema after this commit: columns added, types widened.

    A type Iceberg can't promote in place (a decimal's scale, an integer to a decimal, an integer
    narrowed) is changed only when this commit replaces every file the table holds, so that no
    file of the new snapshot has the old type; older snapshots keep their own schema.
    """
    from pyiceberg.catalog import Catalog

    optional = pa.schema([field.with_nullable(True) for field in schema])
    with transaction.update_schema(allow_incompatible_changes=every_file_replaced) as update:
        update.union_by_name(optional)
        if not every_file_replaced:
            return
        # A union keeps a wider type the files no longer have (an integer narrowed at the
        # source): with every file replaced, the column takes its files' type, keeping its id so
        # that older snapshots still read their files. (The conversion union_by_name uses.)
        held = {f.name: f for f in transaction.table_metadata.schema().fields}
        for field in Catalog._convert_schema_if_needed(optional).fields:
            before = held.get(field.name)
            if before is not None and before.field_type != field.field_type:
                update.update_column(field.name, field_type=field.field_type)


def _name_mapping(transaction: Transaction) -> dict[str, str]:
    """Spark writes no Iceberg field ids: readers find the columns by name, in the schema as this
    commit leaves it (a table created empty gains its columns later)."""
    mapping = transaction.table_metadata.schema().name_mapping
    return {"schema.name-mapping.default": mapping.model_dump_json()}


def _property(record: str) -> str:
    """The table property holding a writers' record (`_key` -> `incremental-assets.key`)."""
    return PROPERTY + record.lstrip("_")


def _json(text: str | None) -> dict[str, Any] | None:
    return None if not text else dict(json.loads(text))


def _age(txn: str) -> timedelta:
    """How old a commit id is (it starts with its UTC time)."""
    try:
        started = datetime.strptime(txn[:15], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return ORPHAN_AGE
    return datetime.now(UTC) - started
