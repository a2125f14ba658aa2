"""Turn Spark and JDBC exceptions into one-paragraph messages with a fix.

Spark wraps the database's own words several layers deep (and redacts the URL in the outer
layer). In classic mode the Java cause chain is walked for the driver's message; over Spark
Connect only the text is available, and its first line is used.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.errors import (
    EngineError,
    IncrementalAssetsError,
    SourceError,
    TableProblem,
    unknown_cause_fix,
)

_SPARK_NOISE = re.compile(r"^(An error occurred while calling [^\n]*\n: )?")
# What Spark wraps `raise_error`'s message in.
_RAISED = re.compile(r"^\w*Exception: \[USER_RAISED_EXCEPTION\] | SQLSTATE: \w+$")


def root_messages(exc: BaseException) -> list[str]:
    """Messages from the outermost to the innermost cause, without Java stack frames."""
    java = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    messages: list[str] = []
    seen = 0
    while java is not None and seen < 10:
        try:
            message = str(java.getMessage() or "")
            name = str(java.getClass().getSimpleName())
            java = java.getCause()
        except Exception:
            break
        messages.append(f"{name}: {message}".strip())
        seen += 1
    if not messages:
        text = _SPARK_NOISE.sub("", str(exc)).strip()
        messages.append(text.splitlines()[0] if text else type(exc).__name__)
    return [m.split("\n\tat ")[0].strip() for m in messages]


def _driver_message(messages: list[str]) -> str:
    """The database's own words if present, with the innermost cause when it adds something."""
    driver = [m for m in messages if m.startswith("PSQLException")]
    chosen = driver[0].removeprefix("PSQLException: ") if driver else messages[-1]
    inner = messages[-1]
    if driver and inner not in driver and inner.split(": ", 1)[-1] not in chosen:
        chosen += f" ({inner})"
    return " ".join(chosen.split())


def source_error(table: TableSpec, exc: BaseException, doing: str) -> SourceError:
    messages = root_messages(exc)
    detail = _driver_message(messages)
    everything = " ".join(messages)
    source = table.source
    where = (
        source.redacted_url() if isinstance(source, JdbcSourceSpec) else getattr(source, "path", "")
    )
    if "user_raised_exception" in everything.lower():
        # Our own check (`transport.py`): its message names the column and the fix.
        detail = _RAISED.sub("", detail).strip()
        message = f"{doing} failed: {detail}. The source holds a value the lake can't keep exactly."
        return SourceError(
            TableProblem(table.name, message, source=f"source '{source.name}', {where}")
        )
    return SourceError(
        TableProblem(
            table.name,
            f"{doing} failed: {detail}.",
            fix=_fix(table, everything),
            source=f"source '{source.name}', {where}",
        )
    )


def _fix(table: TableSpec, text: str) -> str:
    """What to do about a failure, by what the database or Spark said."""
    source = table.source
    lowered = text.lower()
    if any(
        s in lowered
        for s in (
            "password authentication failed",
            'role "',
            "no pg_hba.conf entry",
            "authentication",
            "access denied for user",  # MySQL
        )
    ):
        user = getattr(source, "user", None)
        return (
            f"check the user ({user}) and password of source '{source.name}' (or the ${{VAR}} "
            "they come from); the database refused them."
        )
    if any(
        s in lowered
        for s in (
            "connection refused",
            "unknownhost",
            "connection attempt failed",
            "couldn't connect",
            "timed out",
        )
    ):
        return (
            f"check that the database is running and reachable, and that host and port in "
            f"source '{source.name}' url are right."
        )
    if ("relation" in lowered and "does not exist" in lowered) or (
        "table" in lowered and "doesn't exist" in lowered  # MySQL
    ):
        return f"`table:` of table '{table.name}' names a table the database doesn't have (write schema.table)."
    if "column" in lowered and "does not exist" in lowered:
        return f"a column named by table '{table.name}' (cursor, primary_key, delete_column or query) is missing."
    if "-dimensional array" in lowered:
        return (
            f"an array column of table '{table.name}' holds arrays of more than one dimension, "
            "which can't be read exactly; cast it in `query:` (CAST(c AS text))."
        )
    if any(
        s in lowered
        for s in (
            "holds infinity",
            "holds -infinity",
            "long overflow",
            "out of range",
        )
    ):
        return (
            f"a timestamp or date column of table '{table.name}' holds a value Spark can't store "
            "(PostgreSQL 'infinity', or a year beyond 294247); map it in `query:`, e.g. "
            "CASE WHEN isfinite(c) THEN c END."
        )
    if "path_not_found" in lowered or "path does not exist" in lowered:
        return (
            f"`table:` of table '{table.name}' must name an existing folder under the source path."
        )
    if table.query is not None:
        return f"the `query:` of table '{table.name}' must run on its own in the database."
    return "the cursor did not move; " + unknown_cause_fix(table.name)


# How a Spark Connect client says its server is gone (stopped) or forgot it (restarted).
_SERVER_GONE = (
    "StatusCode.UNAVAILABLE",
    "failed to connect to all addresses",
    "INVALID_HANDLE.SESSION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_CHANGED",
    "INVALID_HANDLE.SESSION_CLOSED",
    "Socket closed",
)


def engine_error(table: TableSpec, exc: BaseException, doing: str) -> EngineError | None:
    """An EngineError if `exc` says the Spark Connect server stopped answering, else None."""
    text = " ".join([type(exc).__name__, str(exc), *root_messages(exc)])
    if not any(mark in text for mark in _SERVER_GONE):
        return None
    detail = " ".join(root_messages(exc)[-1].split())[:300]
    return EngineError(
        TableProblem(
            table.name,
            f"the Spark Connect server stopped answering while {doing} ({detail}). Nothing was "
            "committed and the cursor did not move.",
            fix="check it with `incremental-assets engine status` (or your spark.remote server), "
            "start it again with `incremental-assets engine start`, and rerun.",
        )
    )


@contextmanager
def failures_of(table: TableSpec, doing: str) -> Iterator[None]:
    """Re-raise anything but our own errors as a SourceError that says what was being done."""
    try:
        yield
    except IncrementalAssetsError:
        raise
    except Exception as exc:
        raise engine_error(table, exc, doing) or source_error(table, exc, doing) from None
