"""Read `incremental_assets.yaml` (or a component's attributes) into a validated `Project`.

The file is found at `$INCREMENTAL_ASSETS_CONFIG`, else `./incremental_assets.yaml`. Relative
paths inside it are relative to the file's own folder. Every problem is collected, each naming its
place (a table, a source, `lake`), and reported at once in one `ConfigError`.

`load_config` also keeps apart the problems that are one table's (its own settings, or a source
only some tables use): the project loads with its valid tables, and each invalid one comes with
its problems (`InvalidTable`), for Dagster to show as an asset that fails. A problem of the whole
project (`lake`, `spark`, the top level, a source every table uses) still raises.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from incremental_assets.config.env import substitute_env
from incremental_assets.config.lake import LakeSpec
from incremental_assets.config.models import Project, SparkSpec, TableSpec
from incremental_assets.config.problems import problems_from, setting_names, unknown_setting
from incremental_assets.config.rules import table_problems
from incremental_assets.config.shorthand import expand_shorthand, table_place
from incremental_assets.config.sources import FilesSourceSpec, JdbcSourceSpec, SourceSpec
from incremental_assets.cursor import parse_decimal
from incremental_assets.errors import ConfigError, Problem
from incremental_assets.jvm import Jar, jars_needed

CONFIG_ENV = "INCREMENTAL_ASSETS_CONFIG"
DEFAULT_CONFIG = "incremental_assets.yaml"
_TOP_LEVEL = ("key_prefix", "spark", "lake", "sources", "tables", "translator")
_SOURCE: TypeAdapter[JdbcSourceSpec | FilesSourceSpec] = TypeAdapter(SourceSpec)


class TopLevel(BaseModel):
    """The settings of the whole file beside its sections."""

    key_prefix: list[str] | str | None = Field(None, description="Every table's asset key prefix.")
    translator: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$",
        description="A translator subclass that names the assets: package.module.Class.",
    )


# Every setting the file can hold, each section's: the nearest one to an unknown key.
_SETTINGS = setting_names(TopLevel, SparkSpec, LakeSpec, SourceSpec, TableSpec)


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG).resolve()


@dataclass(frozen=True)
class InvalidTable:
    """A table whose settings are wrong: the project loads without it, and its asset fails."""

    # Its settings as far as they are valid (the wrong ones left out, a source that isn't valid
    # replaced by a placeholder of its name): what names its asset, never what loads it.
    table: TableSpec
    problems: tuple[Problem, ...]
    file: str

    @property
    def error(self) -> ConfigError:
        return ConfigError(problems=self.problems, file=self.file)

    @property
    def left_out(self) -> str:
        """What a command that works on the other tables says of this one."""
        return (
            f"table '{self.table.name}' is left out until its configuration is fixed (the other "
            f"tables work as usual; a command that names it refuses it). {self.error}"
        )


@dataclass(frozen=True)
class LoadedConfig:
    """The project with its valid tables, the invalid tables, and every problem in file order."""

    project: Project
    invalid_tables: tuple[InvalidTable, ...] = ()
    problems: tuple[Problem, ...] = ()

    def whole(self) -> Project:
        """The project when every table is valid; else ConfigError listing every problem."""
        if self.problems:
            raise ConfigError(problems=self.problems, file=self.project.path)
        return self.project


def load_project(path: str | os.PathLike[str] | None = None) -> Project:
    """Read, validate and resolve the configuration. Raises ConfigError listing every problem."""
    return load_config(path).whole()


def load_config(path: str | os.PathLike[str] | None = None) -> LoadedConfig:
    """The configuration's valid tables and its invalid ones, each with its problems.

    Raises ConfigError, listing every problem, when one isn't about some of the tables only.
    """
    file = Path(path).resolve() if path is not None else config_path()
    return config_from_mapping(read_yaml(file), file)


def project_from_mapping(raw: Any, file: Path) -> Project:
    """The project a configuration mapping describes, as if read from `file`."""
    return config_from_mapping(raw, file).whole()


def config_from_mapping(raw: Any, file: Path) -> LoadedConfig:
    """`load_config` of a mapping, as if read from `file`."""
    substituted, problems = substitute_env(raw)
    read = _validate(substituted, file, problems)
    if read is None or read.spark is None or read.lake is None:
        raise ConfigError(problems=problems, file=file)
    valid, invalid = _valid_and_invalid(read, problems, file)
    project = Project(
        path=str(file),
        spark=read.spark,
        lake=read.lake,
        tables=tuple(valid),
        translator=read.translator,
    )
    return LoadedConfig(project, tuple(invalid), tuple(problems))


def read_yaml(file: Path) -> Any:
    if not file.is_file():
        raise ConfigError(
            f"No configuration file at {file}. Create incremental_assets.yaml in the working "
            f"directory, or point {CONFIG_ENV} at your file (see docs/configuration.md)."
        )
    try:
        return yaml.load(file.read_text(), Loader=ExactLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{file} is not valid YAML{where}: {problem}.") from None


class ExactLoader(yaml.SafeLoader):
    """SafeLoader that reads `1.50` as Decimal('1.50'): a `start` or `lookback` never becomes a
    float."""


def _exact_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Decimal | float:
    text = str(loader.construct_scalar(node)).replace("_", "")
    try:
        return parse_decimal(text)
    except ValueError:  # .inf, .nan, 1:30.5
        return loader.construct_yaml_float(node)


ExactLoader.add_constructor("tag:yaml.org,2002:float", _exact_number)


@dataclass
class _Entry:
    """One entry of `tables:`: how messages name it, the mapping it stands for, its model."""

    place: str
    mapping: dict[str, Any] | None
    table: TableSpec | None  # validated, whether or not its settings follow the rules together


@dataclass
class _Read:
    """Every section validated as far as it goes: None where a section is wrong."""

    spark: SparkSpec | None
    lake: LakeSpec | None
    translator: str | None
    tables: list[_Entry]
    context: dict[str, Any]


def _valid_and_invalid(
    read: _Read, problems: list[Problem], file: Path
) -> tuple[list[TableSpec], list[InvalidTable]]:
    """The tables without a problem, and the others with theirs. Raises ConfigError, listing every
    problem, when one is the project's, or a bad table has no valid name to give its asset."""
    owners = [_owners(problem, read.tables) for problem in problems]
    if None in owners:
        raise ConfigError(problems=problems, file=file)
    valid, invalid = [], []
    for index, entry in enumerate(read.tables):
        own = tuple(p for p, o in zip(problems, owners, strict=True) if o and index in o)
        if entry.table is not None and not own:
            valid.append(entry.table)
            continue
        stand_in = entry.table or _stand_in(entry, own, read.context)
        if stand_in is None or not own:
            raise ConfigError(problems=problems, file=file)
        invalid.append(InvalidTable(stand_in, own, str(file)))
    return valid, invalid


def _owners(problem: Problem, tables: list[_Entry]) -> list[int] | None:
    """The tables a problem is about, by index; None when it is about the project.

    A table's own problem is about it, unless another table has its name; a source's problem is
    about the tables that use it, unless that is every table or none.
    """
    named = [i for i, entry in enumerate(tables) if entry.place == problem.where]
    if len(named) == 1:
        return named
    users = [
        i
        for i, entry in enumerate(tables)
        if entry.mapping is not None and f"source '{entry.mapping.get('source')}'" == problem.where
    ]
    return users if 0 < len(users) < len(tables) else None


def _stand_in(
    entry: _Entry, problems: Iterable[Problem], context: dict[str, Any]
) -> TableSpec | None:
    """The table as far as it is valid, to name its asset: its wrong settings left out, a source
    that isn't valid replaced by a placeholder of the same name. None without a valid name."""
    if entry.mapping is None:
        return None
    wrong = {re.split(r"[.\[]", p.field)[0] for p in problems if p.where == entry.place}
    kept = {k: v for k, v in entry.mapping.items() if k not in wrong}
    sources = context.get("sources", {})
    name = str(kept.get("source"))
    if name not in sources:
        placeholder = FilesSourceSpec.model_validate({"name": name, "path": "."}, context=context)
        sources = {**sources, name: placeholder}
    try:
        return TableSpec.model_validate(
            {**kept, "source": name}, context={**context, "sources": sources}
        )
    except ValidationError:
        return None


def _validate(raw: Any, file: Path, problems: list[Problem]) -> _Read | None:
    if not isinstance(raw, dict):
        problems.append(Problem("the file", "", "must be a mapping with lake, sources and tables"))
        return None
    problems += [
        Problem("top level", str(k), unknown_setting(str(k), _TOP_LEVEL))
        for k in raw
        if k not in _TOP_LEVEL
    ]
    context: dict[str, Any] = {"base": file.parent}
    top = {k: raw.get(k) for k in ("key_prefix", "translator")}
    found = _validated(TopLevel, top, "top level", problems, context) or TopLevel()
    prefix = found.key_prefix
    context["key_prefix"] = tuple([prefix] if isinstance(prefix, str) else prefix or [])
    sources = _validated_sources(raw.get("sources"), problems, context)
    context["sources"] = sources
    lake_problems: list[Problem] = []
    lake = _required(LakeSpec, raw.get("lake"), "lake", lake_problems, context)
    context["jars"] = _jars(sources.values(), lake)
    if lake is not None:
        context["merge_writes"] = lake.merge_writes
    spark = _validated(SparkSpec, raw.get("spark") or {}, "spark", problems, context)
    problems += lake_problems
    tables = _validated_tables(raw.get("tables"), raw.get("sources"), problems, context)
    return _Read(spark, lake, found.translator, tables, context)


def _jars(sources: Iterable[SourceSpec], lake: LakeSpec | None) -> tuple[Jar, ...]:
    """The jars the project's Spark sessions need, for its sources and its lake."""
    kinds = [s.kind for s in sources if isinstance(s, JdbcSourceSpec) and s.default_driver]
    return jars_needed(kinds, lake.path if lake else "", lake.catalog if lake else {})


def _validated(
    model: type[BaseModel] | TypeAdapter[Any],
    data: Any,
    where: str,
    problems: list[Problem],
    context: dict[str, Any],
) -> Any:
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(data, context=context)
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        problems.extend(problems_from(exc, where, _SETTINGS))
        return None


def _required(
    model: type[BaseModel], data: Any, where: str, problems: list[Problem], context: dict[str, Any]
) -> Any:
    if data is None:
        problems.append(Problem("top level", where, "is required"))
        return None
    return _validated(model, data, where, problems, context)


def _validated_sources(
    raw: Any, problems: list[Problem], context: dict[str, Any]
) -> dict[str, JdbcSourceSpec | FilesSourceSpec]:
    if not isinstance(raw, dict) or not raw:
        problems.append(
            Problem("top level", "sources", "define at least one source (type: jdbc or files)")
        )
        return {}
    sources = {}
    for name, entry in raw.items():
        named = {**entry, "name": str(name)} if isinstance(entry, dict) else entry
        source = _validated(_SOURCE, named, f"source '{name}'", problems, context)
        if source is not None:
            sources[str(name)] = source
    return sources


def _validated_tables(
    raw: Any, raw_sources: Any, problems: list[Problem], context: dict[str, Any]
) -> list[_Entry]:
    if not isinstance(raw, list) or not raw:
        problems.append(Problem("top level", "tables", "list at least one table to load"))
        return []
    names = list(raw_sources) if isinstance(raw_sources, dict) else []
    # A source that is there but wrong is reported as itself, not as "not a source" again.
    wrong_sources = {n for n in names if n not in context["sources"]}
    entries, seen = [], set()
    for index, entry in enumerate(raw):
        where = table_place(entry, index)
        mapping = _table_mapping(entry, where, names, problems)
        found: list[Problem] = []
        table = None if mapping is None else _validated(TableSpec, mapping, where, found, context)
        source = mapping.get("source") if mapping is not None else None
        problems += [p for p in found if not (p.field == "source" and source in wrong_sources)]
        entries.append(_Entry(where, mapping, table))
        if table is None:
            continue
        if table.name in seen:
            problems.append(
                Problem(where, "name", "is used by another table; names must be unique")
            )
        seen.add(table.name)
        problems += [Problem(where, p.field, p.message) for p in table_problems(table)]
    return entries


def _table_mapping(
    entry: Any, where: str, sources: list[str], problems: list[Problem]
) -> dict[str, Any] | None:
    """A `tables:` entry as a mapping (a one-line shorthand expanded), or None with a problem."""
    if isinstance(entry, str):
        try:
            return expand_shorthand(entry, sources)
        except ValueError as exc:
            problems.append(Problem(where, "", str(exc)))
            return None
    if not isinstance(entry, dict):
        problems.append(
            Problem(where, "", "must be a mapping with name, source and table or query")
        )
        return None
    return entry
