"""The resolved project: frozen values the rest of the package works with.

`config.py` turns the YAML into these after validation: secrets substituted, paths made absolute,
durations parsed, table shorthands expanded. Nothing here knows about YAML or pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from enum import StrEnum

from incremental_assets.cursor import CursorType


class Mode(StrEnum):
    APPEND = "append"
    MERGE = "merge"
    FULL_REFRESH = "full_refresh"


@dataclass(frozen=True)
class JdbcSourceSpec:
    name: str
    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    driver: str = "org.postgresql.Driver"
    properties: Mapping[str, str] = field(default_factory=dict)
    fetchsize: int = 10_000
    max_partitions: int | None = None
    rows_per_partition: int = 250_000

    kind = "postgres"

    def redacted_url(self) -> str:
        return self.url.split("?", 1)[0]


@dataclass(frozen=True)
class FilesSourceSpec:
    name: str
    path: str
    format: str = "parquet"
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.format


SourceSpec = JdbcSourceSpec | FilesSourceSpec


@dataclass(frozen=True)
class CursorSpec:
    column: str
    declared_type: CursorType | None = None


@dataclass(frozen=True)
class SensorSpec:
    interval: timedelta = timedelta(minutes=5)
    running: bool = False


@dataclass(frozen=True)
class TableSpec:
    name: str
    source: SourceSpec
    mode: Mode
    table: str | None = None
    query: str | None = None
    cursor: CursorSpec | None = None
    primary_key: tuple[str, ...] = ()
    start: str | None = None
    # A duration (`5m`) for time cursors, else exact cursor units: int when whole, else Decimal.
    lookback: str | int | Decimal | None = None
    safety_lag: timedelta | None = None
    delete_column: str | None = None
    schedule: str | None = None
    timezone: str = "UTC"
    description: str | None = None
    schema_ddl: str | None = None
    read_options: Mapping[str, str] = field(default_factory=dict)
    buckets: int = 16
    bucket_rows: int = 1_000_000
    key_prefix: tuple[str, ...] = ()
    null_cursor: str = "error"  # error | include | exclude
    future_tolerance: timedelta | None = timedelta(0)
    transaction_cap: bool = True
    deletes: str | None = None  # None | "reconcile"
    reconcile_every: int = 1
    sensor: SensorSpec = field(default_factory=SensorSpec)
    automation: str | None = None  # "eager", "on_missing" or a cron string
    freshness: timedelta | None = None
    reconcile_tolerance: float | None = None
    columns: tuple[str, ...] | None = None
    exclude_columns: tuple[str, ...] = ()

    @property
    def asset_key_path(self) -> tuple[str, ...]:
        return (*self.key_prefix, self.name)

    @property
    def source_object(self) -> str:
        """What the table reads, for messages: `public.orders`, `a query`, or a file path."""
        if self.query is not None:
            return "its query"
        return self.table or self.name


@dataclass(frozen=True)
class LakeSpec:
    uri: str
    compression: str = "zstd"
    max_rows_per_file: int = 5_000_000
    lock_timeout: timedelta = timedelta(minutes=10)

    def table_uri(self, table_name: str) -> str:
        return f"{self.uri.rstrip('/')}/{table_name}"


@dataclass(frozen=True)
class SparkSpec:
    master: str = "local[*]"
    app_name: str = "incremental_assets"
    conf: Mapping[str, str] = field(default_factory=dict)
    remote: str | None = None  # a Spark Connect URL


@dataclass(frozen=True)
class Project:
    path: str
    spark: SparkSpec
    lake: LakeSpec
    tables: tuple[TableSpec, ...]

    def table(self, name: str) -> TableSpec:
        for table in self.tables:
            if table.name == name:
                return table
        known = ", ".join(t.name for t in self.tables) or "none"
        raise KeyError(f"no table named '{name}' in {self.path} (tables: {known})")
