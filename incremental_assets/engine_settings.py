"""What a shared engine needs to serve a run: which settings a Spark Connect server takes only when
it starts, which of them a run's configuration needs that the engine lacks, and what a restart
gives it. Pure: `engine.py` records the settings and acts on the answer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Spark 4.1's static SQL settings (StaticSQLConf): fixed when the server starts, like every
# setting outside spark.sql.*; a session sets the other spark.sql.* ones itself.
_STATIC_SQL = frozenset(
    f"spark.sql.{name}"
    for name in (
        "extensions",
        "warehouse.dir",
        "catalogImplementation",
        "globalTempDatabase",
        "queryExecutionListeners",
        "streaming.streamingQueryListeners",
        "cache.serializer",
        "sources.disabledJdbcConnProviderList",
        "sources.schemaStringLengthThreshold",
        "filesourceTableRelationCacheSize",
        "codegen.cache.maxEntries",
        "codegen.comments",
        "debug",
        "hive.thriftServer.singleSession",
        "ui.retainedExecutions",
        "event.truncate.length",
        "legacy.sessionInitWithConfigDefaults",
        "defaultUrlStreamHandlerFactory.enabled",
        "streaming.ui.enabled",
        "broadcastExchange.maxThreadThreshold",
        "shuffleExchange.maxThreadThreshold",
        "subquery.maxThreadThreshold",
        "resultQueryStage.maxThreadThreshold",
        "metadataCacheTTLSeconds",
    )
)
# Settings of the client's process, not the server's: a run doesn't need the engine to have them.
_PER_CLIENT = frozenset({"spark.app.name", "spark.ui.showConsoleProgress"})
# Lists, by their separator: the engine serves a run if it has every item the run needs.
_LISTS = {
    "spark.jars": ",",
    "spark.jars.packages": ",",
    "spark.files": ",",
    "spark.sql.extensions": ",",
    "spark.driver.extraClassPath": os.pathsep,
    "spark.executor.extraClassPath": os.pathsep,
}


def fixed_at_start(key: str) -> bool:
    """Whether a Spark Connect server takes the setting `key` only when it starts."""
    if key in _PER_CLIENT or key.startswith("spark.connect."):
        return False
    return key in _STATIC_SQL or not key.startswith("spark.sql.")


@dataclass(frozen=True)
class Lack:
    """A setting the engine started without, or with another value, that a run needs."""

    key: str
    needed: tuple[str, ...]  # the items of a list it lacks, or the one value
    has: str | None = None  # its value of a single-valued setting


def lacks(settings: Mapping[str, str], wanted: Mapping[str, Any]) -> tuple[Lack, ...]:
    """What of `wanted` (a session's configuration) an engine started with `settings` lacks."""
    found = []
    for key, value in wanted.items():
        if not fixed_at_start(key):
            continue
        has = settings.get(key)
        if key in _LISTS:
            missing = [item for item in _items(key, value) if item not in _items(key, has)]
            if missing:
                found.append(Lack(key, tuple(missing)))
        elif has != str(value):
            found.append(Lack(key, (str(value),), has))
    return tuple(found)


def with_needed(settings: Mapping[str, str], wanted: Mapping[str, Any]) -> dict[str, str]:
    """`settings` with what `wanted` needs of them added: list items appended, values replaced."""
    result = dict(settings)
    for lack in lacks(settings, wanted):
        if lack.key in _LISTS:
            items = [*_items(lack.key, settings.get(lack.key)), *lack.needed]
            result[lack.key] = _LISTS[lack.key].join(items)
        else:
            result[lack.key] = lack.needed[0]
    return result


def _items(key: str, value: object) -> list[str]:
    return [item for item in str(value or "").split(_LISTS[key]) if item]


def described(lacking: tuple[Lack, ...]) -> str:
    """`lacking` in words: a jar once, with every list it is missing from."""
    lists: dict[str, list[str]] = {}
    values = []
    for lack in lacking:
        if lack.key in _LISTS:
            for item in lack.needed:
                lists.setdefault(item, []).append(lack.key)
        else:
            values.append(f"{lack.key}={lack.needed[0]} (it has {lack.has or 'none'})")
    items = [
        f"the jar {Path(item).name} ({item}, in {' and '.join(keys)})"
        if item.endswith(".jar")
        else f"{item} in {' and '.join(keys)}"
        for item, keys in lists.items()
    ]
    return "; ".join([*items, *values])
