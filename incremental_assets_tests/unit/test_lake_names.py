from __future__ import annotations

import os
from pathlib import Path

import pytest

from incremental_assets.lake import BucketScheme, Commit, DataFile, LakeFacts
from incremental_assets.lake.names import is_txn, new_txn, parse_bucket
from incremental_assets.lake.parquet import ParquetLake
from incremental_assets.writers.base import WritePlan
from incremental_assets.writers.buckets import choose_scheme


@pytest.mark.parametrize(
    ("scheme", "index", "group"),
    [
        (BucketScheme("hash", 16), 3, "h00003of00016"),
        (BucketScheme("range", 1_000_000), 12, "rp000000000012w1000000"),
        (BucketScheme("range", 500), -2, "rn000000000002w500"),
    ],
)
def test_bucket_groups_round_trip_through_file_names(
    scheme: BucketScheme, index: int, group: str
) -> None:
    assert scheme.group(index) == group
    assert parse_bucket(group) == (scheme, index)
    assert DataFile(f"part-{group}-20260101T000000abcd-00000.parquet", group).bucket == (
        scheme,
        index,
    )


def test_a_commit_id_is_known_by_its_pattern() -> None:
    assert is_txn(new_txn())
    assert not is_txn("keep-me") and not is_txn(new_txn() + "0")


def _plan() -> WritePlan:
    return WritePlan(
        lake=ParquetLake("/tmp/x"),
        facts=LakeFacts(uri="/tmp/x"),
        txn="t",
        batch=1,
        cursor=None,
        replace_all=True,
        primary_key=("id",),
        cursor_column="c",
        delete_column=None,
        buckets=16,
        bucket_rows=1_000_000,
        compression="zstd",
        max_rows_per_file=10,
    )


@pytest.mark.parametrize(
    ("rows", "low", "high", "expected"),
    [
        (
            10_000_000,
            1,
            10_000_000,
            BucketScheme("range", 1_000_000),
        ),  # dense keys: ~1M rows a range
        (100, 1, 100, BucketScheme("range", 1_000_000)),  # a small first load: still wide ranges
        # sparse keys: ranges widen so each still holds ~1M rows
        (10_000_000, 1, 10**12, BucketScheme("range", 100_000_000_000)),
        (10, None, None, BucketScheme("hash", 16)),  # no integer key
        # ids over the bigint range in a small load: a range would be wider than a bigint
        (2, 7, 6_700_000_000_000_000_000, BucketScheme("hash", 16)),
        (2, -(2**63), 2**63 - 1, BucketScheme("hash", 16)),
    ],
)
def test_the_scheme_follows_the_key(
    rows: int, low: int | None, high: int | None, expected: BucketScheme
) -> None:
    assert choose_scheme(_plan(), rows, low, high) == expected


@pytest.mark.parametrize(
    "name",
    [
        "part-b000000000001-20260101T000000abcd-100000.parquet",  # a commit's 100,001st file
        "part-b1000000000000-20260101T000000abcd-00000.parquet",  # batch 10^12
        "part-rp1844674407370w10-20260101T000000abcd-00000.parquet",  # keys near 2^63
        "part-rn1844674407370w10-20260101T000000abcd-00000.parquet",
    ],
)
def test_data_files_are_found_however_long_their_numbers_grow(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"")

    assert [f.name for f in ParquetLake(str(tmp_path)).folder.list_data_files()] == [name]


def test_range_groups_of_keys_near_two_to_the_63_round_trip() -> None:
    scheme, index = BucketScheme("range", 10), -(2**63) // 10
    assert parse_bucket(scheme.group(index)) == (scheme, index)


class _Recorded:
    """The lake's file system, recording the moves and removals it is asked for."""

    def __init__(self, fs: object, events: list[tuple[str, str]]) -> None:
        self.fs, self.events = fs, events

    def __getattr__(self, name: str) -> object:
        return getattr(self.fs, name)

    def move(self, src: str, dst: str) -> None:
        self.events.append(("move", os.path.basename(dst)))
        self.fs.move(src, dst)  # type: ignore[attr-defined]

    def delete_file(self, path: str) -> None:
        self.events.append(("delete", os.path.basename(path)))
        self.fs.delete_file(path)  # type: ignore[attr-defined]


def test_a_commit_makes_new_files_durable_before_its_journal_and_its_renames_before_removals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a power cut could undo: the order of fsyncs, the journal, renames and removals."""
    table = tmp_path / "t"
    table.mkdir()
    old = table / "part-b000000000001-20260101T000000aaaa-00000.parquet"
    old.write_bytes(b"old")
    txn, new = "20260102T000000bbbb", "part-b000000000002-20260102T000000bbbb-00000.parquet"
    staged = table / "_staging" / txn / "data"
    staged.mkdir(parents=True)
    (staged / "x.parquet").write_bytes(b"new")
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    lake = ParquetLake(str(table))
    lake.folder.fs = _Recorded(lake.folder.fs, events)

    commit = Commit(
        txn=txn,
        batch=2,
        replace_all=False,
        cursor=None,
        adds=[("data/x.parquet", new)],
        removes=[old.name],
    )
    lake.commit(commit, LakeFacts(uri=lake.uri, files=(DataFile(old.name, "b000000000001"),)))

    journal = next(i for i, e in enumerate(events) if e[0] == "replace" and "_journal" in e[1])
    assert ("fsync", str(staged / "x.parquet")) in events[:journal]
    assert ("fsync", str(staged)) in events[:journal]
    move, removal = events.index(("move", new)), events.index(("delete", old.name))
    assert journal < move < removal
    assert ("fsync", str(table)) in events[move:removal]
    assert (table / new).read_bytes() == b"new" and not old.exists()
