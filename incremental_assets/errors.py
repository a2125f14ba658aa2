"""One small exception hierarchy, grouped by the phase that failed; each error keeps its data.

Every message is meant for the person running the load: it names the table, the field or value
involved, and what to do next. Nothing here carries a traceback worth reading. A configuration
error keeps its list of `Problem`s; an error about one table keeps its `TableProblem`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a configuration: the place (`table 'orders'`, `lake`), the field, what."""

    where: str
    field: str
    message: str

    def render(self) -> str:
        place = f"{self.where}, field '{self.field}'" if self.field else self.where
        return f"{place}: {self.message}"


@dataclass(frozen=True)
class TableProblem:
    """What stops one table: the setting or column involved, what is wrong, and the fix."""

    table: str
    message: str
    field: str | None = None
    fix: str | None = None
    source: str | None = None  # the source and where it is, when the problem is reading it

    def render(self) -> str:
        place = f"Table '{self.table}'" + (f" ({self.source})" if self.source else "")
        place += f", field '{self.field}'" if self.field else ""
        text = f"{place}: {self.message}"
        return f"{text} Fix: {self.fix}" if self.fix else text


def nearest(name: str, names: Iterable[str]) -> str | None:
    """Of `names`, the one `name` is most likely a typo of, if one is close enough (`ordrs` is
    `orders`, `returns` is not)."""
    found = difflib.get_close_matches(name, list(names), n=1, cutoff=0.75)
    return found[0] if found else None


def unknown_cause_fix(table: str) -> str:
    """The fix of a failure whose cause the package doesn't know: whether a rerun helps depends
    on whether the cause passes, so say both ways out."""
    return (
        "if the cause above may pass (the storage, the network, the Spark engine running out of "
        "memory), run again. If the same run fails the same way again, it will every time: the "
        "table's data or settings meet a case incremental_assets does not handle. The lake "
        "stays as the last run left it; change what the message points at (a column's type, "
        f"the key, a setting of table '{table}'), or leave the table out of the runs, and report "
        "the message with the run's log as a bug."
    )


class IncrementalAssetsError(Exception):
    """Base class for every error this package raises on purpose."""

    def __init__(self, message: str | TableProblem) -> None:
        self.problem = message if isinstance(message, TableProblem) else None
        super().__init__(message.render() if isinstance(message, TableProblem) else message)


class ConfigError(IncrementalAssetsError):
    """The configuration, or a table's settings checked against its source, is wrong."""

    def __init__(
        self,
        message: str | TableProblem = "",
        *,
        problems: Sequence[Problem] = (),
        file: str | Path | None = None,
    ) -> None:
        self.problems = tuple(problems)
        super().__init__(render_problems(file, self.problems) if self.problems else message)


def render_problems(file: str | Path | None, problems: Sequence[Problem]) -> str:
    count = f"{len(problems)} problem" + ("s" if len(problems) != 1 else "")
    lines = [f"Invalid configuration in {file} ({count}):"]
    lines += [f"  - {p.render()}" for p in problems]
    return "\n".join(lines)


class CursorError(IncrementalAssetsError):
    """A cursor value (stored in metadata, given as `start`, or read from the source) is
    unusable."""


class SourceError(IncrementalAssetsError):
    """Reading from the source failed: unreachable, refused, missing table or column, bad query."""


class WriteError(IncrementalAssetsError):
    """Writing to or committing into the lake failed."""


class ConcurrentRunError(WriteError):
    """Another run holds the table's lake lock."""


class CommitUnknown(WriteError):
    """A commit the lake's catalog may or may not have taken (its answer was lost), or took
    but can't be read back (`landed`): what is left of it is kept for the next run, which tells
    which (`LakeTable.unfinished_error`)."""

    def __init__(self, cause: Exception, landed: bool = False) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.landed = landed


class EngineError(IncrementalAssetsError):
    """Spark can't start here (a pyspark its jars don't run on, a jar missing or not fetched), or
    the shared engine (a Spark Connect server) can't be started or stopped answering."""


class InstanceError(IncrementalAssetsError):
    """The Dagster instance can't keep cursors (ephemeral or temporary)."""
