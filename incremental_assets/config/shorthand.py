"""LakeXpress's one-line table entries:
`[source/]schema.table:column:type[:i|:e][@start][!append|!upsert]`."""

from __future__ import annotations

import re
from typing import Any

SHORTHAND = re.compile(
    r"^(?:(?P<source>[A-Za-z_]\w*)/)?(?P<table>[A-Za-z_][\w.]*):(?P<column>[A-Za-z_]\w*):(?P<type>[A-Za-z_]+)"
    r"(?::(?P<direction>[ie]))?(?:@(?P<start>[^!]+))?(?:!(?P<strategy>append|upsert))?$"
)
# The mode each `!strategy` of a one-line entry stands for.
STRATEGY_MODES = {"append": "append", "upsert": "merge"}


def expand_shorthand(text: str, sources: list[str]) -> dict[str, Any]:
    """The table entry a one-line shorthand stands for.

    `:e` excludes the table from incremental loading (a full refresh every run); `!upsert` is
    merge mode with the primary key read from the database.
    """
    match = SHORTHAND.match(text.strip())
    if not match:
        raise ValueError(
            f"'{text}' is not a table entry; write a mapping, or "
            "schema.table:column:type[@start][!append|!upsert]"
        )
    parts = match.groupdict()
    source = parts["source"] or (sources[0] if len(sources) == 1 else None)
    if source is None:
        raise ValueError(f"'{text}' doesn't say which source to read; write <source>/{text}")
    entry: dict[str, Any] = {"name": _name(match), "source": source, "table": parts["table"]}
    if parts["direction"] != "e":
        entry["cursor"] = {"column": parts["column"], "type": parts["type"]}
        if parts["start"]:
            entry["start"] = parts["start"]
    entry["mode"] = STRATEGY_MODES[parts["strategy"] or "append"]
    return entry


def table_place(entry: Any, index: int) -> str:
    """How messages name a table: by its name, or by its position when it has none."""
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        return f"table '{entry['name']}'"
    shorthand = SHORTHAND.match(entry.strip()) if isinstance(entry, str) else None
    if shorthand:
        return f"table '{_name(shorthand)}'"
    return f"table #{index + 1}"


def _name(match: re.Match[str]) -> str:
    return match["table"].rsplit(".", 1)[-1]
