"""Reading an Iceberg table's metadata: its catalog entry, then its current metadata file.

Two readers give the same `TableState`:

* `read_quickly`, with the standard library alone, for the lake's own SQLite catalog on a local
  disk: a run with nothing new reads its table this way, without importing PyIceberg and
  SQLAlchemy (most of a second). It answers None whenever it can't be sure (another catalog, a
  file it can't read), and the caller reads through PyIceberg;
* `read_state`, through PyIceberg, for every catalog.

Both refuse the same tables the same way: a catalog entry whose metadata is at another place
than the lake expects, or can't be read, is `Misplaced`, never taken for a missing table (it may
be another lake's table in a shared catalog, or this lake's before it was copied).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from incremental_assets.errors import TableProblem, WriteError
from incremental_assets.lake.files import local_path
from incremental_assets.lake.iceberg.catalog import IcebergCatalog
from incremental_assets.lake.iceberg.records import TableState, state_from_json

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


@dataclass(frozen=True)
class Misplaced:
    """The catalog names the table, but its metadata is not this lake's table: why."""

    reason: str


@dataclass(frozen=True)
class Absent:
    """The catalog has no such table."""


ABSENT = Absent()
Found = TableState | Misplaced | Absent


def split_identifier(identifier: str) -> tuple[str, str]:
    """`ns.table` (or `a.b.table`) as the namespace and the table's name."""
    namespace, _, name = identifier.rpartition(".")
    return namespace, name


def expected_location(table_uri: str) -> str:
    """Where the lake keeps the table, as Iceberg writes locations (`file:` for local paths)."""
    return table_uri if "://" in table_uri else f"file:{table_uri}"


def same_location(found: str, table_uri: str) -> bool:
    return local_path(found.rstrip("/")) == local_path(expected_location(table_uri).rstrip("/"))


def misplacement(state: TableState, table_uri: str) -> Misplaced | None:
    if same_location(state.location, table_uri):
        return None
    return Misplaced(
        f"the catalog's entry names a table at {state.location}, not at {table_uri} (the lake "
        "was copied or moved, Iceberg locations being absolute, or the name is another lake's "
        "table)"
    )


def read_quickly(catalog: IcebergCatalog, identifier: str) -> Found | None:
    """The table's state read with the standard library; None when it can't be read that way."""
    if catalog.sqlite_path is None:
        return None
    namespace, name = split_identifier(identifier)
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{catalog.sqlite_path}?mode=ro", uri=True)
        ) as db:
            row = db.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? "
                "AND table_namespace = ? AND table_name = ? "
                "AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')",
                (catalog.name, namespace, name),
            ).fetchone()
    except sqlite3.Error:
        return None
    if row is None:
        return ABSENT
    location = str(row[0])
    if "://" in location and not location.startswith("file:"):
        return None
    try:
        with open(local_path(location), "rb") as file:
            metadata = _parsed(file.read(), location)
    except (OSError, ValueError):
        return None  # PyIceberg says what is wrong with it
    return state_from_json(metadata, location)


def _parsed(data: bytes, location: str) -> Any:
    return json.loads(gzip.decompress(data) if location.endswith(".gz.metadata.json") else data)


def read_state(catalog: IcebergCatalog, identifier: str) -> Found:
    """The table's state through PyIceberg."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    client = pyiceberg_catalog(catalog)
    try:
        table = client.load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        return ABSENT
    except Exception as exc:
        if not _unreadable(exc):
            raise catalog_error(catalog, identifier, exc) from None
        return Misplaced(
            f"the catalog's entry names metadata that can't be read ({_cause(catalog, exc)}): "
            "the table's folder was deleted, or put back from a copy older than the catalog"
        )
    # pydantic's own serializer: PyIceberg's refuses format v3 (it doesn't write v3 tables).
    text = BaseModel.model_dump_json(table.metadata, by_alias=True, exclude_none=True)
    return state_from_json(json.loads(text), table.metadata_location)


_CLIENTS: dict[tuple[str, str], Catalog] = {}


def pyiceberg_catalog(catalog: IcebergCatalog) -> Catalog:
    """PyIceberg's client of the catalog, made once per process."""
    key = (catalog.name, json.dumps(catalog.pyiceberg, sort_keys=True))
    client = _CLIENTS.get(key)
    if client is None:
        from pyiceberg.catalog import load_catalog

        try:
            client = load_catalog(catalog.name, **catalog.pyiceberg)
        except Exception as exc:
            raise catalog_error(catalog, "", exc) from None
        _CLIENTS[key] = client
    return client


def catalog_error(catalog: IcebergCatalog, identifier: str, exc: BaseException) -> WriteError:
    what = f" to read {identifier}" if identifier else ""
    return WriteError(
        TableProblem(
            identifier.rpartition(".")[2] or catalog.name,
            f"the Iceberg catalog ({catalog.describe()}) could not be used{what}: "
            f"{_cause(catalog, exc)}. Nothing was written and the cursor did not move.",
            "lake.catalog",
            "fix the catalog's properties under lake.catalog (type, uri, credentials), or make "
            "it reachable from this process, and run again.",
        )
    )


def _cause(catalog: IcebergCatalog, exc: BaseException) -> str:
    text = " ".join(str(exc).split("(Background on this error")[0].split())
    return catalog.redact(text or type(exc).__name__)


def _unreadable(exc: BaseException) -> bool:
    """Whether loading a table failed on its metadata file (missing, cut short, not JSON), not
    on the catalog."""
    from pydantic import ValidationError

    if isinstance(exc, FileNotFoundError | json.JSONDecodeError | ValidationError):
        return True
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, FileNotFoundError | json.JSONDecodeError | ValidationError)
