"""The configuration: `incremental_assets.yaml` (or a component's attributes) -> a validated
`Project`.

loading.py   find and read the file, validate every section, report every problem at once
env.py       `${VAR}` substitution
shorthand.py LakeXpress's one-line table entries
problems.py  pydantic's errors in the configuration's own words
models.py    the frozen models the rest of the package works with
lake.py      the lake's settings (`lake:`)
sources.py   the source models: a JDBC database or a folder of files, and their driver classes
fields.py    the frozen base model and the value types that parse themselves
rules.py     the rules a table's settings follow together, at load and at run time
durations.py `30s`, `5m`, `2h`
outline.py   the file's JSON schema, for `dg` and editors
"""

from incremental_assets.config.durations import parse_duration
from incremental_assets.config.lake import LakeSpec, MergeTuning, MergeWrites
from incremental_assets.config.loading import (
    CONFIG_ENV,
    InvalidTable,
    LoadedConfig,
    config_from_mapping,
    config_path,
    load_config,
    load_project,
    project_from_mapping,
)
from incremental_assets.config.models import (
    CursorSpec,
    Mode,
    Project,
    SensorSpec,
    SparkSpec,
    TableSpec,
)
from incremental_assets.config.shorthand import expand_shorthand
from incremental_assets.config.sources import (
    FilesSourceSpec,
    JdbcSourceSpec,
    SourceSpec,
)

__all__ = [
    "CONFIG_ENV",
    "CursorSpec",
    "FilesSourceSpec",
    "InvalidTable",
    "JdbcSourceSpec",
    "LakeSpec",
    "LoadedConfig",
    "MergeTuning",
    "MergeWrites",
    "Mode",
    "Project",
    "SensorSpec",
    "SourceSpec",
    "SparkSpec",
    "TableSpec",
    "config_from_mapping",
    "config_path",
    "expand_shorthand",
    "load_config",
    "load_project",
    "parse_duration",
    "project_from_mapping",
]
