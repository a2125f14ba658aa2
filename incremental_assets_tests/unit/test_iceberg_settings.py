"""`TableSettings`: the properties an Iceberg table is made with, and the ones an existing table
is brought to when the configuration changes (`IcebergCommit.conform`)."""

from __future__ import annotations

import pytest

from incremental_assets.lake.iceberg.commits import MERGE_MODES, TableSettings


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
