"""The configuration's JSON schema (`config/outline.py`): what `dg check yaml` and editors check.

Its guarantee: it never refuses a configuration the loader accepts, and it names the setting
when a value has the wrong type or a key is unknown.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.config import config_from_mapping, parse_duration
from incremental_assets.config.loading import ExactLoader
from incremental_assets.config.outline import duration_text, file_schema
from incremental_assets.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(file_schema())
PROPERTY = settings(derandomize=True, max_examples=300, deadline=None)

BASE: dict[str, Any] = {
    "lake": {"path": "./lake"},
    "sources": {
        "shop": {"type": "jdbc", "url": "jdbc:postgresql://127.0.0.1:5432/shop", "user": "app"},
        "landing": {"type": "files", "path": "./landing"},
    },
    "tables": [{"name": "orders", "source": "shop", "table": "public.orders", "cursor": "id"}],
}

# Values the loader accepts for some settings and refuses for others: the schema may refuse a
# value only where the loader does.
TABLE_VALUES: dict[str, list[Any]] = {
    "mode": ["append", "merge", "full_refresh", "upsert", 3],
    "cursor": ["id", {"column": "id", "type": "bigint"}, {"column": "id", "type": "quux"}, 5],
    "primary_key": ["id", ["id", "region"], None, 7],
    "start": ["2025-01-01", 10, "1.50", True],
    "lookback": [0, "5m", "1.5", 2.5, "5 minutes"],
    "safety_lag": ["30s", "2h", "soon", 30],
    "sensor": [True, False, {"interval": "1m"}, {"interval": "1 min"}, "yes"],
    "automation": ["eager", "on_missing", {"on_cron": "0 * * * *"}, "hourly"],
    "buckets": [4, 0, "${BUCKETS}", "four"],
    "transaction_cap": [True, "{{ env.CAP }}", "maybe"],
    "null_cursor": ["error", "include", "drop"],
    "checks": [{"freshness": "1d"}, {"reconcile_counts": 0.01}, {"fresh": "1d"}],
    "options": [{"fetchsize": 100}, {"x": True}],
    "schedule": ["0 * * * *", None],
    "timezone": ["UTC", "Europe/Paris", "Mars/Base"],
    "modee": ["merge"],
}


def _loads(config: dict[str, Any]) -> bool:
    try:
        loaded = config_from_mapping(config, ROOT / "incremental_assets.yaml")
    except ConfigError:
        return False
    return not loaded.problems


def _errors(config: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (".".join(map(str, error.absolute_path)), error.message)
        for error in VALIDATOR.iter_errors(config)
    ]


def _documented_configurations() -> list[tuple[str, Any]]:
    """Every whole configuration the README, docs/ and the project's own file show."""
    found = [("incremental_assets.yaml", (ROOT / "incremental_assets.yaml").read_text())]
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"```ya?ml\n(.*?)```", doc.read_text(), re.S)
        found += [(doc.name, block) for block in blocks]
    documents = [(name, yaml.load(text, Loader=ExactLoader)) for name, text in found]
    configs = [(n, d.get("attributes", d)) for n, d in documents if isinstance(d, dict)]
    return [(n, c) for n, c in configs if {"lake", "sources", "tables"} <= set(c)]


def test_every_documented_configuration_fits_the_schema() -> None:
    documented = _documented_configurations()

    assert len(documented) >= 4
    for name, config in documented:
        assert _errors(config) == [], name


@PROPERTY
@given(
    choices=st.dictionaries(
        st.sampled_from(sorted(TABLE_VALUES)), st.integers(0, 10), min_size=1, max_size=5
    )
)
def test_the_schema_never_refuses_what_the_loader_accepts(choices: dict[str, int]) -> None:
    table = dict(BASE["tables"][0])
    for setting, index in choices.items():
        values = TABLE_VALUES[setting]
        table[setting] = values[index % len(values)]
    config = {**BASE, "tables": [table]}

    if _loads(config):
        assert _errors(config) == []


@pytest.mark.parametrize(
    ("setting", "value", "path", "words"),
    [
        ("mode", "upsert", "tables.0.mode", "'upsert' is not valid"),
        ("modee", "merge", "tables.0", "'modee' was unexpected"),
        ("buckets", "four", "tables.0.buckets", "'four' is not valid"),
        ("safety_lag", "soon", "tables.0.safety_lag", "'soon' is not valid"),
        ("null_cursor", "drop", "tables.0.null_cursor", "'drop' is not valid"),
    ],
)
def test_a_wrong_type_or_an_unknown_key_is_named_where_it_is(
    setting: str, value: Any, path: str, words: str
) -> None:
    config = {**BASE, "tables": [{**BASE["tables"][0], setting: value}]}

    errors = _errors(config)

    assert [p for p, _ in errors] == [path]
    assert words in errors[0][1]


def test_a_value_may_be_a_template_wherever_it_isnt_text() -> None:
    config = {
        **BASE,
        "lake": {"path": "./lake", "keep_snapshots": "${KEEP}", "lock": "{{ env.LOCK }}"},
        "sources": {"shop": {**BASE["sources"]["shop"], "fetchsize": "${FETCH}"}},
        "tables": [{**BASE["tables"][0], "mode": "${MODE}", "safety_lag": "{{ env.LAG }}"}],
    }

    assert _errors(config) == []
    assert _errors({**config, "lake": {"path": "./lake", "keep_snapshots": "KEEP"}}) != []


def test_a_source_is_checked_as_the_kind_its_type_names() -> None:
    files = {"type": "files", "path": "./x", "url": "jdbc:postgresql://h/db"}
    jdbc = {"type": "jdbc", "url": "jdbc:postgresql://h/db", "fetchsize": "many"}

    assert _errors({**BASE, "sources": {"landing": files}}) == [
        ("sources.landing", "Additional properties are not allowed ('url' was unexpected)")
    ]
    assert [p for p, _ in _errors({**BASE, "sources": {"shop": jdbc}})] == [
        "sources.shop.fetchsize"
    ]


def test_shorthand_entries_are_checked_by_their_pattern() -> None:
    good = {**BASE, "tables": ["shop/public.orders:updated_at:timestamp!upsert"]}
    bad = {**BASE, "tables": ["public.orders"]}

    assert _errors(good) == []
    assert [p for p, _ in _errors(bad)] == ["tables.0"]


def test_defaults_are_shown_as_the_file_writes_them() -> None:
    defs = file_schema()["$defs"]

    assert defs["LakeSpec"]["properties"]["keep_snapshots_for"]["default"] == "1d"
    assert defs["LakeSpec"]["properties"]["lock_timeout"]["default"] == "10m"
    assert defs["TableSpec"]["properties"]["sensor"]["default"] == {
        "interval": "5m",
        "running": False,
    }


@PROPERTY
@given(micros=st.integers(0, 10**13))
def test_a_duration_in_the_files_words_reads_back_as_itself(micros: int) -> None:
    duration = timedelta(milliseconds=micros // 1000)

    assert parse_duration(duration_text(duration)) == duration
