"""The PyIceberg code `status --history` prints: it opens the lake's catalog as the package
does, and shows none of the catalog's secrets. (That it runs is held by
integration/test_docs_snippets.py.)"""

from __future__ import annotations

import pytest

from incremental_assets.cli.status import pyiceberg_reader
from incremental_assets.config import LakeSpec

SECRET = "Wh1sper-0f-the-catalog"
POSTGRES = "postgresql+psycopg2://etl:{}@db/catalog"
NOTE = "  # *** stands for the catalog's secret\n"


@pytest.mark.parametrize(
    ("catalog", "name", "shown", "note"),
    [
        ({}, "incremental_assets", {"type": "sql", "uri": "sqlite:////lake/_catalog.db"}, ""),
        (
            {"name": "shop", "type": "sql", "uri": POSTGRES.format(SECRET)},
            "shop",
            {"type": "sql", "uri": POSTGRES.format("***")},
            NOTE,
        ),
        (
            {"type": "rest", "uri": "https://rest", "token": SECRET},
            "incremental_assets",
            {"type": "rest", "uri": "https://rest", "token": "***"},
            NOTE,
        ),
    ],
)
def test_the_history_hint_opens_the_lakes_catalog_without_its_secrets(
    catalog: dict[str, str], name: str, shown: dict[str, str], note: str
) -> None:
    hint = pyiceberg_reader(LakeSpec(path="/lake", catalog=catalog), "ns.orders", "42")

    assert f"  catalog = load_catalog({name!r}, **{shown!r})\n{note}" in hint
    assert "  catalog.load_table('ns.orders').scan(snapshot_id=42).to_arrow()" in hint
    assert SECRET not in hint
