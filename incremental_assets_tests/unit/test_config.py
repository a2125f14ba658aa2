from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from incremental_assets import jvm
from incremental_assets.config import (
    FilesSourceSpec,
    JdbcSourceSpec,
    Mode,
    expand_shorthand,
    load_project,
    parse_duration,
)
from incremental_assets.config.rules import lookback_for
from incremental_assets.cursor import CursorType
from incremental_assets.errors import ConfigError

VALID: dict[str, Any] = {
    "spark": {"master": "local[2]", "conf": {"spark.sql.session.timeZone": "UTC"}},
    "lake": {"path": "./lake", "compression": "zstd"},
    "sources": {
        "shop": {
            "type": "jdbc",
            "url": "jdbc:postgresql://127.0.0.1:5432/shop",
            "user": "app",
            "password": "${SHOP_PASSWORD}",
        },
        "landing": {"type": "files", "path": "./landing", "format": "parquet"},
    },
    "tables": [
        {
            "name": "orders",
            "source": "shop",
            "table": "public.orders",
            "mode": "merge",
            "cursor": {"column": "updated_at", "type": "timestamptz"},
            "primary_key": ["id"],
            "start": "2025-01-01T00:00:00Z",
            "lookback": "5m",
            "safety_lag": "30s",
            "delete_column": "deleted_at",
            "schedule": "0 */2 * * *",
        },
        {"name": "events", "source": "landing", "table": "events", "cursor": "at"},
    ],
}


def _write(tmp_path: Path, config: Any) -> Path:
    path = tmp_path / "incremental_assets.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    return path


def _with_table(**changes: Any) -> dict[str, Any]:
    table = {**VALID["tables"][0], **changes}
    return {**VALID, "tables": [{k: v for k, v in table.items() if v is not None}]}


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_PASSWORD", "s3cret")


def test_the_documented_example_loads_and_resolves(tmp_path: Path) -> None:
    project = load_project(_write(tmp_path, VALID))

    orders, events = project.tables
    assert isinstance(orders.source, JdbcSourceSpec) and orders.source.password == "s3cret"
    assert orders.mode is Mode.MERGE and orders.primary_key == ("id",)
    assert orders.cursor is not None and orders.cursor.declared_type is CursorType.TIMESTAMPTZ
    assert orders.safety_lag == timedelta(seconds=30)
    assert project.lake.uri == str(tmp_path / "lake")  # relative to the file, not the cwd
    assert isinstance(events.source, FilesSourceSpec) and events.source.path == str(
        tmp_path / "landing"
    )
    assert events.mode is Mode.APPEND  # no primary key: append by default
    assert str(jvm.jar_path(jvm.POSTGRES_JDBC)) in project.spark.conf["spark.jars"].split(",")
    assert "spark.jars.packages" not in project.spark.conf


def test_packages_given_in_spark_conf_are_kept_beside_the_drivers(tmp_path: Path) -> None:
    config = {**VALID, "spark": {"conf": {"spark.jars.packages": "com.example:udfs:1.0"}}}
    project = load_project(_write(tmp_path, config))

    assert project.spark.conf["spark.jars.packages"] == "com.example:udfs:1.0"
    assert str(jvm.jar_path(jvm.POSTGRES_JDBC)) in project.spark.conf["spark.jars"].split(",")


def test_config_file_is_found_through_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "elsewhere.yaml"
    other.write_text(yaml.safe_dump(VALID))
    monkeypatch.setenv("INCREMENTAL_ASSETS_CONFIG", str(other))
    monkeypatch.chdir(tmp_path)
    assert load_project().path == str(other)


# Each bad input, and the words its message must contain: the place, the field and the fix.
BAD_INPUTS = [
    (
        _with_table(mode="upsert"),
        "table 'orders', field 'mode': 'upsert' is not one of its values; use 'append', "
        "'merge' or 'full_refresh' (`!upsert` in a one-line entry is `mode: merge`)",
    ),
    (
        _with_table(primary_key=None, table=None, query="SELECT 1"),
        "table 'orders', field 'primary_key': merge mode needs the primary key columns",
    ),
    (
        _with_table(cursor={"column": "x", "type": "float"}),
        "table 'orders', field 'cursor.type': 'float' is not a cursor type",
    ),
    (
        _with_table(lookback="5 minutes"),
        "table 'orders', field 'lookback': '5 minutes' is neither a duration nor a number; write a "
        "duration such as 5m for date and timestamp cursors, a number such as 1000 for integer",
    ),
    (
        _with_table(safety_lag="soon"),
        "table 'orders', field 'safety_lag': 'soon' is not a duration",
    ),
    (
        _with_table(start="tomorrow"),
        "table 'orders', field 'start': 'tomorrow' is not a valid timestamptz cursor value",
    ),
    (
        _with_table(cursor={"column": "id", "type": "integer"}, lookback="5m", safety_lag=None),
        "field 'lookback': integer cursors look back by a number, e.g. lookback: 1000",
    ),
    (
        _with_table(cursor={"column": "id", "type": "integer"}, lookback=0.5, safety_lag=None),
        "field 'lookback': integer cursors can't look back by a fraction (0.5); "
        "write a whole number",
    ),
    (
        _with_table(lookback=100),
        "field 'lookback': timestamptz cursors look back by a duration, e.g. lookback: 5m",
    ),
    (_with_table(lookback=-1), "field 'lookback': lookback can't be negative (-1)"),
    (
        _with_table(cursor={"column": "id", "type": "string"}, lookback=1, safety_lag=None),
        "field 'lookback': string cursors have no distance to look back by",
    ),
    (
        _with_table(cursor={"column": "id", "type": "bigint"}, lookback=None, start=None),
        "field 'safety_lag': applies to date and timestamp cursors, not integer",
    ),
    (
        _with_table(source="nope"),
        "table 'orders', field 'source': 'nope' is not a source (sources: landing, shop)",
    ),
    (
        _with_table(table=None),
        "table 'orders', field 'table': give exactly one of `table` (schema.table) "
        "or `query` (a SELECT)",
    ),
    (_with_table(query="SELECT 1"), "give exactly one of `table`"),
    (
        _with_table(mode="append", delete_column="deleted_at"),
        "field 'delete_column': only merge mode removes deleted rows",
    ),
    (_with_table(schedule="every day"), "field 'schedule': 'every day' is not a cron expression"),
    (
        _with_table(timezone="Mars/Olympus"),
        "field 'timezone': 'Mars/Olympus' is not an IANA time zone",
    ),
    (_with_table(name="1st table"), "field 'name': use letters, digits and underscores"),
    (_with_table(colour="red"), "table 'orders', field 'colour': is not a known setting; check"),
    (
        _with_table(primary_kye=["id"]),
        "table 'orders', field 'primary_kye': is not a known setting (did you mean `primary_key`?)",
    ),
    (
        {**VALID, "lake": {"path": "x", "compresion": "zstd"}},
        "lake, field 'compresion': is not a known setting (did you mean `compression`?)",
    ),
    ({**VALID, "lake": {"compression": "zstd"}}, "lake, field 'path': is required"),
    (
        {**VALID, "lake": {"path": "x", "compression": "brotli"}},
        "lake, field 'compression': 'brotli' is not one of its values; use 'zstd', 'snappy', ",
    ),
    (
        {**VALID, "sources": {"shop": {"type": "jdbc", "url": "jdbc:sqlserver://h;db=x"}}},
        "source 'shop', field 'url': 'jdbc:sqlserver://h;db=x' is not a JDBC URL of a database "
        "this version reads",
    ),
    (
        {**VALID, "sources": {"shop": {"url": "jdbc:postgresql://h/db"}}},
        "source 'shop': needs `type: jdbc` or `type: files`",
    ),
    (
        {
            **VALID,
            "sources": {
                **VALID["sources"],
                "landing": {"type": "files", "path": ".", "format": "xml"},
            },
        },
        "source 'landing', field 'format'",
    ),
    ({**VALID, "tables": []}, "top level, field 'tables': list at least one table to load"),
    (
        {**VALID, "tabels": []},
        "top level, field 'tabels': is not a known setting (did you mean `tables`?)",
    ),
    (
        {**VALID, "tables": [VALID["tables"][0], VALID["tables"][0]]},
        "table 'orders', field 'name': is used by another table",
    ),
]


@pytest.mark.parametrize(("config", "message"), BAD_INPUTS)
def test_each_bad_input_gets_the_documented_message(
    tmp_path: Path, config: Any, message: str
) -> None:
    path = _write(tmp_path, config)
    with pytest.raises(ConfigError) as raised:
        load_project(path)
    text = str(raised.value)
    assert text.startswith(f"Invalid configuration in {path} (")
    assert message in text


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    config = {
        **VALID,
        "lake": {"path": "./lake", "compresion": "zstd"},
        "tables": [
            {**VALID["tables"][0], "mode": "upsert"},
            {"name": "events", "source": "missing", "table": "e"},
            {"name": "more", "source": "shop", "query": "SELECT 1", "mode": "merge"},
        ],
    }
    with pytest.raises(ConfigError) as raised:
        load_project(_write(tmp_path, config))
    text = str(raised.value)
    assert "(4 problems)" in text
    for expected in (
        "lake, field 'compresion'",
        "table 'orders', field 'mode'",
        "table 'events', field 'source'",
        "table 'more', field 'primary_key'",
    ):
        assert expected in text


def test_every_problem_of_one_table_is_reported_with_its_full_field_path(tmp_path: Path) -> None:
    config = _with_table(
        checks={"freshness": "soon", "reconcile_counts": 5},
        cursor={"column": "x", "type": "float", "extra": 1},
        sensor={"interval": "soon", "bogus": 1},
        primary_key=[1],
    )
    with pytest.raises(ConfigError) as raised:
        load_project(_write(tmp_path, config))
    text = str(raised.value)
    assert "(7 problems)" in text, text
    for expected in (
        "table 'orders', field 'checks.freshness': 'soon' is not a duration",
        "table 'orders', field 'checks.reconcile_counts': Input should be less than or equal to 1",
        "table 'orders', field 'cursor.type': 'float' is not a cursor type",
        "table 'orders', field 'cursor.extra': is not a known setting",
        "table 'orders', field 'sensor.interval': 'soon' is not a duration",
        "table 'orders', field 'sensor.bogus': is not a known setting",
        "table 'orders', field 'primary_key[0]': Input should be a valid string",
    ):
        assert expected in text
    assert "field 'cursor': " not in text  # the string alternative of the union is not reported


def test_an_unset_secret_names_the_variable_and_the_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHOP_PASSWORD")
    with pytest.raises(ConfigError) as raised:
        load_project(_write(tmp_path, VALID))
    assert "source 'shop', field 'password': environment variable SHOP_PASSWORD is not set" in str(
        raised.value
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "orders", "source": "shop", "table": "${ORDERS_TABLE}"},
            "table 'orders', field 'table': environment variable ORDERS_TABLE is not set",
        ),
        (
            "shop/sales.orders:id:bigint@${ORDERS_START}",
            "table 'orders': environment variable ORDERS_START is not set",
        ),
        (
            {"source": "shop", "table": "${ORDERS_TABLE}"},
            "table #2, field 'table': environment variable ORDERS_TABLE is not set",
        ),
    ],
)
def test_an_unset_variable_in_a_table_names_the_table(
    tmp_path: Path, entry: dict[str, Any] | str, message: str
) -> None:
    config = {**VALID, "tables": [VALID["tables"][1], entry]}
    with pytest.raises(ConfigError) as raised:
        load_project(_write(tmp_path, config))
    assert message in str(raised.value)


def test_a_dollar_brace_can_be_written_literally(tmp_path: Path) -> None:
    config = {
        **VALID,
        "sources": {**VALID["sources"], "shop": {**VALID["sources"]["shop"], "password": "a$${b}"}},
    }
    project = load_project(_write(tmp_path, config))
    assert project.tables[0].source.password == "a${b}"  # type: ignore[union-attr]


def test_a_missing_file_says_where_it_looked_and_how_to_point_elsewhere(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"No configuration file at .*INCREMENTAL_ASSETS_CONFIG"):
        load_project(tmp_path / "absent.yaml")


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"is not valid YAML at line 3, column 1: expected ',' or ']'"
    ):
        load_project(_write(tmp_path, "lake:\n  path: [unclosed\n"))


def test_unquoted_yaml_dates_are_kept_as_cursor_text(tmp_path: Path) -> None:
    text = yaml.safe_dump(_with_table(start=None, lookback=None), sort_keys=False)
    path = _write(
        tmp_path, text.replace("- name: orders\n", "- name: orders\n  start: 2025-01-01\n", 1)
    )
    assert load_project(path).tables[0].start == "2025-01-01"


def _decimal_table(lookback: str, start: str = "1") -> str:
    """A config whose decimal cursor's `lookback` and `start` are written verbatim into the YAML."""
    text = yaml.safe_dump(
        _with_table(cursor={"column": "n", "type": "decimal"}, safety_lag=None), sort_keys=False
    )
    return text.replace("  lookback: 5m\n", f"  lookback: {lookback}\n").replace(
        "  start: '2025-01-01T00:00:00Z'\n", f"  start: {start}\n"
    )


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("0.5", Decimal("0.5")),
        ("'0.5'", Decimal("0.5")),
        ("12345678901234567890.0000000001", Decimal("12345678901234567890.0000000001")),
        ("0.10000000000000000001", Decimal("0.10000000000000000001")),
        ("1000", 1000),
        ("'1000'", 1000),
        ("1_000.0", 1000),
        ("0", 0),
    ],
)
def test_a_numeric_lookback_is_kept_exactly_as_written(
    tmp_path: Path, written: str, expected: int | Decimal
) -> None:
    lookback = load_project(_write(tmp_path, _decimal_table(written))).tables[0].lookback
    assert lookback == expected
    assert type(lookback) is type(expected)


def test_an_unquoted_decimal_start_keeps_every_digit(tmp_path: Path) -> None:
    config = _decimal_table("1", start="12345678901234567890.0000000010")
    assert load_project(_write(tmp_path, config)).tables[0].start == (
        "12345678901234567890.0000000010"
    )


@pytest.mark.parametrize(
    ("cursor_type", "lookback", "expected"),
    [
        (CursorType.DECIMAL, Decimal("0.5"), Decimal("0.5")),
        (CursorType.DECIMAL, 3, 3),
        (CursorType.INTEGER, 3, 3),
        (CursorType.TIMESTAMP, "90s", timedelta(seconds=90)),
        (CursorType.DATE, "2d", timedelta(days=2)),
    ],
)
def test_a_lookback_means_cursor_units_or_a_duration(
    cursor_type: CursorType, lookback: str | int | Decimal, expected: object
) -> None:
    assert lookback_for(cursor_type, lookback) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1.5h", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "sales.orders:created:date",
            {
                "name": "orders",
                "source": "shop",
                "table": "sales.orders",
                "cursor": {"column": "created", "type": "date"},
                "mode": "append",
            },
        ),
        (
            "sales.orders:created:date:i@2025-01-01!upsert",
            {
                "name": "orders",
                "source": "shop",
                "table": "sales.orders",
                "cursor": {"column": "created", "type": "date"},
                "start": "2025-01-01",
                "mode": "merge",
            },
        ),
        (
            "landing/sales.returns:at:timestamptz:e",
            {"name": "returns", "source": "landing", "table": "sales.returns", "mode": "append"},
        ),
    ],
)
def test_lakexpress_shorthand_expands_to_a_table_entry(text: str, expected: dict[str, Any]) -> None:
    assert expand_shorthand(text, ["shop"]) == expected


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("orders", "'orders' is not a table entry"),
        (
            "sales.orders:created:date",
            "doesn't say which source to read; write <source>/sales.orders:created:date",
        ),
    ],
)
def test_bad_shorthand_says_how_to_write_it(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_project(_write(tmp_path, {**VALID, "tables": [entry]}))


def test_operations_settings_resolve(tmp_path: Path) -> None:
    project = load_project(
        _write(
            tmp_path,
            _with_table(
                schedule=None,
                sensor={"interval": "30s"},
                automation={"on_cron": "0 * * * *"},
                checks={"freshness": "2h", "reconcile_counts": 0.01},
                exclude_columns=["secret"],
            ),
        )
    )
    table = project.tables[0]
    assert (table.sensor.interval, table.sensor.running) == (timedelta(seconds=30), True)
    assert table.automation == "0 * * * *"
    assert (table.freshness, table.reconcile_tolerance, table.exclude_columns) == (
        timedelta(hours=2),
        0.01,
        ("secret",),
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"automation": "often"}, "field 'automation': use eager, on_missing, or {on_cron:"),
        ({"automation": "eager"}, "field 'automation': choose either `schedule:` or `automation:`"),
        ({"sensor": {"interval": "soon"}}, "field 'sensor.interval': 'soon' is not a duration"),
        (
            {"mode": "append", "checks": {"reconcile_counts": 0.1}},
            "field 'checks.reconcile_counts': compares row counts of merge tables only",
        ),
        (
            {"mode": "append", "checks": {"key_audit": "0 3 * * *"}},
            "field 'checks.key_audit': audits the primary key of merge tables only",
        ),
        (
            {"mode": "append", "checks": {"key_unique_blocking": False}},
            "field 'checks.key_unique_blocking': primary_key_unique checks merge tables only",
        ),
        (
            {"checks": {"key_audit": "nightly"}},
            "field 'checks.key_audit': 'nightly' is not a cron expression",
        ),
        (
            {"columns": ["a"], "exclude_columns": ["b"]},
            "field 'exclude_columns': give either `columns:` or `exclude_columns:`",
        ),
    ],
)
def test_bad_operations_settings_are_named(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_project(_write(tmp_path, _with_table(**changes)))
    assert message in str(raised.value)
