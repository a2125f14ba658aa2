"""The validated project: frozen pydantic models that parse their own values.

What the YAML says is validated and resolved in one step, so the rest of the package works with
these models directly: durations are `timedelta`s, paths are absolute, a table's `source` is the
source's model, literals stay literals. The loader (`loading.py`) passes what a model can't know
on its own through the validation context: the configuration file's folder (`base`), the
validated sources (`sources`), the project's `key_prefix`, and the jars the project's Spark
sessions need (`jars`, from `jvm.jars_needed`). Rules that need the cursor's type live in
`rules.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from incremental_assets.config.durations import DURATION
from incremental_assets.config.fields import Cron, Duration, FrozenModel, OptionText, cron
from incremental_assets.config.lake import LakeSpec, MergeWrites
from incremental_assets.config.sources import FilesSourceSpec, SourceSpec
from incremental_assets.cursor import CursorType, cursor_type_from_name, parse_decimal
from incremental_assets.errors import CursorError, nearest
from incremental_assets.jvm import jars_needed, listed, with_jars

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Mode(StrEnum):
    APPEND = "append"
    MERGE = "merge"
    FULL_REFRESH = "full_refresh"


class SparkSpec(FrozenModel):
    master: str = Field("local[*]", description="Any Spark master URL.")
    app_name: str = Field("incremental_assets", description="spark.app.name")
    conf: dict[str, OptionText] = Field(
        default_factory=dict,
        description="Spark configuration, passed as is; the project's jars, `packages` and "
        "Iceberg's SQL extensions are added.",
    )
    packages: tuple[str, ...] = Field(
        (),
        description="Maven coordinates for spark.jars.packages, resolved by Spark (Ivy) from "
        "Maven Central. The project's own jars (Iceberg, the JDBC drivers) are not needed here.",
    )
    jars: tuple[str, ...] = Field(
        (),
        description="Jar files for spark.jars, beside the ones the project gets from "
        "`incremental-assets jars fetch`.",
    )
    remote: str | None = Field(
        None,
        description="A Spark Connect server, sc://host:15002. The server holds the JDBC driver; "
        "master and packages then describe the server, not this process.",
    )
    engine: Literal["local", "shared"] = Field(
        "local",
        description="shared: runs use the engine `incremental-assets engine start` keeps warm "
        "under DAGSTER_HOME when it is up, else a session of their own.",
    )

    @field_validator("remote")
    @classmethod
    def _connect_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            raise ValueError(f"'{value}' is not a Spark Connect URL; write sc://host:15002")
        return value

    @model_validator(mode="before")
    @classmethod
    def _with_jars(cls, data: Any, info: ValidationInfo) -> Any:
        """`packages` and `jars` in `conf`, with the project's jars and Iceberg's extensions
        (`jvm.with_jars`): the jars the loader found the project needs (context `jars`), else
        the ones every project needs."""
        if not isinstance(data, Mapping) or not isinstance(data.get("conf", {}), Mapping):
            return data
        conf = dict(data.get("conf") or {})
        jars = [*(data.get("jars") or []), *listed(conf.get("spark.jars"))]
        packages = list(
            dict.fromkeys([*(data.get("packages") or []), *listed(conf.get("spark.jars.packages"))])
        )
        if packages:
            conf["spark.jars.packages"] = ",".join(map(str, packages))
        if jars:
            conf["spark.jars"] = ",".join(dict.fromkeys(map(str, jars)))
        needed = (info.context or {}).get("jars")
        conf = with_jars(conf, jars_needed((), "", {}) if needed is None else needed)
        conf.setdefault("spark.sql.session.timeZone", "UTC")
        return {**data, "packages": packages, "conf": conf}


class CursorSpec(FrozenModel):
    column: str
    declared_type: CursorType | None = Field(None, alias="type")

    @field_validator("declared_type", mode="before", json_schema_input_type=str | None)
    @classmethod
    def _known_type(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return cursor_type_from_name(value)
            except CursorError as exc:
                raise ValueError(str(exc)) from None
        return value


class SensorSpec(FrozenModel):
    interval: Duration = timedelta(minutes=5)
    running: bool = True


class ChecksSpec(FrozenModel):
    freshness: Duration | None = Field(
        None, description="The cursor (or last success) may be at most this old."
    )
    reconcile_counts: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Merge tables: source and lake row counts may differ by this fraction.",
    )
    key_unique_blocking: bool = Field(
        True,
        description="Merge tables: a failed primary_key_unique fails the run's step after "
        "recording it, so assets downstream of the table in the run don't run. false: it only "
        "shows.",
    )
    key_audit: Cron | None = Field(
        None,
        description="Merge tables: on this cron (UTC), check every lake file for keys held "
        "twice, without loading.",
    )
    log_retained_mb: int = Field(
        1024,
        gt=0,
        description="`capture: log` tables: warn when the table's replication slot keeps more "
        "than this much of the database's log (MB), which the server can't remove.",
    )


AUTOMATION_HINT = 'use eager, on_missing, or {on_cron: "0 * * * *"}'


class _OnCron(FrozenModel):
    on_cron: Cron


_AutomationInput = Literal["eager", "on_missing"] | _OnCron | None
SENSOR_HINT = "use true (poll every 5m), or {interval: 1m}"


class TableSpec(FrozenModel):
    """One table: the YAML entry, validated, with its source resolved and its values parsed."""

    name: str = Field(pattern=NAME_PATTERN)
    source: SourceSpec
    mode: Mode
    table: str | None = None
    query: str | None = None
    cursor: CursorSpec | None = None
    primary_key: tuple[str, ...] = ()
    start: str | None = None
    # A duration (`5m`) for time cursors, else exact cursor units: int when whole, else Decimal.
    lookback: str | int | Decimal | None = None
    safety_lag: Duration | None = None
    delete_column: str | None = None
    schedule: Cron | None = None
    timezone: str = "UTC"
    description: str | None = None
    schema_ddl: str | None = Field(None, alias="schema")
    read_options: dict[str, OptionText] = Field(default_factory=dict, alias="options")
    # Merge tables: None chooses from the table's size at its first load (`writers/buckets.py`).
    buckets: int | None = Field(None, gt=0, le=4096)
    bucket_rows: int | None = Field(None, gt=0)
    key_prefix: tuple[str, ...] = ()
    null_cursor: Literal["error", "include", "exclude"] = "error"
    future_tolerance: Duration = timedelta(0)
    transaction_cap: bool = True
    deletes: Literal["reconcile"] | None = None
    reconcile_every: int = Field(1, ge=1)
    sensor: SensorSpec = SensorSpec(running=False)
    # `eager`, `on_missing`, or the cron string of `{on_cron: ...}`
    automation: Literal["eager", "on_missing"] | str | None = None
    checks: ChecksSpec = ChecksSpec()
    merge_writes: MergeWrites = "position_deletes"  # by default the lake's
    columns: tuple[str, ...] | None = None
    exclude_columns: tuple[str, ...] = ()
    # `log`: the changes are read from the database's log (`log_load.py`), not by a cursor column
    capture: Literal["cursor", "log"] = "cursor"
    # The replication slot and publication of a `capture: log` table; by default
    # `ia_<schema>_<table>` (slots are the server's, so two deployments name their own).
    slot: str | None = Field(None, pattern=r"^[a-z0-9_]{1,63}$")

    @model_validator(mode="before")
    @classmethod
    def _defaults_from_context(cls, data: Any, info: ValidationInfo) -> Any:
        """The project's key prefix and the lake's merge_writes, and the mode: merge when there
        is a primary key."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        context = info.context or {}
        for inherited in ("key_prefix", "merge_writes"):
            if inherited in context:
                data.setdefault(inherited, context[inherited])
        if data.get("mode") is None:
            data["mode"] = Mode.MERGE if data.get("primary_key") else Mode.APPEND
        return data

    @field_validator("source", mode="before")
    @classmethod
    def _named_source(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        sources: Mapping[str, object] = (info.context or {}).get("sources", {})
        if value not in sources:
            known = ", ".join(sorted(sources)) or "none valid"
            raise ValueError(f"'{value}' is not a source (sources: {known})")
        return sources[value]

    @field_validator("cursor", mode="before", json_schema_input_type=str | CursorSpec | None)
    @classmethod
    def _column_only(cls, value: object) -> object:
        return {"column": value} if isinstance(value, str) else value

    @field_validator(
        "primary_key",
        "exclude_columns",
        mode="before",
        json_schema_input_type=str | list[str] | None,
    )
    @classmethod
    def _column_list(cls, value: object) -> object:
        if value is None:
            return ()
        return (value,) if isinstance(value, str) else value

    @field_validator("start", mode="before", json_schema_input_type=str | int | float | None)
    @classmethod
    def _yaml_scalars_as_text(cls, value: Any) -> Any:
        # YAML turns unquoted 2025-01-01 into a date and 1.50 into a number; keep the text form.
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, int | Decimal) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("lookback", mode="before", json_schema_input_type=str | int | float | None)
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

    @field_validator("sensor", mode="before", json_schema_input_type=bool | SensorSpec | None)
    @classmethod
    def _sensor_switch(cls, value: object) -> object:
        """`sensor: true` polls every 5m; a mapping sets the interval; off unless given."""
        if value is None or isinstance(value, bool):
            return {"running": bool(value)}
        return value

    @field_validator("automation", mode="before", json_schema_input_type=_AutomationInput)
    @classmethod
    def _automation(cls, value: object) -> object:
        if isinstance(value, Mapping) and set(value) == {"on_cron"}:
            return cron(str(value["on_cron"]))
        if value is None or value in ("eager", "on_missing"):
            return value
        raise ValueError(AUTOMATION_HINT)

    @property
    def asset_key_path(self) -> tuple[str, ...]:
        return (*self.key_prefix, self.name)

    @property
    def source_object(self) -> str:
        """What the table reads, for messages: `public.orders`, `its query`, or a file path."""
        if self.query is not None:
            return "its query"
        return self.table or self.name

    @property
    def freshness(self) -> timedelta | None:
        return self.checks.freshness

    @property
    def collates_text(self) -> bool:
        """Whether the source orders a text cursor by a database's collation, which Spark can't
        reproduce (`cursor.order_of`); a files source's text is ordered by Spark itself."""
        return not isinstance(self.source, FilesSourceSpec)

    @property
    def reconcile_tolerance(self) -> float | None:
        return self.checks.reconcile_counts


def _lookback_setting(value: object) -> str | int | Decimal:
    """A duration (`5m`) as written, or an exact number of cursor units: int when whole."""
    if isinstance(value, str) and DURATION.match(value):
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


class Project(FrozenModel):
    path: str
    spark: SparkSpec
    lake: LakeSpec
    tables: tuple[TableSpec, ...]
    # A subclass of IncrementalAssetsTranslator, as package.module.Class: it names the assets.
    translator: str | None = None

    def table(self, name: str) -> TableSpec:
        for table in self.tables:
            if table.name == name:
                return table
        names = [t.name for t in self.tables]
        close = nearest(name, names)
        hint = f"; did you mean '{close}'?" if close else ""
        known = ", ".join(names) or "none"
        raise KeyError(f"no table named '{name}' in {self.path}{hint} (tables: {known})")
