"""Read `incremental_assets.yaml` (or a component's attributes) into a validated `Project`.

The file is found at `$INCREMENTAL_ASSETS_CONFIG`, else `./incremental_assets.yaml`. Relative
paths inside it are relative to the file's own folder. Every problem is collected, each naming its
place (a table, a source, `lake`), and reported at once in one `ConfigError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from incremental_assets.config.env import substitute_env
from incremental_assets.config.models import LakeSpec, Project, SparkSpec, TableSpec
from incremental_assets.config.problems import UNKNOWN_SETTING, problems_from
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


class _TopLevel(BaseModel):
    key_prefix: list[str] | str | None = None
    translator: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$")


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG).resolve()


def load_project(path: str | os.PathLike[str] | None = None) -> Project:
    """Read, validate and resolve the configuration. Raises ConfigError listing every problem."""
    file = Path(path).resolve() if path is not None else config_path()
    return project_from_mapping(read_yaml(file), file)


def project_from_mapping(raw: Any, file: Path) -> Project:
    """The project a configuration mapping describes, as if read from `file`."""
    substituted, problems = substitute_env(raw)
    project = _validate(substituted, file, problems)
    if problems or project is None:
        raise ConfigError(problems=problems, file=file)
    return project


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
    """SafeLoader that reads `1.50` as Decimal('1.50'): a `start` or `lookback` never becomes a float."""


def _exact_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Decimal | float:
    text = str(loader.construct_scalar(node)).replace("_", "")
    try:
        return parse_decimal(text)
    except ValueError:  # .inf, .nan, 1:30.5
        return loader.construct_yaml_float(node)


ExactLoader.add_constructor("tag:yaml.org,2002:float", _exact_number)


def _validate(raw: Any, file: Path, problems: list[Problem]) -> Project | None:
    if not isinstance(raw, dict):
        problems.append(Problem("the file", "", "must be a mapping with lake, sources and tables"))
        return None
    problems += [Problem("top level", str(k), UNKNOWN_SETTING) for k in raw if k not in _TOP_LEVEL]
    context: dict[str, Any] = {"base": file.parent}
    top = {k: raw.get(k) for k in ("key_prefix", "translator")}
    found = _validated(_TopLevel, top, "top level", problems, context) or _TopLevel()
    prefix = found.key_prefix
    context["key_prefix"] = tuple([prefix] if isinstance(prefix, str) else prefix or [])
    sources = _validated_sources(raw.get("sources"), problems, context)
    context["sources"] = sources
    lake_problems: list[Problem] = []
    lake = _required(LakeSpec, raw.get("lake"), "lake", lake_problems, context)
    context["jars"] = _jars(sources.values(), lake)
    spark = _validated(SparkSpec, raw.get("spark") or {}, "spark", problems, context)
    problems += lake_problems
    tables = _validated_tables(raw.get("tables"), raw.get("sources"), problems, context)
    if problems or spark is None or lake is None:
        return None
    return Project(
        path=str(file), spark=spark, lake=lake, tables=tuple(tables), translator=found.translator
    )


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
        problems.extend(problems_from(exc, where))
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
) -> list[TableSpec]:
    if not isinstance(raw, list) or not raw:
        problems.append(Problem("top level", "tables", "list at least one table to load"))
        return []
    names = list(raw_sources) if isinstance(raw_sources, dict) else []
    tables, seen = [], set()
    for index, entry in enumerate(raw):
        where = table_place(entry, index)
        table = _validated_table(entry, where, names, problems, context)
        if table is None:
            continue
        if table.name in seen:
            problems.append(
                Problem(where, "name", "is used by another table; names must be unique")
            )
        seen.add(table.name)
        found = table_problems(table)
        problems += [Problem(where, p.field, p.message) for p in found]
        if not found:
            tables.append(table)
    return tables


def _validated_table(
    entry: Any, where: str, sources: list[str], problems: list[Problem], context: dict[str, Any]
) -> TableSpec | None:
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
    return _validated(TableSpec, entry, where, problems, context)  # type: ignore[no-any-return]
