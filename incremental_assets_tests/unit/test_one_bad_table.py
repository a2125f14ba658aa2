"""One bad table doesn't hide the others: which problems are one table's (`config.load_config`),
and the asset that stands in for a bad table (`definitions.py`). No Spark here: the runs are in
integration/test_one_bad_table.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from incremental_assets.config import TableSpec, load_config, load_project
from incremental_assets.definitions import ALL_TABLES_JOB, VALIDATING, definitions_from_file
from incremental_assets.errors import ConfigError
from incremental_assets.translator import IncrementalAssetsTranslator

EVENTS = {"name": "events", "source": "landing", "table": "events", "cursor": "at"}
ORDERS = {"name": "orders", "source": "landing", "table": "orders", "cursor": "at"}
CUSTOMERS = {"name": "customers", "source": "shop", "table": "public.customers"}
CONFIG: dict[str, Any] = {
    "key_prefix": "raw",
    "lake": {"path": "./lake", "format": "parquet"},
    "sources": {
        "landing": {"type": "files", "path": "./landing"},
        "shop": {"type": "jdbc", "url": "jdbc:postgresql://db:5432/shop", "user": "app"},
    },
    "tables": [EVENTS, ORDERS, CUSTOMERS],
}


class LakeTranslator(IncrementalAssetsTranslator):
    """Keys of its own: the bad table's asset must take its key from the translator too."""

    def get_asset_spec(self, table: TableSpec) -> dg.AssetSpec:
        return super().get_asset_spec(table).replace_attributes(key=["lake", table.name])


def _config(orders: dict[str, Any] | None = None, **sections: Any) -> dict[str, Any]:
    """CONFIG with `orders` changed (a None drops a setting) and sections replaced."""
    changed = {k: v for k, v in {**ORDERS, **(orders or {})}.items() if v is not None}
    return {**CONFIG, "tables": [EVENTS, changed, CUSTOMERS], **sections}


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _sources(**changed: Any) -> dict[str, Any]:
    return {"sources": {**CONFIG["sources"], **changed}}


def test_a_bad_table_is_set_apart_and_the_others_load(tmp_path: Path) -> None:
    path = _write(tmp_path, _config({"mode": "upsert"}))

    loaded = load_config(path)

    assert [t.name for t in loaded.project.tables] == ["events", "customers"]
    (bad,) = loaded.invalid_tables
    assert bad.table.name == "orders" and bad.table.key_prefix == ("raw",)
    assert str(bad.error) == (
        f"Invalid configuration in {path} (1 problem):\n"
        "  - table 'orders', field 'mode': 'upsert' is not one of its values; use 'append', "
        "'merge' or 'full_refresh' (`!upsert` in a one-line entry is `mode: merge`)"
    )
    with pytest.raises(ConfigError) as strict:  # the CLI and the tests load every table or none
        load_project(path)
    assert str(strict.value) == str(bad.error)


@pytest.mark.parametrize(
    ("config", "bad", "said"),
    [
        (_config({"mode": "upsert"}), "orders", "table 'orders', field 'mode'"),
        (_config({"lookbak": "5m"}), "orders", "field 'lookbak': is not a known setting"),
        (_config({"mode": "merge"}), "orders", "field 'primary_key': merge mode needs"),
        (_config({"cursor": {"column": "at", "type": "float"}}), "orders", "'cursor.type'"),
        (_config({"source": "nope"}), "orders", "'nope' is not a source"),
        (
            _config(**_sources(shop={"type": "jdbc", "url": "jdbc:db2://h"})),
            "customers",
            "source 'shop', field 'url': 'jdbc:db2://h' is not a JDBC URL",
        ),
        (
            _config(**_sources(shop={"type": "jdbc", "url": "${NO_SUCH_URL}"})),
            "customers",
            "source 'shop', field 'url': environment variable NO_SUCH_URL is not set",
        ),
    ],
)
def test_a_problem_of_one_table_or_of_a_source_only_some_use_sets_those_apart(
    tmp_path: Path, config: dict[str, Any], bad: str, said: str
) -> None:
    loaded = load_config(_write(tmp_path, config))

    assert [t.table.name for t in loaded.invalid_tables] == [bad]
    assert said in str(loaded.invalid_tables[0].error)
    assert {t.name for t in loaded.project.tables} == {"events", "orders", "customers"} - {bad}


def test_a_source_that_is_wrong_is_said_once_not_again_as_missing(tmp_path: Path) -> None:
    config = _config(**_sources(shop={"type": "jdbc", "url": "jdbc:db2://h"}))
    loaded = load_config(_write(tmp_path, config))

    (bad,) = loaded.invalid_tables
    assert bad.problems == loaded.problems and len(bad.problems) == 1
    assert bad.table.source.name == "shop"  # a placeholder of the same name: the same group


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (_config(lake={"path": "./lake", "compression": "brotli"}), "lake, field 'compression'"),
        (_config(spark={"remote": "http://spark:15002"}), "spark, field 'remote'"),
        ({**_config(), "tabels": []}, "top level, field 'tabels'"),
        (
            {
                **_sources(landing={"type": "files", "path": ".", "format": "xml"}),
                "lake": CONFIG["lake"],
                "tables": [EVENTS, ORDERS],
            },
            "source 'landing', field 'format'",
        ),
        (_config(**_sources(unused={"type": "jdbc"})), "source 'unused'"),
        (_config({"name": "events"}), "field 'name': is used by another table"),
        (_config({"name": "1st"}), "field 'name': use letters, digits and underscores"),
        (_config({"name": None}), "table #2, field 'name': is required"),
    ],
)
def test_a_problem_of_the_project_still_fails_it_whole(
    tmp_path: Path, config: dict[str, Any], said: str
) -> None:
    """The lake, Spark, the top level, a source every table uses (or none does), a name that
    can't name an asset."""
    with pytest.raises(ConfigError) as raised:
        load_config(_write(tmp_path, config))

    assert said in str(raised.value)


def test_a_bad_table_is_an_asset_named_by_the_translator_in_the_all_tables_job(
    tmp_path: Path,
) -> None:
    translator = f"{__name__}.LakeTranslator"
    config = _config({"mode": "upsert"}, translator=translator)
    defs = definitions_from_file(str(_write(tmp_path, config)))

    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    orders = specs[dg.AssetKey(["lake", "orders"])]
    assert "Not loaded: its configuration is invalid" in (orders.description or "")
    assert "table 'orders', field 'mode'" in (orders.description or "")
    assert orders.group_name == "landing"
    assert defs.resolve_assets_def(orders.key).op.name == "lake__orders"
    job = defs.resolve_job_def(ALL_TABLES_JOB)
    tables = {key for key in specs if defs.resolve_assets_def(key).is_executable}
    assert set(job.asset_layer.executable_asset_keys) == tables
    assert len(tables) == 3  # the sources' assets are upstream of the tables, not in the job


def test_dagster_validating_the_code_fails_on_a_bad_table_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _config({"mode": "upsert"}))
    monkeypatch.setenv(VALIDATING, "1")

    with pytest.raises(ConfigError) as raised:
        definitions_from_file(str(path))

    assert str(raised.value) == str(load_config(path).invalid_tables[0].error)
