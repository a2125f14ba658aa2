"""Load `incremental_assets.yaml`: validate it, report every problem at once, resolve it.

The file is found at `$INCREMENTAL_ASSETS_CONFIG`, else `./incremental_assets.yaml`. Relative
paths inside it are relative to the file's own directory. `${VAR}` is replaced by the environment
variable VAR (`$${` writes a literal `${`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails

from incremental_assets.cursor import (
    CursorType,
    cursor_type_from_name,
    parse_cursor,
    parse_decimal,
)
from incremental_assets.errors import ConfigError, CursorError
from incremental_assets.spec import (
    CursorSpec,
    FilesSourceSpec,
    JdbcSourceSpec,
    LakeSpec,
    Mode,
    Project,
    SensorSpec,
    SourceSpec,
    SparkSpec,
    TableSpec,
)
from incremental_assets.window import Lookback

CONFIG_ENV = "INCREMENTAL_ASSETS_CONFIG"
DEFAULT_CONFIG = "incremental_assets.yaml"
POSTGRES_PACKAGE = "org.postgresql:postgresql:42.7.13"
# pgjdbc's optional checker-qual dependency is not in every offline Maven cache.
POSTGRES_EXCLUDES = "org.checkerframework:checker-qual"

_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d|w)\s*$")
_DURATION_UNITS = {
    "us": timedelta(microseconds=1),
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def parse_duration(text: str) -> timedelta:
    """`30s`, `5m`, `2h`, `1d`, `250ms` -> timedelta. Raises ValueError with the accepted forms."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"'{text}' is not a duration; write a number and a unit: 30s, 5m, 2h, 1d")
    micros = Decimal(match.group(1)) * (
        _DURATION_UNITS[match.group(2)] // timedelta(microseconds=1)
    )
    return timedelta(microseconds=int(micros))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkSettings(_Model):
    master: str = Field("local[*]", description="Any Spark master URL.")
    app_name: str = Field("incremental_assets", description="spark.app.name")
    conf: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Extra Spark configuration, passed as is."
    )
    packages: list[str] = Field(
        default_factory=list,
        description="Maven coordinates for spark.jars.packages (JDBC drivers). The PostgreSQL "
        "driver is added automatically when a jdbc:postgresql source exists.",
    )
    remote: str | None = Field(
        None,
        description="A Spark Connect server, sc://host:15002. The server holds the JDBC driver; "
        "master and packages then describe the server, not this process.",
    )

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            raise ValueError(f"'{value}' is not a Spark Connect URL; write sc://host:15002")
        return value


class LakeSettings(_Model):
    path: str = Field(description="Root of the Parquet lake: a local path or a Hadoop URI.")
    compression: Literal["zstd", "snappy", "gzip", "lz4", "none"] = "zstd"
    max_rows_per_file: int = Field(5_000_000, gt=0)
    lock_timeout: str = Field("10m", description="How long a second run waits for the table lock.")

    @field_validator("lock_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_duration(value)
        return value


class JdbcSourceSettings(_Model):
    type: Literal["jdbc"]
    url: str = Field(description="jdbc:postgresql://host:port/database")
    user: str | None = None
    password: SecretStr | None = None
    driver: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)
    fetchsize: int = Field(10_000, gt=0)
    max_partitions: int | None = Field(None, gt=0)
    rows_per_partition: int = Field(250_000, gt=0)

    @field_validator("url")
    @classmethod
    def _postgres_only(cls, url: str) -> str:
        if not url.startswith("jdbc:postgresql:"):
            raise ValueError(
                f"'{url}' is not a PostgreSQL JDBC URL; this version reads jdbc:postgresql:// "
                "sources (write jdbc:postgresql://host:5432/database)"
            )
        return url


class FilesSourceSettings(_Model):
    type: Literal["files"]
    path: str
    format: Literal["parquet", "csv", "json"] = "parquet"
    options: dict[str, str | int | bool] = Field(default_factory=dict)


SourceSettings = Annotated[JdbcSourceSettings | FilesSourceSettings, Field(discriminator="type")]


class CursorSettings(_Model):
    column: str
    type: str | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                cursor_type_from_name(value)
            except CursorError as exc:
                raise ValueError(str(exc)) from None
        return value


def _check_cron(value: str) -> str:
    from dagster._utils.schedules import is_valid_cron_string

    if not is_valid_cron_string(value):
        raise ValueError(f"'{value}' is not a cron expression such as '0 */2 * * *'")
    return value


def _check_duration(value: str | None) -> str | None:
    if value is not None:
        parse_duration(value)
    return value


class SensorSettings(_Model):
    interval: str = "5m"
    running: bool = True

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        _check_duration(value)
        return value


class OnCron(_Model):
    on_cron: str

    @field_validator("on_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return _check_cron(value)


class ChecksSettings(_Model):
    freshness: str | None = Field(
        None, description="The cursor (or last success) may be at most this old."
    )
    reconcile_counts: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Merge tables: source and lake row counts may differ by this fraction.",
    )

    @field_validator("freshness")
    @classmethod
    def _freshness(cls, value: str | None) -> str | None:
        return _check_duration(value)


class TableSettings(_Model):
    name: str = Field(pattern=_NAME)
    source: str
    table: str | None = None
    query: str | None = None
    mode: Literal["append", "merge", "full_refresh"] | None = None
    cursor: str | CursorSettings | None = None
    primary_key: list[str] | str | None = None
    start: str | None = None
    lookback: str | int | Decimal | None = None
    safety_lag: str | None = None
    delete_column: str | None = None
    schedule: str | None = None
    timezone: str = "UTC"
    description: str | None = None
    schema_ddl: str | None = Field(None, alias="schema")
    options: dict[str, str | int | bool] = Field(default_factory=dict)
    buckets: int = Field(16, gt=0, le=4096)
    bucket_rows: int = Field(1_000_000, gt=0)
    null_cursor: Literal["error", "include", "exclude"] = "error"
    future_tolerance: str = "0s"
    transaction_cap: bool = True
    deletes: Literal["reconcile"] | None = None
    reconcile_every: int = Field(1, ge=1)
    sensor: bool | SensorSettings = False
    automation: Literal["eager", "on_missing"] | OnCron | None = None
    checks: ChecksSettings = ChecksSettings()
    columns: list[str] | None = None
    exclude_columns: list[str] = Field(default_factory=list)

    @field_validator("start", mode="before")
    @classmethod
    def _yaml_scalars_as_text(cls, value: Any) -> Any:
        # YAML turns unquoted 2025-01-01 into a date and 1.50 into a number; keep the text form.
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, int | Decimal) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("safety_lag", "future_tolerance")
    @classmethod
    def _lag(cls, value: str | None) -> str | None:
        return _check_duration(value)

    @field_validator("lookback", mode="before")
    @classmethod
    def _lookback(cls, value: Any) -> Any:
        return None if value is None else _lookback_setting(value)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"'{value}' is not an IANA time zone such as UTC or Europe/Paris"
            ) from None
        return value

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return None if value is None else _check_cron(value)


def _lookback_setting(value: object) -> str | int | Decimal:
    """A duration (`5m`) as written, or an exact number of cursor units: int when whole."""
    if isinstance(value, str) and _DURATION.match(value):
        return value
    try:
        if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
            raise ValueError("not a number")
        number = parse_decimal(str(value))
    except ValueError:
        raise ValueError(
            f"'{value}' is neither a duration nor a number; write a duration such as 5m for date "
            "and timestamp cursors, a number such as 1000 for integer and decimal cursors"
        ) from None
    if number < 0:
        raise ValueError(f"lookback can't be negative ({value})")
    return int(number) if number == number.to_integral_value() else number


def lookback_for(cursor_type: CursorType, lookback: str | int | Decimal) -> Lookback:
    """What a validated `lookback:` means for a cursor of this type; ValueError says what to write."""
    if cursor_type is CursorType.STRING:
        raise ValueError("string cursors have no distance to look back by; remove lookback")
    if cursor_type.is_temporal:
        if not isinstance(lookback, str):
            raise ValueError(
                f"{cursor_type.value} cursors look back by a duration, e.g. lookback: 5m"
            )
        return parse_duration(lookback)
    if isinstance(lookback, str):
        raise ValueError(f"{cursor_type.value} cursors look back by a number, e.g. lookback: 1000")
    if cursor_type is CursorType.INTEGER and isinstance(lookback, Decimal):
        raise ValueError(
            f"integer cursors can't look back by a fraction ({lookback}); write a whole number"
        )
    return lookback


class KeyPrefix(_Model):
    key_prefix: list[str] | str | None = None

    def as_tuple(self) -> tuple[str, ...]:
        value = self.key_prefix
        return tuple([value] if isinstance(value, str) else value or [])


_TOP_LEVEL = ("key_prefix", "spark", "lake", "sources", "tables")
_SOURCE_ADAPTER: TypeAdapter[JdbcSourceSettings | FilesSourceSettings] = TypeAdapter(SourceSettings)
_UNION_MEMBERS = {
    "str",
    "int",
    "bool",
    "list[str]",
    "CursorSettings",
    "SensorSettings",
    "OnCron",
    "literal['eager','on_missing']",
    "jdbc",
    "files",
}


@dataclass(frozen=True)
class Problem:
    where: str
    field: str
    message: str

    def render(self) -> str:
        place = f"{self.where}, field '{self.field}'" if self.field else self.where
        return f"{place}: {self.message}"


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG).resolve()


def load_project(path: str | os.PathLike[str] | None = None) -> Project:
    """Read, validate and resolve the configuration. Raises ConfigError listing every problem."""
    file = Path(path).resolve() if path is not None else config_path()
    raw = _read_yaml(file)
    unset: list[tuple[tuple[Any, ...], str]] = []
    substituted = _substitute_env(raw, (), unset)
    problems = [_unset_variable(raw, path, name) for path, name in unset]
    project = _validate(substituted, file, problems)
    if problems or project is None:
        raise ConfigError(_render_problems(file, problems))
    return project


def _read_yaml(file: Path) -> Any:
    if not file.is_file():
        raise ConfigError(
            f"No configuration file at {file}. Create incremental_assets.yaml in the working "
            f"directory, or point {CONFIG_ENV} at your file (see the README's configuration "
            "reference)."
        )
    try:
        return yaml.load(file.read_text(), Loader=_ExactLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{file} is not valid YAML{where}: {problem}.") from None


class _ExactLoader(yaml.SafeLoader):
    """SafeLoader that reads `1.50` as Decimal('1.50'): a `start` or `lookback` never becomes a float."""


def _exact_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Decimal | float:
    text = str(loader.construct_scalar(node)).replace("_", "")
    try:
        return parse_decimal(text)
    except ValueError:  # .inf, .nan, 1:30.5
        return loader.construct_yaml_float(node)


_ExactLoader.add_constructor("tag:yaml.org,2002:float", _exact_number)


def _substitute_env(
    node: Any, path: tuple[Any, ...], unset: list[tuple[tuple[Any, ...], str]]
) -> Any:
    """Replace `${VAR}` everywhere; collect (place, variable) for the ones that are not set."""
    if isinstance(node, dict):
        return {k: _substitute_env(v, (*path, k), unset) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute_env(v, (*path, i), unset) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name = match.group(1)
        if name in os.environ:
            return os.environ[name]
        unset.append((path, name))
        return ""

    return _ENV_REF.sub(replace, node)


def _unset_variable(raw: Any, path: tuple[Any, ...], name: str) -> Problem:
    """Name the place of an unset `${VAR}` the way every other message does."""
    message = (
        f"environment variable {name} is not set; export it before starting Dagster "
        f"(it is referenced as ${{{name}}})"
    )
    rest = ".".join(map(str, path[2:]))
    if len(path) >= 2 and path[0] == "sources":
        return Problem(f"source '{path[1]}'", rest, message)
    if len(path) >= 2 and path[0] == "tables":
        return Problem(_table_place(raw["tables"][path[1]], path[1]), rest, message)
    if path and path[0] in ("spark", "lake"):
        return Problem(str(path[0]), ".".join(map(str, path[1:])), message)
    return Problem("top level", ".".join(map(str, path)), message)


def _table_place(entry: Any, index: int) -> str:
    """How messages name a table: by its name, or by its position when it has none."""
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        return f"table '{entry['name']}'"
    shorthand = _SHORTHAND.match(entry.strip()) if isinstance(entry, str) else None
    if shorthand:
        return f"table '{_shorthand_name(shorthand)}'"
    return f"table #{index + 1}"


def _validate(raw: Any, file: Path, problems: list[Problem]) -> Project | None:
    if not isinstance(raw, dict):
        problems.append(Problem("the file", "", "must be a mapping with lake, sources and tables"))
        return None
    for key in raw:
        if key not in _TOP_LEVEL:
            problems.append(Problem("top level", str(key), _friendly("extra_forbidden", "")))
    spark = _validated(SparkSettings, raw.get("spark") or {}, "spark", problems)
    lake = _validated(LakeSettings, raw.get("lake"), "lake", problems)
    prefix = _validated(KeyPrefix, {"key_prefix": raw.get("key_prefix")}, "top level", problems)
    sources = _validated_sources(raw.get("sources"), file.parent, problems)
    tables_raw = raw.get("tables")
    if not isinstance(tables_raw, list) or not tables_raw:
        problems.append(Problem("top level", "tables", "list at least one table to load"))
        tables_raw = []
    source_names = list(raw.get("sources") or {}) if isinstance(raw.get("sources"), dict) else []
    tables = [
        _validated_table(entry, i, problems, source_names) for i, entry in enumerate(tables_raw)
    ]
    key_prefix = prefix.as_tuple() if prefix else ()
    specs = _resolve_tables([t for t in tables if t is not None], sources, key_prefix, problems)
    if problems or spark is None or lake is None:
        return None
    return Project(
        path=str(file),
        spark=_resolve_spark(spark, sources.values()),
        lake=_resolve_lake(lake, file.parent),
        tables=tuple(specs),
    )


def _validated(model: type[_Model], data: Any, where: str, problems: list[Problem]) -> Any:
    if data is None:
        problems.append(Problem("top level", where, "is required"))
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems.extend(_problems_from(exc, where))
        return None


def _validated_sources(raw: Any, base: Path, problems: list[Problem]) -> dict[str, SourceSpec]:
    if not isinstance(raw, dict) or not raw:
        problems.append(
            Problem("top level", "sources", "define at least one source (type: jdbc or files)")
        )
        return {}
    sources = {}
    for name, entry in raw.items():
        try:
            settings = _SOURCE_ADAPTER.validate_python(entry)
        except ValidationError as exc:
            problems.extend(_problems_from(exc, f"source '{name}'"))
            continue
        sources[str(name)] = _resolve_source(str(name), settings, base)
    return sources


_SHORTHAND = re.compile(
    r"^(?:(?P<source>[A-Za-z_]\w*)/)?(?P<table>[A-Za-z_][\w.]*):(?P<column>[A-Za-z_]\w*):(?P<type>[A-Za-z_]+)"
    r"(?::(?P<direction>[ie]))?(?:@(?P<start>[^!]+))?(?:!(?P<strategy>append|upsert))?$"
)


def expand_shorthand(text: str, sources: list[str]) -> dict[str, Any]:
    """`[source/]schema.table:column:type[:i|:e][@start][!append|!upsert]`, as LakeXpress writes it.

    `:e` excludes the table from incremental loading (a full refresh every run); `!upsert` is
    merge mode with the primary key read from the database.
    """
    match = _SHORTHAND.match(text.strip())
    if not match:
        raise ValueError(
            f"'{text}' is not a table entry; write a mapping, or schema.table:column:type[@start][!append|!upsert]"
        )
    parts = match.groupdict()
    source = parts["source"] or (sources[0] if len(sources) == 1 else None)
    if source is None:
        raise ValueError(f"'{text}' doesn't say which source to read; write <source>/{text}")
    entry: dict[str, Any] = {
        "name": _shorthand_name(match),
        "source": source,
        "table": parts["table"],
    }
    if parts["direction"] != "e":
        entry["cursor"] = {"column": parts["column"], "type": parts["type"]}
        if parts["start"]:
            entry["start"] = parts["start"]
    entry["mode"] = "merge" if parts["strategy"] == "upsert" else "append"
    return entry


def _shorthand_name(match: re.Match[str]) -> str:
    return match["table"].rsplit(".", 1)[-1]


def _validated_table(
    entry: Any, index: int, problems: list[Problem], sources: list[str]
) -> TableSettings | None:
    where = _table_place(entry, index)
    if isinstance(entry, str):
        try:
            entry = expand_shorthand(entry, sources)
        except ValueError as exc:
            problems.append(Problem(where, "", str(exc)))
            return None
    if not isinstance(entry, dict):
        problems.append(
            Problem(where, "", "must be a mapping with name, source and table or query")
        )
        return None
    return _validated(TableSettings, entry, where, problems)  # type: ignore[no-any-return]


def _problems_from(exc: ValidationError, where: str) -> list[Problem]:
    """One problem per field path; of a union's alternatives, only the most useful one."""
    problems: dict[str, Problem] = {}
    for error in _closest_alternatives(exc.errors(), 0):
        parts = [p for p in error["loc"] if p not in _UNION_MEMBERS]
        field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in parts).replace(
            ".[", "["
        )
        top = str(parts[0]) if parts else ""
        message = _friendly(error["type"], error["msg"], top)
        problems.setdefault(field, Problem(where, field, message))
    return list(problems.values())


def _closest_alternatives(errors: list[ErrorDetails], depth: int) -> list[ErrorDetails]:
    """Drop the complaints of every union alternative but the one the input came closest to.

    pydantic reports each alternative it tried (`cursor: {type: float}` fails as a string *and*
    as a mapping); errors outside unions, and every error of the chosen alternative, are kept.
    """
    kept: list[ErrorDetails] = []
    unions: dict[tuple[Any, ...], dict[Any, list[ErrorDetails]]] = {}
    for error in errors:
        loc = error["loc"]
        member = next((i for i in range(depth, len(loc)) if loc[i] in _UNION_MEMBERS), None)
        if member is None:
            kept.append(error)
        else:
            unions.setdefault(loc[:member], {}).setdefault(loc[member], []).append(error)
    for prefix, alternatives in unions.items():
        best = max(alternatives.values(), key=_closeness)
        kept += _closest_alternatives(best, len(prefix) + 1)
    return sorted(kept, key=errors.index)


def _closeness(alternative: list[ErrorDetails]) -> tuple[int, bool]:
    """Errors deeper in the input, then complaints about a value rather than its type, win."""
    deepest = max(len(error["loc"]) for error in alternative)
    about_value = any(not error["type"].endswith("_type") for error in alternative)
    return deepest, about_value


_FIELD_HINTS = {
    "automation": 'use eager, on_missing, or {on_cron: "0 * * * *"}',
    "sensor": "use true (poll every 5m), or {interval: 1m}",
}


def _friendly(kind: str, msg: str, field: str = "") -> str:
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known setting; check the spelling against the README's configuration reference"
    if kind == "union_tag_not_found":
        return "needs `type: jdbc` or `type: files`"
    if kind == "union_tag_invalid":
        return "has an unknown `type`; use jdbc or files"
    if kind in ("literal_error", "model_type", "bool_type") and field in _FIELD_HINTS:
        return _FIELD_HINTS[field]
    if kind == "string_pattern_mismatch":
        return "use letters, digits and underscores, not starting with a digit (it becomes the asset key)"
    return msg.removeprefix("Value error, ")


def _absolute(path: str, base: Path) -> str:
    scheme = urlparse(path).scheme
    if len(scheme) > 1:  # a URI such as s3a:// or hdfs://; one letter would be a Windows drive
        return path.rstrip("/")
    return str((base / path).resolve())


def _resolve_lake(lake: LakeSettings, base: Path) -> LakeSpec:
    return LakeSpec(
        uri=_absolute(lake.path, base),
        compression="uncompressed" if lake.compression == "none" else lake.compression,
        max_rows_per_file=lake.max_rows_per_file,
        lock_timeout=parse_duration(lake.lock_timeout),
    )


def _resolve_source(
    name: str, s: JdbcSourceSettings | FilesSourceSettings, base: Path
) -> SourceSpec:
    if isinstance(s, JdbcSourceSettings):
        return JdbcSourceSpec(
            name=name,
            url=s.url,
            user=s.user,
            password=s.password.get_secret_value() if s.password else None,
            driver=s.driver or "org.postgresql.Driver",
            properties=dict(s.properties),
            fetchsize=s.fetchsize,
            max_partitions=s.max_partitions,
            rows_per_partition=s.rows_per_partition,
        )
    return FilesSourceSpec(
        name=name,
        path=_absolute(s.path, base),
        format=s.format,
        options={k: _option_text(v) for k, v in s.options.items()},
    )


def _option_text(value: str | int | float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _resolve_spark(s: SparkSettings, sources: Iterable[SourceSpec]) -> SparkSpec:
    conf = {k: _option_text(v) for k, v in s.conf.items()}
    packages = list(s.packages)
    needs_postgres = any(isinstance(src, JdbcSourceSpec) for src in sources)
    if needs_postgres and not any(p.startswith("org.postgresql:") for p in packages):
        packages.append(POSTGRES_PACKAGE)
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
    if any(p.startswith("org.postgresql:") for p in packages):
        excludes = [e for e in conf.get("spark.jars.excludes", "").split(",") if e]
        conf["spark.jars.excludes"] = ",".join(dict.fromkeys([*excludes, POSTGRES_EXCLUDES]))
    conf.setdefault("spark.sql.session.timeZone", "UTC")
    return SparkSpec(master=s.master, app_name=s.app_name, conf=conf, remote=s.remote)


def _resolve_tables(
    tables: list[TableSettings],
    sources: Mapping[str, SourceSpec],
    key_prefix: tuple[str, ...],
    problems: list[Problem],
) -> list[TableSpec]:
    seen: set[str] = set()
    specs = []
    for table in tables:
        where = f"table '{table.name}'"
        if table.name in seen:
            problems.append(
                Problem(where, "name", "is used by another table; names must be unique")
            )
        seen.add(table.name)
        spec = _resolve_table(table, sources, key_prefix, where, problems)
        if spec is not None:
            specs.append(spec)
    return specs


def _resolve_table(
    t: TableSettings,
    sources: Mapping[str, SourceSpec],
    key_prefix: tuple[str, ...],
    where: str,
    problems: list[Problem],
) -> TableSpec | None:
    before = len(problems)
    source = sources.get(t.source)
    if source is None:
        known = ", ".join(sorted(sources)) or "none valid"
        problems.append(
            Problem(where, "source", f"'{t.source}' is not a source (sources: {known})")
        )
    cursor = _cursor_spec(t.cursor)
    primary_key = tuple([t.primary_key] if isinstance(t.primary_key, str) else t.primary_key or [])
    mode = Mode(t.mode) if t.mode else (Mode.MERGE if primary_key else Mode.APPEND)
    problems.extend(_table_rule_problems(t, source, cursor, primary_key, mode, where))
    if len(problems) > before or source is None:
        return None
    return TableSpec(
        name=t.name,
        source=source,
        mode=mode,
        table=t.table,
        query=t.query,
        cursor=cursor,
        primary_key=primary_key,
        start=t.start,
        lookback=t.lookback,
        safety_lag=parse_duration(t.safety_lag) if t.safety_lag else None,
        delete_column=t.delete_column,
        schedule=t.schedule,
        timezone=t.timezone,
        description=t.description,
        schema_ddl=t.schema_ddl,
        read_options={k: _option_text(v) for k, v in t.options.items()},
        buckets=t.buckets,
        bucket_rows=t.bucket_rows,
        key_prefix=key_prefix,
        null_cursor=t.null_cursor,
        future_tolerance=parse_duration(t.future_tolerance),
        transaction_cap=t.transaction_cap,
        deletes=t.deletes,
        reconcile_every=t.reconcile_every,
        sensor=_sensor_spec(t.sensor),
        automation=t.automation.on_cron if isinstance(t.automation, OnCron) else t.automation,
        freshness=parse_duration(t.checks.freshness) if t.checks.freshness else None,
        reconcile_tolerance=t.checks.reconcile_counts,
        columns=tuple(t.columns) if t.columns is not None else None,
        exclude_columns=tuple(t.exclude_columns),
    )


def _sensor_spec(sensor: bool | SensorSettings) -> SensorSpec:
    if isinstance(sensor, SensorSettings):
        return SensorSpec(parse_duration(sensor.interval), sensor.running)
    return SensorSpec(running=sensor)


def _cursor_spec(cursor: str | CursorSettings | None) -> CursorSpec | None:
    if cursor is None:
        return None
    if isinstance(cursor, str):
        return CursorSpec(column=cursor)
    declared = cursor_type_from_name(cursor.type) if cursor.type else None
    return CursorSpec(column=cursor.column, declared_type=declared)


def _table_rule_problems(
    t: TableSettings,
    source: SourceSpec | None,
    cursor: CursorSpec | None,
    primary_key: tuple[str, ...],
    mode: Mode,
    where: str,
) -> Iterator[Problem]:
    if isinstance(source, JdbcSourceSpec) and (t.table is None) == (t.query is None):
        yield Problem(
            where, "table", "give exactly one of `table` (schema.table) or `query` (a SELECT)"
        )
    if isinstance(source, FilesSourceSpec):
        if t.query is not None:
            yield Problem(
                where,
                "query",
                "files sources read `table` (a folder under the source path), not `query`",
            )
        if t.table is None:
            yield Problem(where, "table", "name the folder (or glob) under the source path to read")
    key_from_source = isinstance(source, JdbcSourceSpec) and t.query is None
    if mode is Mode.MERGE and not primary_key and not key_from_source:
        yield Problem(
            where,
            "primary_key",
            "merge mode needs the primary key columns, e.g. primary_key: [id] (only a jdbc "
            "`table:` may leave it out, to have it read from the database)",
        )
    if t.schedule and t.automation:
        yield Problem(where, "automation", "choose either `schedule:` or `automation:`, not both")
    if t.checks.reconcile_counts is not None and mode is not Mode.MERGE:
        yield Problem(where, "checks.reconcile_counts", "compares row counts of merge tables only")
    if t.columns is not None and t.exclude_columns:
        yield Problem(
            where, "exclude_columns", "give either `columns:` or `exclude_columns:`, not both"
        )
    if t.deletes == "reconcile" and mode is not Mode.MERGE:
        yield Problem(
            where,
            "deletes",
            "reconcile removes keys from a merge table; use mode: merge with a primary_key",
        )
    if t.delete_column and mode is not Mode.MERGE:
        yield Problem(
            where,
            "delete_column",
            "only merge mode removes deleted rows; use mode: merge or drop delete_column",
        )
    if cursor is None:
        for name in ("start", "lookback", "safety_lag"):
            if getattr(t, name) is not None:
                yield Problem(
                    where, name, "has no effect without a cursor; set `cursor:` or remove it"
                )
        return
    yield from _cursor_rule_problems(t, cursor.declared_type, where)


def _cursor_rule_problems(
    t: TableSettings, declared: CursorType | None, where: str
) -> Iterator[Problem]:
    """Checks that need the cursor type; when it is inferred, `load.py` makes them at run time."""
    if declared is None:
        return
    if t.safety_lag is not None and not declared.is_temporal:
        yield Problem(
            where, "safety_lag", f"applies to date and timestamp cursors, not {declared.value}"
        )
    if t.lookback is not None:
        try:
            lookback_for(declared, t.lookback)
        except ValueError as exc:
            yield Problem(where, "lookback", str(exc))
    if t.start is not None:
        try:
            parse_cursor(declared, t.start)
        except CursorError as exc:
            yield Problem(where, "start", str(exc))


def _render_problems(file: Path, problems: list[Problem]) -> str:
    count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
    lines = [f"Invalid configuration in {file} ({count}):"]
    lines += [f"  - {p.render()}" for p in problems]
    return "\n".join(lines)
