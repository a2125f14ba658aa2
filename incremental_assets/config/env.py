"""`${VAR}` in the configuration: replaced by the environment variable VAR (`$${` writes `${`)."""

from __future__ import annotations

import os
import re
from typing import Any

from incremental_assets.config.shorthand import table_place
from incremental_assets.errors import Problem

_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute_env(raw: Any) -> tuple[Any, list[Problem]]:
    """The configuration with every `${VAR}` replaced, and a problem for each one that is unset."""
    unset: list[tuple[tuple[Any, ...], str]] = []
    substituted = _substitute(raw, (), unset)
    return substituted, [_unset_variable(raw, path, name) for path, name in unset]


def _substitute(node: Any, path: tuple[Any, ...], unset: list[tuple[tuple[Any, ...], str]]) -> Any:
    if isinstance(node, dict):
        return {k: _substitute(v, (*path, k), unset) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, (*path, i), unset) for i, v in enumerate(node)]
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
        return Problem(table_place(raw["tables"][path[1]], path[1]), rest, message)
    if path and path[0] in ("spark", "lake"):
        return Problem(str(path[0]), ".".join(map(str, path[1:])), message)
    return Problem("top level", ".".join(map(str, path)), message)
