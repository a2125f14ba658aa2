"""Pydantic's validation errors in the configuration's own words: one problem per field path.

A union's alternatives each report why they failed (`cursor: {type: float}` fails as a string
*and* as a mapping); only the alternative the input came closest to is kept.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from incremental_assets.config.models import AUTOMATION_HINT, SENSOR_HINT
from incremental_assets.errors import Problem

UNKNOWN_SETTING = (
    "is not a known setting; check the spelling against the configuration reference "
    "(docs/configuration.md)"
)
# How pydantic names a union's alternatives in an error's location: never a field.
_UNION_MEMBERS = {
    "str",
    "int",
    "bool",
    "list[str]",
    "literal['eager','on_missing']",
    "jdbc",
    "files",
}
_FIELD_HINTS = {"automation": AUTOMATION_HINT, "sensor": SENSOR_HINT}


def problems_from(exc: ValidationError, where: str) -> list[Problem]:
    """One problem per field path; of a union's alternatives, only the most useful one."""
    problems: dict[str, Problem] = {}
    for error in _closest_alternatives(exc.errors(), 0):
        parts = [p for p in error["loc"] if p not in _UNION_MEMBERS]
        field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in parts).replace(
            ".[", "["
        )
        top = str(parts[0]) if parts else ""
        problems.setdefault(
            field, Problem(where, field, friendly(error["type"], error["msg"], top))
        )
    return list(problems.values())


def _closest_alternatives(errors: list[ErrorDetails], depth: int) -> list[ErrorDetails]:
    """Drop the complaints of every union alternative but the one the input came closest to.

    Errors outside unions, and every error of the chosen alternative, are kept.
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


def friendly(kind: str, msg: str, field: str = "") -> str:
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return UNKNOWN_SETTING
    if kind == "union_tag_not_found":
        return "needs `type: jdbc` or `type: files`"
    if kind == "union_tag_invalid":
        return "has an unknown `type`; use jdbc or files"
    hinted = kind in ("literal_error", "model_type", "model_attributes_type", "bool_type")
    if hinted and field in _FIELD_HINTS:
        return _FIELD_HINTS[field]
    if kind == "string_pattern_mismatch":
        return (
            "use letters, digits and underscores, not starting with a digit "
            "(it becomes the asset key)"
        )
    return msg.removeprefix("Value error, ")
