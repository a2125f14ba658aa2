"""One small exception hierarchy, grouped by the phase that failed.

Every message is meant for the person running the load: it names the table, the field or
value involved, and what to do next. Nothing here carries a traceback worth reading.
"""

from __future__ import annotations


class IncrementalAssetsError(Exception):
    """Base class for every error this package raises on purpose."""


class ConfigError(IncrementalAssetsError):
    """The YAML configuration, or a table's settings checked against its source, is wrong."""


class CursorError(IncrementalAssetsError):
    """A cursor value (stored in metadata, given as `start`, or read from the source) is unusable."""


class SourceError(IncrementalAssetsError):
    """Reading from the source failed: unreachable, refused, missing table or column, bad query."""


class WriteError(IncrementalAssetsError):
    """Writing to or committing into the lake failed."""


class ConcurrentRunError(WriteError):
    """Another run holds the table's lake lock."""


class InstanceError(IncrementalAssetsError):
    """The Dagster instance can't keep cursors (ephemeral or temporary)."""
