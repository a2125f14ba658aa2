"""PostgreSQL's logical replication messages (the `pgoutput` plugin, protocol version 1), decoded
from the bytes `pg_logical_slot_peek_binary_changes` returns: pure Python.

    B  Begin      the transaction's commit LSN (final), time and xid
    R  Relation   a table's id, name, replica identity and columns (sent before its first
                  change in a session, and again after it changes)
    I  Insert     the new row
    U  Update     the new row, and the old key ('K') or the old row ('O', replica identity FULL)
    D  Delete     the old key or the old row
    T  Truncate   the tables truncated
    C  Commit     the commit's LSN and the transaction's end
    O, Y, M       origin, type and logical messages: skipped

Values arrive as text ('t'), NULL ('n'), or unchanged TOAST ('u': a large value the update did
not touch, sent without its value unless the old row carries it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class Unchanged:
    """An unchanged TOAST value: the update did not send it."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged()
Value = str | None | Unchanged


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    type_modifier: int
    key: bool  # part of the replica identity


@dataclass(frozen=True)
class Relation:
    oid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the commit's LSN
    committed_at: datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    committed_at: datetime


@dataclass(frozen=True)
class Insert:
    relation: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relation: int
    new: tuple[Value, ...]
    old: tuple[Value, ...] | None  # the old row ('O') or its key columns ('K'), if sent
    old_is_key: bool


@dataclass(frozen=True)
class Delete:
    relation: int
    old: tuple[Value, ...]
    old_is_key: bool


@dataclass(frozen=True)
class Truncate:
    relations: tuple[int, ...]
    cascade: bool
    restart_identity: bool


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate


class DecodeError(ValueError):
    """Bytes that aren't a pgoutput message this decoder reads."""


class _Reader:
    def __init__(self, data: bytes, encoding: str) -> None:
        self.data, self.at, self.encoding = data, 0, encoding

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise DecodeError(f"message ends early ({len(self.data)} bytes)")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def byte(self) -> str:
        return chr(self.take("!B"))

    def text(self) -> str:
        end = self.data.find(b"\0", self.at)
        if end < 0:
            raise DecodeError("a string without its terminator")
        value = self.data[self.at : end].decode(self.encoding)
        self.at = end + 1
        return value

    def raw(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise DecodeError("a value ends early")
        value = self.data[self.at : self.at + size]
        self.at += size
        return value

    def tuple(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.take("!h")):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            elif kind == "t":
                values.append(self.raw(self.take("!i")).decode(self.encoding))
            else:
                raise DecodeError(f"a value of kind {kind!r} (binary values are not asked for)")
        return tuple(values)


def _time(micros: int) -> datetime:
    return PG_EPOCH + timedelta(microseconds=micros)


def decode(data: bytes, encoding: str = "utf-8") -> Message | None:
    """One message (None: a kind this package doesn't use); its text is in the database's
    encoding (`encoding`, as Python names it)."""
    reader = _Reader(bytes(data), encoding)
    kind = reader.byte()
    if kind == "B":
        lsn, at, xid = reader.take("!Q"), reader.take("!q"), reader.take("!I")
        return Begin(lsn, _time(at), xid)
    if kind == "C":
        reader.take("!B")  # flags, unused
        commit, end, at = reader.take("!Q"), reader.take("!Q"), reader.take("!q")
        return Commit(commit, end, _time(at))
    if kind == "R":
        oid, namespace, name = reader.take("!I"), reader.text(), reader.text()
        identity = reader.byte()
        columns = []
        for _ in range(reader.take("!h")):
            flags = reader.take("!B")
            column = reader.text()
            columns.append(Column(column, reader.take("!I"), reader.take("!i"), bool(flags & 1)))
        return Relation(oid, namespace or "pg_catalog", name, identity, tuple(columns))
    if kind == "I":
        oid = reader.take("!I")
        if reader.byte() != "N":
            raise DecodeError("an insert without its new row")
        return Insert(oid, reader.tuple())
    if kind == "U":
        oid = reader.take("!I")
        marker, old = reader.byte(), None
        if marker in ("K", "O"):
            old = reader.tuple()
            marker_new = reader.byte()
        else:
            marker_new = marker
        if marker_new != "N":
            raise DecodeError("an update without its new row")
        return Update(oid, reader.tuple(), old, marker == "K")
    if kind == "D":
        oid = reader.take("!I")
        marker = reader.byte()
        if marker not in ("K", "O"):
            raise DecodeError("a delete without its old row or key")
        return Delete(oid, reader.tuple(), marker == "K")
    if kind == "T":
        count, options = reader.take("!I"), reader.take("!B")
        oids = tuple(reader.take("!I") for _ in range(count))
        return Truncate(oids, bool(options & 1), bool(options & 2))
    if kind in ("O", "Y", "M"):
        return None
    raise DecodeError(f"a message of kind {kind!r}")


# PostgreSQL's server encodings as Python names them, where the names differ
_ENCODINGS = {
    "UTF8": "utf-8",
    "SQL_ASCII": "ascii",
    "LATIN1": "iso8859_1",
    "LATIN2": "iso8859_2",
    "LATIN3": "iso8859_3",
    "LATIN4": "iso8859_4",
    "LATIN5": "iso8859_9",
    "LATIN6": "iso8859_10",
    "LATIN7": "iso8859_13",
    "LATIN8": "iso8859_14",
    "LATIN9": "iso8859_15",
    "LATIN10": "iso8859_16",
}


def python_encoding(server_encoding: str) -> str:
    """The Python codec of a PostgreSQL server encoding (`SHOW server_encoding`): WIN1252 is
    cp1252, EUC_JP euc_jp, and so on."""
    name = server_encoding.upper()
    if name in _ENCODINGS:
        return _ENCODINGS[name]
    return f"cp{name[3:]}" if name.startswith("WIN") else name.lower()
