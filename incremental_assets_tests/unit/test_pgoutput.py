"""pgoutput's messages decoded without a server, from bytes packed as PostgreSQL's protocol
documentation lays them out (the real server's are in test_log_capture.py)."""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pytest

from incremental_assets.cursor import format_lsn, parse_lsn
from incremental_assets.sources.pgoutput import (
    UNCHANGED,
    Begin,
    Column,
    Commit,
    DecodeError,
    Delete,
    Insert,
    Relation,
    Truncate,
    Update,
    decode,
)

AT = 817_862_400_000_000  # 2025-12-01 UTC, in microseconds since 2000-01-01


def _text(value: str) -> bytes:
    return value.encode() + b"\0"


def _tuple(*values: str | object | None) -> bytes:
    out = struct.pack("!h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is UNCHANGED:
            out += b"u"
        else:
            data = str(value).encode()
            out += b"t" + struct.pack("!i", len(data)) + data
    return out


def test_a_transactions_begin_and_commit_carry_its_lsns_and_time() -> None:
    begin = decode(b"B" + struct.pack("!QqI", 0x16_B374D848, AT, 731))
    commit = decode(b"C" + struct.pack("!BQQq", 0, 0x16_B374D848, 0x16_B374D878, AT))

    assert begin == Begin(0x16_B374D848, datetime(2025, 12, 1, tzinfo=UTC), 731)
    assert commit == Commit(0x16_B374D848, 0x16_B374D878, datetime(2025, 12, 1, tzinfo=UTC))


def test_a_relation_names_its_columns_and_key() -> None:
    body = struct.pack("!I", 16_385) + _text("shop") + _text("orders") + b"d"
    body += struct.pack("!h", 2)
    body += struct.pack("!B", 1) + _text("id") + struct.pack("!Ii", 20, -1)
    body += struct.pack("!B", 0) + _text("note") + struct.pack("!Ii", 25, -1)

    relation = decode(b"R" + body)

    assert relation == Relation(
        16_385,
        "shop",
        "orders",
        "d",
        (Column("id", 20, -1, True), Column("note", 25, -1, False)),
    )


def test_rows_arrive_as_text_null_or_unchanged_toast() -> None:
    insert = decode(b"I" + struct.pack("!I", 7) + b"N" + _tuple("1", None, "a\0b"))
    update = decode(b"U" + struct.pack("!I", 7) + b"N" + _tuple("1", UNCHANGED))
    keyed = decode(b"U" + struct.pack("!I", 7) + b"K" + _tuple("1") + b"N" + _tuple("2", "x"))
    full = decode(b"D" + struct.pack("!I", 7) + b"O" + _tuple("2", "x"))

    assert insert == Insert(7, ("1", None, "a\0b"))
    assert update == Update(7, ("1", UNCHANGED), None, False)
    assert keyed == Update(7, ("2", "x"), ("1",), True)
    assert full == Delete(7, ("2", "x"), False)


def test_a_truncate_names_its_tables_and_options() -> None:
    message = decode(b"T" + struct.pack("!IB", 2, 3) + struct.pack("!II", 7, 9))

    assert message == Truncate((7, 9), cascade=True, restart_identity=True)


def test_origin_type_and_logical_messages_are_skipped() -> None:
    assert decode(b"O" + struct.pack("!Q", 1) + _text("node")) is None


@pytest.mark.parametrize(
    "data",
    [
        b"B\x00",
        b"I" + struct.pack("!I", 7) + b"X",
        b"Z",
        b"I" + struct.pack("!I", 7) + b"N\x00\x01b",
    ],
)
def test_bytes_that_arent_a_message_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


def test_an_lsn_reads_and_writes_as_postgresql_spells_it() -> None:
    assert parse_lsn("16/B374D848") == 0x16_B374D848
    assert format_lsn(0x16_B374D848) == "16/B374D848"
    assert format_lsn(parse_lsn("0/0")) == "0/0"
    with pytest.raises(ValueError, match="not an LSN"):
        parse_lsn("16B374D848")
