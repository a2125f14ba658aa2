"""`IncrementalTablesComponent` through the real `dg` CLI, in a dg project of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from incremental_assets.config import load_project
from incremental_assets.errors import ConfigError
from incremental_assets_tests.support.postgres import Schema
from incremental_assets_tests.support.project import read_lake, rows_by

DG = str(Path(sys.executable).with_name("dg"))
COMPONENT = "incremental_assets.IncrementalTablesComponent"
PACKAGE = "shop_project"
DEFINITIONS = """
from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
"""
PYPROJECT = f"""
[project]
name = "{PACKAGE}"
version = "0.0.0"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "{PACKAGE}"
"""


def _attributes(pg: Schema, connect: str, **table: Any) -> dict[str, Any]:
    return {
        "key_prefix": "shop",
        "spark": {"remote": connect, "conf": {"spark.sql.shuffle.partitions": "2"}},
        "lake": {"path": "./lake"},
        "sources": {"db": pg.source(password="${SHOP_PASSWORD}")},
        "tables": [
            {
                "name": "orders",
                "source": "db",
                "table": f"{pg.name}.orders",
                "mode": "merge",
                "cursor": "updated_at",
                "primary_key": ["id"],
                **table,
            }
        ],
    }


def _project(root: Path, attributes: dict[str, Any]) -> Path:
    """A dg project whose one defs.yaml declares the tables; returns the defs.yaml's folder."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    package = root / "src" / PACKAGE
    folder = package / "defs" / "tables"
    folder.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DEFINITIONS)
    document = {"type": "incremental_assets.IncrementalTablesComponent", "attributes": attributes}
    (folder / "defs.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder


def _dg(root: Path, pg: Schema, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(root / "src"),
        "DAGSTER_HOME": str(root / "home"),
        "SHOP_PASSWORD": pg.server.password,
        "PYTHONWARNINGS": "ignore",
        "NO_COLOR": "1",
    }
    (root / "home").mkdir(exist_ok=True)
    return subprocess.run(
        [DG, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _orders(pg: Schema) -> None:
    pg.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, v text, updated_at timestamptz NOT NULL)",
        "INSERT INTO orders SELECT i, 'v', TIMESTAMPTZ '2025-01-01 00:00:00+00' "
        "+ i * INTERVAL '1 s' FROM generate_series(1, 20) i",
    )


@pytest.mark.xdist_group("connect")
def test_dg_lists_checks_and_launches_the_tables(tmp_path: Path, pg: Schema, connect: str) -> None:
    _orders(pg)
    folder = _project(tmp_path, _attributes(pg, connect))

    listed = _dg(tmp_path, pg, "list", "defs", "--json")
    checked = _dg(tmp_path, pg, "check", "defs")
    launched = _dg(tmp_path, pg, "launch", "--assets", "shop/orders")

    assert listed.returncode == 0, _plain(listed.stderr)[-3000:]
    assets = json.loads(listed.stdout)["assets"]
    # The table, and upstream of it the source table it reads (under the same key prefix).
    assert [a["asset_key"] for a in assets] == [f"shop/db/{pg.name}/orders_source", "shop/orders"]
    assert checked.returncode == 0, _plain(checked.stdout + checked.stderr)[-3000:]
    assert launched.returncode == 0, _plain(launched.stderr)[-3000:]
    # lake: ./lake there, an Iceberg table (the default) named after the op, key prefix included
    lake = read_lake(folder / "lake", "orders", "incremental_assets.shop__orders")
    assert len(rows_by(lake, ["id"])) == 20
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["shop", "orders"]))
        assert event is not None and event.asset_materialization is not None
        cursor = event.asset_materialization.metadata["cursor"].value
    assert cursor == "2025-01-01T00:00:20.000000+00:00"


def test_dg_check_reports_a_bad_table_in_the_configuration_files_words(
    tmp_path: Path, pg: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both fit the schema (`dg check yaml`); the loader's rules refuse them.
    attributes = _attributes(pg, "sc://localhost:15002", lookback="5 minutes", timezone="Mars/Base")
    folder = _project(tmp_path / "dg", attributes)
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(attributes))
    monkeypatch.setenv("SHOP_PASSWORD", "x")
    with pytest.raises(ConfigError) as from_file:
        load_project(path)

    checked = _dg(tmp_path / "dg", pg, "check", "defs")

    output = _plain(checked.stdout + checked.stderr)
    assert checked.returncode == 1
    assert f"Invalid configuration in {folder / 'defs.yaml'} (2 problems)" in output
    for problem in from_file.value.problems:
        assert problem.render() in output


def test_dg_shows_the_attributes_types_and_check_yaml_points_at_a_wrong_one(
    tmp_path: Path, pg: Schema
) -> None:
    attributes = _attributes(pg, "sc://localhost:15002", mode="upsert", buckets="${BUCKETS}")
    attributes["sources"]["db"]["fetchsize"] = "many"
    folder = _project(tmp_path, attributes)

    listed = _dg(tmp_path, pg, "list", "components", "--json")
    shown = _dg(tmp_path, pg, "utils", "inspect-component", COMPONENT, "--defs-yaml-json-schema")
    checked = _dg(tmp_path, pg, "check", "yaml")

    components = json.loads(listed.stdout)["items"]
    assert COMPONENT in [c["key"] for c in components], listed.stderr[-2000:]
    table = json.loads(shown.stdout)["properties"]["attributes"]["$defs"]["TableSpec"]
    assert {"type": "integer", "exclusiveMinimum": 0, "maximum": 4096} in table["properties"][
        "buckets"
    ]["anyOf"]
    output = _plain(checked.stdout + checked.stderr)
    assert checked.returncode == 1
    defs_yaml = folder / "defs.yaml"
    place = rf"{re.escape(str(defs_yaml))}:\d+ - {re.escape(COMPONENT)} attributes"
    assert re.search(rf"{place}\.tables\.0\.mode 'upsert' is not valid", output), output
    assert re.search(rf"{place}\.sources\.db\.fetchsize 'many' is not valid", output)
    assert "buckets" not in output  # a template fits any setting


def test_a_defs_yaml_keeps_numbers_exact_and_paths_relative_to_its_folder(
    tmp_path: Path,
) -> None:
    document = textwrap.dedent(
        """
        type: incremental_assets.IncrementalTablesComponent
        attributes:
          lake: {path: ./lake}
          sources: {drop: {type: files, path: ./landing}}
          tables:
            - {name: amounts, source: drop, table: amounts, cursor: {column: n, type: decimal},
               lookback: 0.50}
        """
    )
    with create_defs_folder_sandbox() as sandbox:
        folder = sandbox.defs_folder_path / "tables"
        folder.mkdir()
        (folder / "defs.yaml").write_text(document)
        with sandbox.load_component_and_build_defs(defs_path=folder) as (component, defs):
            table = component.project.tables[0]  # type: ignore[attr-defined]
            assert table.lookback == Decimal("0.50") and str(table.lookback) == "0.50"
            lake = component.project.lake.uri  # type: ignore[attr-defined]
            assert lake == str(folder.resolve() / "lake")
            assert {spec.key for spec in defs.resolve_all_asset_specs()} == {
                dg.AssetKey("amounts"),
                dg.AssetKey(["drop", "amounts_source"]),  # its source, upstream of it
            }
