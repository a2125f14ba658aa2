"""What a failure the engine raised means, by its messages: the one place that reads them.

Spark wraps the database's own words several layers deep (and redacts the URL in the outer
layer). In classic mode the Java cause chain is walked for each cause's message; over Spark
Connect only the text is there, and its first line is used (`messages`). `classify` maps a
failure to what the package does about it; `source_cause`, a source's failure to the fix it
names. Both are table-tested with captured messages (`test_engine_failures.py`).
"""

from __future__ import annotations

import re
from enum import Enum


class Failure(Enum):
    CONFLICT = "conflict"  # the catalog refused a commit: main moved, or the table was made
    UNKNOWN = "unknown"  # the catalog can't say whether it took a commit
    ENGINE_GONE = "engine gone"  # the Spark Connect server stopped, or forgot the session
    REFUSED = "refused"  # the package's own check, raised inside a Spark job (`raise_error`)
    SOURCE_FAILED = "source failed"  # the database's driver, or a JDBC read, failed
    OTHER = "other"


class SourceCause(Enum):
    CREDENTIALS = "credentials"
    UNREACHABLE = "unreachable"
    NO_TABLE = "no such table"
    NO_COLUMN = "no such column"
    ARRAY_DIMENSIONS = "multidimensional array"
    OUT_OF_RANGE = "timestamp out of range"
    NO_PATH = "no such folder"


_SPARK_NOISE = re.compile(r"^(An error occurred while calling [^\n]*\n: )?")
# What Spark wraps `raise_error`'s message in.
_RAISED = re.compile(r"^\w*Exception: \[USER_RAISED_EXCEPTION\] | SQLSTATE: \w+$")
_DRIVER = "PSQLException"

_MARKS: tuple[tuple[Failure, tuple[str, ...]], ...] = (
    # First: Iceberg's unknown commit carries its cause's words, a closed socket's among them.
    (Failure.UNKNOWN, ("CommitStateUnknownException", "Commit state unknown")),
    # How a Spark Connect client says its server is gone (stopped) or forgot it (restarted).
    (
        Failure.ENGINE_GONE,
        (
            "StatusCode.UNAVAILABLE",
            "failed to connect to all addresses",
            "INVALID_HANDLE.SESSION_NOT_FOUND",
            "INVALID_HANDLE.SESSION_CHANGED",
            "INVALID_HANDLE.SESSION_CLOSED",
            "Socket closed",
        ),
    ),
    # `fast_forward` to a branch main is no longer an ancestor of; a table made meanwhile.
    (Failure.CONFLICT, ("not an ancestor", "already exists")),
    (Failure.REFUSED, ("USER_RAISED_EXCEPTION",)),
    # PostgreSQL's driver; Spark's JDBC reader; MariaDB's driver, which names its connection.
    (Failure.SOURCE_FAILED, (_DRIVER, "FAILED_JDBC", "(conn=")),
)

_CREDENTIALS = (
    "password authentication failed",
    'role "',
    "no pg_hba.conf entry",
    "authentication",
    "access denied for user",  # MySQL
)
_UNREACHABLE = (
    "connection refused",
    "unknownhost",
    "connection attempt failed",
    "couldn't connect",
    "timed out",
)
_OUT_OF_RANGE = ("holds infinity", "holds -infinity", "long overflow", "out of range")


def messages(exc: BaseException) -> list[str]:
    """Messages from the outermost to the innermost cause, without Java stack frames."""
    java = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    found: list[str] = []
    seen = 0
    while java is not None and seen < 10:
        try:
            message = str(java.getMessage() or "")
            name = str(java.getClass().getSimpleName())
            java = java.getCause()
        except Exception:
            break
        found.append(f"{name}: {message}".strip())
        seen += 1
    if not found:
        text = _SPARK_NOISE.sub("", str(exc)).strip()
        found.append(text.splitlines()[0] if text else type(exc).__name__)
    return [m.split("\n\tat ")[0].strip() for m in found]


def classify(exc: BaseException) -> Failure:
    """What `exc` means, by the first kind whose marks any of its messages holds."""
    text = " ".join([type(exc).__name__, str(exc), *messages(exc)])
    for failure, marks in _MARKS:
        if any(mark in text for mark in marks):
            return failure
    return Failure.OTHER


def source_cause(text: str) -> SourceCause | None:
    """Why a source failed, by what the database or Spark said (`text`: its messages)."""
    lowered = text.lower()
    if any(mark in lowered for mark in _CREDENTIALS):
        return SourceCause.CREDENTIALS
    if any(mark in lowered for mark in _UNREACHABLE):
        return SourceCause.UNREACHABLE
    if ("relation" in lowered and "does not exist" in lowered) or (
        "table" in lowered and "doesn't exist" in lowered  # MySQL
    ):
        return SourceCause.NO_TABLE
    if "column" in lowered and "does not exist" in lowered:
        return SourceCause.NO_COLUMN
    if "-dimensional array" in lowered:
        return SourceCause.ARRAY_DIMENSIONS
    if any(mark in lowered for mark in _OUT_OF_RANGE):
        return SourceCause.OUT_OF_RANGE
    if "path_not_found" in lowered or "path does not exist" in lowered:
        return SourceCause.NO_PATH
    return None


def driver_message(found: list[str]) -> str:
    """The database's own words if present, with the innermost cause when it adds something."""
    driver = [m for m in found if m.startswith(_DRIVER)]
    chosen = driver[0].removeprefix(f"{_DRIVER}: ") if driver else found[-1]
    inner = found[-1]
    if driver and inner not in driver and inner.split(": ", 1)[-1] not in chosen:
        chosen += f" ({inner})"
    return " ".join(chosen.split())


def raised_message(detail: str) -> str:
    """The package's own check's words, out of what Spark wrapped them in."""
    return _RAISED.sub("", detail).strip()
