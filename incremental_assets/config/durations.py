"""Durations as the configuration writes them: `30s`, `5m`, `2h`, `1d`, `250ms`, `1w`."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d|w)\s*$")
_MICROS = {
    "us": 1,
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
    "d": 86_400_000_000,
    "w": 604_800_000_000,
}


def parse_duration(text: str) -> timedelta:
    """`30s`, `5m`, `2h`, `1d`, `250ms` -> timedelta. Raises ValueError with the accepted forms."""
    match = DURATION.match(str(text))
    if not match:
        raise ValueError(f"'{text}' is not a duration; write a number and a unit: 30s, 5m, 2h, 1d")
    return timedelta(microseconds=int(Decimal(match.group(1)) * _MICROS[match.group(2)]))
