"""The names of a lake table's data files: which batch or bucket a file holds, and its commit.

    part-<group>-<txn>-<n>.parquet

`<txn>` is the commit's id (UTC time, then random hex, so names sort by commit), `<n>` numbers
the commit's files, and `<group>` says what the file holds: `b<batch>` (append, full_refresh),
`h<i>of<n>` (hash bucket i of n) or `r[pn]<i>w<width>` (range i of an integer key). Numbers are
zero-padded to a minimum width, never cut to it: a 100,001st file of a commit, a batch past 10^12
or a range of keys near 2^63 only make the number longer. Both lake formats name files this way,
so a file says what it holds wherever it is listed.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

DATA_FILE = re.compile(
    r"^part-(?P<group>b\d{12,}|h\d{5}of\d{5}|r[pn]\d{12,}w\d+)-(?P<txn>[0-9A-Za-z]+)-\d{5,}\.parquet$"
)
_HASH_GROUP = re.compile(r"^h(\d{5})of(\d{5})$")
_RANGE_GROUP = re.compile(r"^r([pn])(\d{12,})w(\d+)$")

SchemeKind = Literal["hash", "range"]


# A commit id: its UTC time (`TXN_TIME`), then 8 random lowercase hex digits.
TXN_TIME = "%Y%m%dT%H%M%S"
_TXN = re.compile(r"(?P<time>\d{8}T\d{6})[0-9a-f]{8}")


def new_txn() -> str:
    """Sortable, unique commit id: UTC time then random hex."""
    return datetime.now(UTC).strftime(TXN_TIME) + secrets.token_hex(4)


def is_txn(text: str) -> bool:
    """Whether `text` is a commit id as `new_txn` makes them, a real time included."""
    return txn_time(text) is not None


def txn_time(text: str) -> datetime | None:
    """When the commit id `text` was made; None if it is not one."""
    match = _TXN.fullmatch(text)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group("time"), TXN_TIME).replace(tzinfo=UTC)
    except ValueError:
        return None


def batch_group(batch: int) -> str:
    return f"b{batch:012d}"


def data_file_name(group: str, txn: str, index: int) -> str:
    return f"part-{group}-{txn}-{index:05d}.parquet"


@dataclass(frozen=True)
class BucketScheme:
    """How a merge table's keys map to buckets: `hash` into `size` buckets, or `range` of `size`
    keys."""

    kind: SchemeKind
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
        sign = -1 if match.group(1) == "n" else 1
        return BucketScheme("range", int(match.group(3))), sign * index
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


def data_file(name: str, size: int = 0) -> DataFile | None:
    """The data file `name` names, or None for any other file."""
    match = DATA_FILE.match(name)
    return DataFile(name, match.group("group"), size) if match else None
