"""How far the lake is behind its source: the lag between two cursor values, in seconds and as
a person reads it. Pure Python."""

from __future__ import annotations

from datetime import date, datetime

from incremental_assets.cursor import CursorType, parse_cursor

# The units of a readable duration, largest first; a year is 365 days.
_UNITS = (("y", 365 * 86_400), ("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))


def seconds_behind(kind: CursorType | None, lake: str | None, newest: str) -> float | None:
    """How far the lake's cursor `lake` is behind the source's `newest`, for a date or time
    cursor (None for others, or before a first run)."""
    if kind is None or not kind.is_temporal or lake is None:
        return None
    stored, source = parse_cursor(kind, lake), parse_cursor(kind, newest)
    assert isinstance(stored, date) and isinstance(source, date)
    if not isinstance(stored, datetime) or not isinstance(source, datetime):
        return float((source - stored).days * 86_400)
    return round((source - stored).total_seconds(), 3)


def readable_duration(seconds: float) -> str:
    """`seconds` rounded to the second, in its largest unit and the one below it when that is not
    zero: `1 y 327 d`, `2 h 5 min`, `45 s`; negative (the lake ahead) with a leading `-`."""
    left = round(abs(seconds))
    parts: list[tuple[int, str]] = []
    for name, size in _UNITS:
        if parts or left >= size:
            count, left = divmod(left, size)
            parts.append((count, name))
        if len(parts) == 2:
            break
    shown = " ".join(f"{count} {name}" for count, name in parts if count) or "0 s"
    return f"-{shown}" if seconds < 0 and shown != "0 s" else shown
