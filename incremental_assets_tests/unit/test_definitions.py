from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from incremental_assets.config import load_project
from incremental_assets.definitions import ALL_TABLES_JOB, build_definitions
from incremental_assets.errors import InstanceError
from incremental_assets.factory import ALLOW_TEMPORARY_INSTANCE, ensure_persistent_instance
from incremental_assets.sensors import AUTOMATION_SENSOR
from incremental_assets.translator import IncrementalAssetsTranslator

# Modules the definitions must not import: only a run that reaches Spark or counts rows needs them.
# Imported only where a run needs them: pandas, PyIceberg, PyMySQL (and its cryptography).
HEAVY_MODULES = ("pandas", "pyarrow.dataset", "pyspark.sql.connect.client", "pyiceberg", "pymysql")

CONFIG: dict[str, Any] = {
    "key_prefix": ["raw"],
    "lake": {"path": "./lake"},
    "sources": {
        "shop": {"type": "jdbc", "url": "jdbc:postgresql://db:5432/shop", "user": "app"},
        "landing": {"type": "files", "path": "./landing", "format": "csv"},
    },
    "tables": [
        {
            "name": "orders",
            "source": "shop",
            "table": "public.orders",
            "cursor": "updated_at",
            "primary_key": ["id"],
            "schedule": "0 */2 * * *",
        },
        {
            "name": "events",
            "source": "landing",
            "table": "events",
            "mode": "append",
            "cursor": "at",
        },
        {
            "name": "countries",
            "source": "shop",
            "table": "public.countries",
            "mode": "full_refresh",
        },
    ],
}


@pytest.fixture
def defs(tmp_path: Path) -> dg.Definitions:
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return build_definitions(load_project(path))


def test_one_asset_per_table_grouped_by_source_with_kinds(defs: dg.Definitions) -> None:
    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    orders = specs[dg.AssetKey(["raw", "orders"])]
    assert orders.group_name == "shop"
    assert orders.kinds == {"spark", "iceberg"}  # lake.format unset: a new table
    assert "public.orders" in (orders.description or "")
    assert "merge on key (id)" in (orders.description or "")
    events = specs[dg.AssetKey(["raw", "events"])]
    assert events.group_name == "landing" and events.kinds == {"spark", "iceberg"}
    assert "Fully refreshed on every run" in (
        specs[dg.AssetKey(["raw", "countries"])].description or ""
    )


def test_each_source_table_is_an_external_asset_upstream_of_its_table(
    defs: dg.Definitions,
) -> None:
    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    sources = {
        "orders": dg.AssetKey(["raw", "shop", "public", "orders_source"]),
        "events": dg.AssetKey(["raw", "landing", "events_source"]),
        "countries": dg.AssetKey(["raw", "shop", "public", "countries_source"]),
    }
    for table, source in sources.items():
        assert [dep.asset_key for dep in specs[dg.AssetKey(["raw", table])].deps] == [source]
        assert not defs.resolve_assets_def(source).is_executable  # Dagster never runs it
    assert specs[sources["orders"]].kinds == {"postgres"}
    assert specs[sources["orders"]].group_name == "shop"
    assert specs[sources["events"]].kinds == {"files"}
    assert specs[sources["events"]].group_name == "landing"
    assert specs[sources["orders"]].metadata["dagster/table_name"].value == "public.orders"
    # How to switch on the sensor that records its observations, which starts stopped.
    assert "`raw__orders_source_sensor`" in (specs[sources["orders"]].description or "")
    assert "dagster sensor start raw__orders_source_sensor" in (
        specs[sources["orders"]].description or ""
    )


def test_source_keys_are_valid_names_stable_and_shared_by_the_tables_reading_one(
    tmp_path: Path,
) -> None:
    odd = {"name": "odd", "source": "shop", "table": 'public."order-items"', "mode": "append"}
    other = {"name": "also_odd", "source": "shop", "table": 'public."order_items"'}
    twice = {**CONFIG["tables"][2], "name": "countries_again"}
    query = {"name": "totals", "source": "shop", "query": "SELECT 1 AS x", "mode": "full_refresh"}
    glob = {"name": "drops", "source": "landing", "table": "drops/*/*.csv", "mode": "append"}
    tables = [*CONFIG["tables"], odd, {**other, "mode": "append"}, twice, query, glob]
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "tables": tables}))
    project = load_project(path)
    translator = IncrementalAssetsTranslator(project.lake)

    keys = {t.name: translator.source_asset_key(t) for t in project.tables}

    assert keys["odd"].path[:3] == ["raw", "shop", "public"]
    assert keys["odd"].path[3].startswith("order_items_")  # the dash replaced, a digest added
    assert keys["also_odd"] == dg.AssetKey(["raw", "shop", "public", "order_items_source"])
    assert keys["countries_again"] == keys["countries"]  # one source table, one asset
    assert keys["totals"] == dg.AssetKey(["raw", "shop", "totals_query"])
    assert keys["drops"].path[:3] == ["raw", "landing", "drops"]
    # Dagster's graph shows a key's last part: a source's never reads as its lake table's.
    for table in project.tables:
        assert keys[table.name].path[-1] != translator.asset_key(table).path[-1]
        assert keys[table.name].path[-1].endswith(("_source", "_query"))
    for key in keys.values():
        assert all(re.fullmatch(r"[A-Za-z0-9_]+", part) for part in key.path), key
    # Stable: the same configuration names the same keys again, in another process too.
    again = subprocess.run(
        [sys.executable, "-c", SOURCE_KEYS.format(path=str(path))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert again.stdout.strip() == repr(sorted(k.to_user_string() for k in keys.values()))
    defs = build_definitions(project)
    shared = [a for a in defs.assets or [] if getattr(a, "key", None) == keys["countries"]]
    assert len(shared) == 1


SOURCE_KEYS = """
from incremental_assets.config import load_project
from incremental_assets.translator import IncrementalAssetsTranslator
project = load_project({path!r})
translator = IncrementalAssetsTranslator(project.lake)
print(sorted(translator.source_asset_key(t).to_user_string() for t in project.tables))
"""


def test_a_job_for_all_tables_and_a_schedule_per_scheduled_table(defs: dg.Definitions) -> None:
    job = defs.resolve_job_def(ALL_TABLES_JOB)
    assert len(list(job.asset_layer.executable_asset_keys)) == 3
    schedules = list(defs.schedules or [])
    assert [s.name for s in schedules] == ["raw__orders_schedule"]
    assert isinstance(schedules[0], dg.ScheduleDefinition)
    assert schedules[0].cron_schedule == "0 */2 * * *"


def test_assets_accept_full_refresh_config_and_share_one_process(defs: dg.Definitions) -> None:
    repository = defs.get_repository_def()
    job = repository.get_implicit_job_def_for_assets([dg.AssetKey(["raw", "orders"])])
    assert job is not None
    assert job.executor_def.name == "in_process"
    config_fields = job.run_config_schema.config_type.fields["ops"].config_type.fields  # type: ignore[attr-defined]
    assert (
        "full_refresh"
        in config_fields["raw__orders"].config_type.fields["config"].config_type.fields
    )


def test_each_table_gets_a_source_sensor_stopped_unless_asked(tmp_path: Path) -> None:
    config = {
        **CONFIG,
        "tables": [{**CONFIG["tables"][1], "sensor": {"interval": "45s"}}, CONFIG["tables"][2]],
    }
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(config))
    defs = build_definitions(load_project(path))
    events = defs.resolve_sensor_def("raw__events_source_sensor")
    countries = defs.resolve_sensor_def("raw__countries_source_sensor")
    assert events.minimum_interval_seconds == 45
    assert events.default_status == dg.DefaultSensorStatus.RUNNING
    assert countries.default_status == dg.DefaultSensorStatus.STOPPED


def test_automation_freshness_and_checks_reach_the_asset(tmp_path: Path) -> None:
    table = {
        **CONFIG["tables"][0],
        "schedule": None,
        "automation": "eager",
        "checks": {"freshness": "3h"},
    }
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(
        yaml.safe_dump({**CONFIG, "tables": [{k: v for k, v in table.items() if v is not None}]})
    )
    defs = build_definitions(load_project(path))
    spec = defs.resolve_assets_def(dg.AssetKey(["raw", "orders"])).specs_by_key[
        dg.AssetKey(["raw", "orders"])
    ]
    assert spec.automation_condition is not None and "eager" in str(
        spec.automation_condition.get_label() or spec.automation_condition
    )
    assert spec.freshness_policy is not None
    checks = {key.name for key in defs.resolve_assets_def(spec.key).check_keys}
    assert checks == {
        "cursor_not_backwards",
        "primary_key_unique",
        "freshness",
    }


def _requested(result: dg.EvaluateAutomationConditionsResult, keys: list[str]) -> set[str]:
    return {k for k in keys if result.get_num_requested(dg.AssetKey(["raw", k]))}


def test_automation_is_evaluated_by_a_sensor_that_runs_from_the_start(tmp_path: Path) -> None:
    shop = CONFIG["tables"][2]
    tables = [
        {**shop, "name": "hourly", "automation": {"on_cron": "0 * * * *"}},
        {**shop, "name": "first_load", "automation": "on_missing"},
        {**shop, "name": "eager", "automation": "eager"},
        {**shop, "name": "manual"},
    ]
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "tables": tables}))
    defs = build_definitions(load_project(path))
    sensor = defs.resolve_sensor_def(AUTOMATION_SENSOR)
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    names = [t["name"] for t in tables]
    ten_thirty = datetime(2025, 1, 1, 10, 30, tzinfo=UTC)

    with dg.instance_for_test() as instance:
        first = dg.evaluate_automation_conditions(
            defs, instance, sensor.asset_selection, evaluation_time=ten_thirty
        )
        # Never materialized: requested once, not again on the next tick.
        assert _requested(first, names) == {"first_load", "eager"}
        past_eleven = dg.evaluate_automation_conditions(
            defs,
            instance,
            sensor.asset_selection,
            evaluation_time=ten_thirty + timedelta(minutes=40),
            cursor=first.cursor,
        )
        assert _requested(past_eleven, names) == {"hourly"}  # the 11:00 tick passed


def test_no_automation_sensor_without_automation(defs: dg.Definitions) -> None:
    assert AUTOMATION_SENSOR not in {s.name for s in defs.sensors or []}


def test_each_table_runs_in_its_own_concurrency_pool(defs: dg.Definitions) -> None:
    for name in ("orders", "events", "countries"):
        asset = defs.resolve_assets_def(dg.AssetKey(["raw", name]))
        assert asset.op.pool == f"incremental_assets/{name}"


def test_a_temporary_instance_is_refused_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_TEMPORARY_INSTANCE, raising=False)
    with dg.DagsterInstance.ephemeral() as temporary:
        with pytest.raises(InstanceError, match="DAGSTER_HOME"):
            ensure_persistent_instance(temporary, "orders")
        monkeypatch.setenv(ALLOW_TEMPORARY_INSTANCE, "1")
        ensure_persistent_instance(temporary, "orders")
    monkeypatch.delenv(ALLOW_TEMPORARY_INSTANCE)
    with dg.DagsterInstance.from_config(str(tmp_path)) as persistent:
        ensure_persistent_instance(persistent, "orders")


def test_loading_the_definitions_leaves_heavy_modules_unimported() -> None:
    """Every `dagster asset materialize` pays for what the definitions import, even with nothing
    new; pandas (through pyarrow.dataset or the Connect client) is most of a second of that,
    PyIceberg and SQLAlchemy another, PyMySQL's cryptography a tenth."""
    probe = (
        "import sys, incremental_assets.definitions; "
        "print(sorted(m for m in HEAVY if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY_MODULES!r}; {probe}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"
