"""`TableSettings`: the properties an Iceberg table is made with, and the ones an existing table
is brought to when the configuration changes (`commit_plan.plan_commit`); `partition_spec`: how a
merge table is partitioned by its key."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.lake.iceberg.partitions import (
    PARTITION_ROWS,
    consistent_with,
    partition_spec,
)
from incremental_assets.lake.iceberg.properties import MERGE_MODES, TableSettings

LONG = 2**63 - 1


@pytest.mark.parametrize(
    ("merge", "writes", "version", "expected_version", "mode"),
    [
        (True, "position_deletes", None, "2", "merge-on-read"),
        (True, "deletion_vectors", None, "3", "merge-on-read"),
        (True, "copy_on_write", None, "2", "copy-on-write"),
        (True, "position_deletes", 3, "3", "merge-on-read"),  # no table goes back to v2
        (False, "deletion_vectors", None, "2", None),  # an append table writes no deletes
        (False, "position_deletes", 3, "3", None),
    ],
)
def test_a_table_is_made_in_the_format_and_merge_mode_its_setting_needs(
    merge: bool, writes: str, version: int | None, expected_version: str, mode: str | None
) -> None:
    settings = TableSettings.of("zstd", merge, (), writes, version)  # type: ignore[arg-type]

    assert settings.properties["format-version"] == expected_version
    assert {settings.properties.get(m) for m in MERGE_MODES} == {mode}
    assert settings.properties["write.parquet.compression-codec"] == "zstd"


def test_an_existing_table_gets_only_the_changed_properties_and_its_version_only_rises() -> None:
    vectors = TableSettings.of("zstd", True, (), "deletion_vectors")
    held = dict(vectors.properties)
    del held["format-version"]  # a reserved property: the metadata file keeps it apart

    assert vectors.changes_to(held, 3) == {}
    assert vectors.changes_to(held, 2) == {"format-version": "3"}
    cow = TableSettings.of("snappy", True, (), "copy_on_write", 3)
    assert cow.changes_to(held, 3) == {
        **dict.fromkeys(MERGE_MODES, "copy-on-write"),
        "write.parquet.compression-codec": "snappy",
    }
    assert TableSettings.of("zstd", True).changes_to(held, 3) == {}  # v3 stays v3


@pytest.mark.parametrize(
    ("rows", "key_range", "settings", "expected"),
    [
        (1_000_000, (1, 1_000_000), {}, ()),  # one partition's rows: not partitioned
        (10_000_000, (1, 10_000_000), {}, ("truncate(2000000, `id`)",)),
        (10_000_000, (1, 20_000_000), {}, ("truncate(4000000, `id`)",)),  # sparse keys
        (1_000_000, (1, 1_000_000), {"bucket_rows": 100_000}, ("truncate(100000, `id`)",)),
        (10_000_000, None, {}, ("bucket(5, `id`)",)),
        (1_000_000, None, {}, ()),
        (1_000_000, None, {"buckets": 8}, ("bucket(8, `id`)",)),
        (10_000_000, None, {"bucketable": False}, ()),  # a key `bucket` can't take
        # Iceberg's truncate width is a 32-bit int: the widest range it can express, ...
        (2, (0, 2**31 - 2), {"bucket_rows": 2}, ("truncate(2147483647, `id`)",)),
        # ... and past it, hash buckets of the key, as many as the rows per partition give.
        (4_000_001, (0, 8_000_000_000), {}, ("bucket(2, `id`)",)),
        (5_002, (1, 9 * 10**18), {"bucket_rows": 10}, ("bucket(500, `id`)",)),
        (6, (-LONG - 1, LONG), {"bucket_rows": 2}, ("bucket(3, `id`)",)),
        (4_000_000, (1, 8_000_000_000), {}, ("bucket(2, `id`)",)),  # dense, and one far outlier
        (2, (0, 2**31 - 1), {"bucket_rows": 2}, ()),  # one bucket's rows: not partitioned
        (10_000_000, (0, LONG), {"bucketable": False}, ()),
    ],
)
def test_a_partition_holds_about_partition_rows_rows_unless_the_table_says(
    rows: int,
    key_range: tuple[int, int] | None,
    settings: dict[str, object],
    expected: tuple[str, ...],
) -> None:
    options = {"bucketable": True, **settings}

    assert partition_spec("id", rows, key_range, **options) == expected  # type: ignore[arg-type]


def test_partitions_are_coarse_enough_that_a_uniform_merge_touches_few() -> None:
    """A uniform merge touches every partition: at 20M rows, 10 partitions, not 64."""
    assert PARTITION_ROWS >= 1_000_000
    assert partition_spec("id", 20_000_000, None, bucketable=True) == ("bucket(10, `id`)",)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    rows=st.integers(0, 10**10),
    low=st.integers(-LONG - 1, LONG),
    span=st.integers(0, LONG),
    bucket_rows=st.none() | st.integers(1, 10**9),
)
def test_no_partition_parameter_is_wider_than_icebergs_32_bit_int(
    rows: int, low: int, span: int, bucket_rows: int | None
) -> None:
    """Iceberg refuses a `truncate` width (or `bucket` count) above 2**31-1, after the whole
    read."""
    high = min(low + span, LONG)
    spec = partition_spec("id", rows, (low, high), bucketable=True, bucket_rows=bucket_rows)

    for field in spec:
        parameter = re.match(r"^(?:truncate|bucket)\((\d+), `id`\)$", field)
        assert parameter is not None, field
        assert 1 <= int(parameter[1]) <= 2**31 - 1, field


@pytest.mark.parametrize(
    ("spec", "fields", "expected"),
    [
        (("truncate(6, `id`)",), [("id_trunc", "truncate(4, `id`)")], ("truncate(4, `id`)",)),
        (
            ("bucket(8, `id`)",),
            [("id_trunc", "truncate(4, `id`)"), ("id_bucket", "bucket(5, `id`)")],
            ("bucket(5, `id`)",),
        ),
        (("truncate(6, `id`)",), [("k_trunc", "truncate(4, `k`)")], ("truncate(6, `id`)",)),
        # A field named after its parameter (an evolved spec's) gives `id_trunc` no meaning: the
        # review's table, stuck by every merge after a replace named `id_trunc` a second time.
        (
            ("truncate(130, `id`)",),
            [("id_trunc_130", "truncate(130, `id`)"), ("id_trunc", "truncate(10, `id`)")],
            ("truncate(10, `id`)",),
        ),
        (("truncate(6, `id`)",), [("id_trunc_130", "truncate(130, `id`)")], ("truncate(6, `id`)",)),
        ((), [("id_trunc", "truncate(4, `id`)")], ()),
    ],
)
def test_a_table_created_again_gives_no_field_name_a_second_meaning(
    spec: tuple[str, ...], fields: list[tuple[str, str]], expected: tuple[str, ...]
) -> None:
    """Iceberg names a field a CREATE TABLE makes after its column and transform: two widths
    under one name break every merge-on-read MERGE INTO (test_regressions.py)."""
    assert consistent_with(spec, fields) == expected
