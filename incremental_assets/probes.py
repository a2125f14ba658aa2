"""Cheap "is there anything new?" probes for sensors: plain DB-API and file listings, no JVM.

Each probe returns a change marker (a string that differs whenever there is something new to
load, used as the run key) or None when the source holds nothing past the stored state.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlparse

import psycopg
import pyarrow.fs as pafs

from incremental_assets.cursor import CursorType, parse_cursor
from incremental_assets.errors import SourceError
from incremental_assets.results import StoredState
from incremental_assets.spec import FilesSourceSpec, JdbcSourceSpec, TableSpec
from incremental_assets.window import POSTGRES

# libpq accepts these JDBC URL parameters under the same names.
_SHARED_PARAMETERS = {
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "options",
    "application_name",
}


def connect_args(source: JdbcSourceSpec) -> dict[str, Any]:
    """psycopg connection arguments from a `jdbc:postgresql://host[:port][,host2...]/db?...` URL."""
    url = urlparse(source.url.removeprefix("jdbc:"))
    hosts = [h.rsplit(":", 1) if ":" in h else [h, "5432"] for h in url.netloc.split(",") if h]
    params = {k: v for k, v in parse_qsl(url.query) if k in _SHARED_PARAMETERS}
    params.update({k: v for k, v in source.properties.items() if k in _SHARED_PARAMETERS})
    return {
        "host": ",".join(h for h, _ in hosts) or "localhost",
        "port": ",".join(p for _, p in hosts) or "5432",
        "dbname": url.path.lstrip("/") or None,
        "user": source.user,
        "password": source.password,
        "connect_timeout": params.pop("connect_timeout", "10"),
        "application_name": params.pop("application_name", "incremental_assets sensor"),
        **params,
    }


def probe_source(table: TableSpec, stored: StoredState) -> str | None:
    if isinstance(table.source, FilesSourceSpec):
        return _probe_files(table, table.source)
    return _probe_postgres(table, table.source, stored)


def _probe_postgres(table: TableSpec, source: JdbcSourceSpec, stored: StoredState) -> str | None:
    relation = f"({table.query}) AS q" if table.query is not None else str(table.table)
    try:
        with psycopg.connect(**connect_args(source), autocommit=True) as conn:
            if table.cursor is None:
                return _table_changes(conn, table, stored)
            return _newest_cursor(conn, table, relation, stored)
    except psycopg.Error as exc:
        message = " ".join(str(exc).split())
        raise SourceError(
            f"Table '{table.name}' (source '{source.name}', {source.redacted_url()}): the sensor's probe "
            f"failed: {message}. Fix the connection settings of the source, or stop the sensor."
        ) from None


def _newest_cursor(
    conn: psycopg.Connection, table: TableSpec, relation: str, stored: StoredState
) -> str | None:
    assert table.cursor is not None
    column = POSTGRES.quote(table.cursor.column)
    where = "TRUE"
    if stored.cursor is not None and stored.cursor_type is not None:
        previous = parse_cursor(stored.cursor_type, stored.cursor)
        where = f"{column} > {POSTGRES.literal(stored.cursor_type, previous)}"
    kind = stored.cursor_type or table.cursor.declared_type or CursorType.STRING
    row = conn.execute(
        f"SELECT {POSTGRES.wire(kind, f'max({column})')} FROM {relation} WHERE {where}"
    ).fetchone()  # type: ignore[call-overload]
    newest = row[0] if row else None
    return None if newest is None else f"{table.name}:{newest}"


def _table_changes(conn: psycopg.Connection, table: TableSpec, stored: StoredState) -> str | None:
    """A table without a cursor: PostgreSQL's count of inserted, updated and deleted rows."""
    if table.query is not None:
        return None if stored.run_id else f"{table.name}:first"
    row = conn.execute(
        "SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relid = CAST(%s AS regclass)",
        (table.table,),
    ).fetchone()
    return f"{table.name}:changes:{row[0] if row else 0}"


def _probe_files(table: TableSpec, source: FilesSourceSpec) -> str | None:
    """The newest modification time and the number of files under the table's folder."""
    path = f"{source.path.rstrip('/')}/{(table.table or '').lstrip('/')}"
    uri = "s3://" + path[len("s3a://") :] if path.startswith("s3a://") else path
    fs, root = pafs.FileSystem.from_uri(uri)
    infos = [
        i
        for i in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        if i.type == pafs.FileType.File and not i.base_name.startswith(("_", "."))
    ]
    if not infos:
        return None
    newest = max(i.mtime_ns or 0 for i in infos)
    return f"{table.name}:files:{newest}:{len(infos)}"
