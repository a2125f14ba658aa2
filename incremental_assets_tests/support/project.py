"""A test's project: write its incremental_assets.yaml, materialize a table, read the lake back.

`ProjectBuilder` (the `make_project` fixture) writes the common case, one source `shop` on the
test's database and one table on it, so a test file states only its table's defaults. Its lake
names its format, plain Parquet unless the test asks for another. The readers below read either
format.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, get_args

import dagster as dg
import pyarrow as pa
import pyarrow.dataset as pads
import yaml

from incremental_assets.config import Project, load_project
from incremental_assets.in_process import materialize_tables
from incremental_assets.lake.table import LakeFormat
from incremental_assets.metadata import TableMetadata
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.cli import write_cli_config

SOURCE = "shop"
SHIPPED_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "dagster.yaml"
LAKE_FORMATS: tuple[LakeFormat, ...] = get_args(LakeFormat)


class SourceHandle(Protocol):
    """A test's database: a PostgreSQL schema, a MariaDB database or a `SourceDb` over either."""

    @property
    def name(self) -> str: ...

    def source(self, **extra: Any) -> dict[str, Any]: ...


def write_project(directory: Path, config: Mapping[str, Any]) -> Project:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "incremental_assets.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return load_project(path)


@dataclass
class Run:
    success: bool
    metadata: dict[str, Any]
    failure: str | None
    run_id: str


def materialize(
    project: Project,
    table: str,
    instance: dg.DagsterInstance,
    spark_resource: IncrementalSparkResource,
    full_refresh: bool = False,
) -> Run:
    """A run of `table`, as `incremental-assets run` makes it (under the pool guard)."""
    result = materialize_tables(
        project,
        [project.table(table)],
        instance,
        op_config={"full_refresh": full_refresh},
        spark=spark_resource,
    )
    metadata: dict[str, Any] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization  # type: ignore[union-attr]
        metadata = TableMetadata.extract(materialization.metadata).values()
    failure = None
    for event in result.all_events:
        if event.is_step_failure:
            failure = event.step_failure_data.error.message  # type: ignore[union-attr]
    return Run(result.success, metadata, failure, result.run_id)


def shipped_home(home: Path) -> Path:
    """A Dagster home holding the project's shipped dagster.yaml (each table's pool one run)."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(SHIPPED_DAGSTER_YAML, home / "dagster.yaml")
    return home


# The storage of an empty instance, made once per process for each dagster.yaml (None: none).
_EMPTY_HOMES: dict[Path | None, Path] = {}


def new_instance_home(home: Path, dagster_yaml: Path | None = SHIPPED_DAGSTER_YAML) -> Path:
    """`home` holding a new, empty instance: a copy of `dagster_yaml` (by default the shipped
    one; None: none), and the SQLite runs, events and schedules Dagster makes for an empty home.
    Dagster makes those once per process (every table and migration of three databases, about a
    second on a busy machine); each new home gets a copy of the files (a few milliseconds)."""
    empty = _EMPTY_HOMES.get(dagster_yaml)
    if empty is None:
        root = Path(tempfile.mkdtemp(prefix="ia-empty-instance-"))
        atexit.register(shutil.rmtree, root, True)
        empty = root / "home"
        empty.mkdir()
        if dagster_yaml is not None:
            shutil.copy(dagster_yaml, empty / "dagster.yaml")
        dg.DagsterInstance.from_config(str(empty)).dispose()  # makes the storage
        _EMPTY_HOMES[dagster_yaml] = empty
    shutil.copytree(empty, home, dirs_exist_ok=True)
    return home


def pool_holders(instance: dg.DagsterInstance, table: str) -> set[str]:
    """The runs holding a slot of the table's pool."""
    info = instance.event_log_storage.get_concurrency_info(f"incremental_assets/{table}")
    return {slot.run_id for slot in info.claimed_slots}


def latest_metadata(instance: dg.DagsterInstance, table: str) -> dict[str, Any]:
    event = instance.get_latest_materialization_event(dg.AssetKey(table))
    if event is None or event.asset_materialization is None:
        return {}
    return TableMetadata.extract(event.asset_materialization.metadata).values()


def read_lake(lake_dir: Path, table: str, identifier: str | None = None) -> pa.Table:
    """The table as its readers read it: a plain Parquet folder with pyarrow, an Iceberg table
    (one whose folder holds `metadata/`) with PyIceberg through the lake's default catalog, by
    `identifier` (by default `incremental_assets.<table>`)."""
    if (lake_dir / table / "metadata").is_dir():
        return iceberg_table(lake_dir, table, identifier).scan().to_arrow()
    return pads.dataset(str(lake_dir / table), partitioning="hive", format="parquet").to_table()


def iceberg_table(lake_dir: Path, table: str, identifier: str | None = None) -> Any:
    """The PyIceberg table of `table` in the lake's default catalog (SQLite in the lake)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("incremental_assets", uri=f"sqlite:///{lake_dir}/_catalog.db")
    return catalog.load_table(identifier or f"incremental_assets.{table}")


def rows_by(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    data = table.select(columns).to_pylist()
    return sorted(tuple(row[c] for c in columns) for row in data)


def lake_files(lake_dir: Path, table: str) -> list[str]:
    """The names of the table's data files: those in the folder, or in the Iceberg snapshot."""
    return sorted(path.name for path in lake_file_paths(lake_dir, table))


def lake_file_paths(lake_dir: Path, table: str) -> list[Path]:
    """The table's data files on disk: the folder's, or those of the current Iceberg snapshot
    (in its `data/`; not its delete files)."""
    if (lake_dir / table / "metadata").is_dir():
        uris = iceberg_table(lake_dir, table).inspect.data_files()["file_path"].to_pylist()
        return sorted(Path(uri.removeprefix("file://").removeprefix("file:")) for uri in uris)
    return sorted((lake_dir / table).glob("part-*.parquet"))


@dataclass(frozen=True)
class ProjectBuilder:
    """Writes `directory`/incremental_assets.yaml: source `shop` on `db`, and one table.

    `table` is the table's name, or a mapping of a test file's defaults with its `name`; the
    keyword settings override them. The table reads `<db>.<name>`, unless a `query` is given.
    `source` adds properties to the source, `lake` settings to the lake, whose `format` is
    `lake_format` unless `lake` names one.
    """

    directory: Path
    lake_format: LakeFormat = "parquet"

    def __call__(
        self,
        db: SourceHandle,
        table: str | Mapping[str, Any],
        /,
        *,
        source: Mapping[str, Any] | None = None,
        lake: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> Project:
        return write_project(
            self.directory, self.config(db, table, source=source, lake=lake, **settings)
        )

    def config(
        self,
        db: SourceHandle,
        table: str | Mapping[str, Any],
        /,
        *,
        source: Mapping[str, Any] | None = None,
        lake: Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> dict[str, Any]:
        """The project as a mapping, for a test that changes it before writing it."""
        return {
            "lake": {
                "path": str(self.directory / "lake"),
                "format": self.lake_format,
                **(lake or {}),
            },
            "sources": {SOURCE: db.source(**(source or {}))},
            "tables": [_table_entry(db, table, settings)],
        }

    def cli_config(
        self,
        db: SourceHandle,
        table: str | Mapping[str, Any],
        /,
        *,
        remote: str | None = None,
        **settings: Any,
    ) -> Path:
        """The same project for runs in a subprocess (see `write_cli_config`)."""
        entry = _table_entry(db, table, settings)
        return write_cli_config(
            self.directory, {SOURCE: db.source()}, [entry], remote=remote, format=self.lake_format
        )


def _table_entry(
    db: SourceHandle, table: str | Mapping[str, Any], settings: Mapping[str, Any]
) -> dict[str, Any]:
    defaults = {"name": table} if isinstance(table, str) else dict(table)
    name = defaults["name"]
    entry = {"name": name, "source": SOURCE, "table": f"{db.name}.{name}", **defaults, **settings}
    if "query" in entry:
        entry.pop("table")
    return entry
