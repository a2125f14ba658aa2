"""Pydantic's validation errors in the configuration's own words: one problem per field path.

A union's alternatives each report why they failed (`cursor: {type: float}` fails as a string
*and* as a mapping); only the alternative the input came closest to is kept.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from incremental_assets.config.models import AUTOMATION_HINT, SENSOR_HINT
from incremental_assets.config.shorthand import STRATEGY_MODES
from incremental_assets.errors import Problem, nearest

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


def unknown_setting(key: str, known: Iterable[str]) -> str:
    """What a key that is no setting is told: the setting it is likely a typo of, if one is."""
    close = nearest(key, known)
    hint = f" (did you mean `{close}`?)" if close else ""
    return (
        f"is not a known setting{hint}; check the spelling against the configuration reference "
        "(docs/configuration.md)"
    )


def setting_names(*shapes: Any) -> frozenset[str]:
    """Every setting name in the models `shapes` are or hold (through unions, lists, mappings
    and nested models), for the nearest one to an unknown key."""
    names: set[str] = set()
    todo, seen = list(shapes), set()
    while todo:
        shape = todo.pop()
        if isinstance(shape, type) and issubclass(shape, BaseModel):
            if shape in seen:
                continue
            seen.add(shape)
            for name, field in shape.model_fields.items():
                names.add(field.alias or name)
                todo.append(field.annotation)
        else:
            todo += get_args(shape)
    return frozenset(names)


def problems_from(exc: ValidationError, where: str, known: Collection[str]) -> list[Problem]:
    """One problem per field path; of a union's alternatives, only the most useful one. An
    unknown key comes with the name of `known` it is likely a typo of."""
    problems: dict[str, Problem] = {}
    for error in _closest_alternatives(exc.errors(), 0):
        parts = [p for p in error["loc"] if p not in _UNION_MEMBERS]
        field = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in parts).replace(
            ".[", "["
        )
        top = str(parts[0]) if parts else ""
        message = (
            unknown_setting(str(parts[-1]), known)
            if error["type"] == "extra_forbidden" and parts
            else friendly(error, top)
        )
        problems.setdefault(field, Problem(where, field, message))
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


def friendly(error: ErrorDetails, field: str = "") -> str:
    """One error in the configuration's words; `field` is the top-level setting it is in."""
    kind, msg = error["type"], error["msg"]
    if kind == "missing":
        return "is required"
    if kind == "union_tag_not_found":
        return "needs `type: jdbc` or `type: files`"
    if kind == "union_tag_invalid":
        return "has an unknown `type`; use jdbc or files"
    hinted = kind in ("literal_error", "model_type", "model_attributes_type", "bool_type")
    if hinted and field in _FIELD_HINTS:
        return _FIELD_HINTS[field]
    if kind in ("enum", "literal_error"):
        return _not_a_value(error["input"], str(error.get("ctx", {}).get("expected")), field)
    if kind == "string_pattern_mismatch":
        return (
            "use letters, digits and underscores, not starting with a digit "
            "(it becomes the asset key)"
        )
    return msg.removeprefix("Value error, ")


def _not_a_value(value: Any, expected: str, field: str) -> str:
    """A value a setting doesn't take, with the ones it does (and, for `mode`, the mode a
    one-line entry's `!strategy` of that name stands for)."""
    text = f"{value!r} is not one of its values; use {expected}"
    mode = STRATEGY_MODES.get(str(value)) if field == "mode" else None
    if mode is not None and mode != value:
        text += f" (`!{value}` in a one-line entry is `mode: {mode}`)"
    return text
