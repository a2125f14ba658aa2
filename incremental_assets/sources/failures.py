"""Turn Spark and JDBC exceptions into one-paragraph messages with a fix (what each failure
means is `engine_failures.py`'s to say)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.engine_failures import (
    Failure,
    SourceCause,
    classify,
    driver_message,
    messages,
    raised_message,
    source_cause,
)
from incremental_assets.errors import (
    EngineError,
    IncrementalAssetsError,
    SourceError,
    TableProblem,
    unknown_cause_fix,
)


def source_error(table: TableSpec, exc: BaseException, doing: str) -> SourceError:
    found = messages(exc)
    detail = driver_message(found)
    everything = " ".join(found)
    source = table.source
    where = (
        source.redacted_url() if isinstance(source, JdbcSourceSpec) else getattr(source, "path", "")
    )
    if classify(exc) is Failure.REFUSED:
        # Our own check (`transport.py`): its message names the column and the fix.
        detail = raised_message(detail)
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
    match source_cause(text):
        case SourceCause.CREDENTIALS:
            user = getattr(source, "user", None)
            return (
                f"check the user ({user}) and password of source '{source.name}' (or the "
                "${VAR} they come from); the database refused them."
            )
        case SourceCause.UNREACHABLE:
            return (
                "check that the database is running and reachable, and that host and port in "
                f"source '{source.name}' url are right."
            )
        case SourceCause.NO_TABLE:
            return (
                f"`table:` of table '{table.name}' names a table the database doesn't have "
                "(write schema.table)."
            )
        case SourceCause.NO_COLUMN:
            return (
                f"a column named by table '{table.name}' (cursor, primary_key, delete_column or "
                "query) is missing."
            )
        case SourceCause.ARRAY_DIMENSIONS:
            return (
                f"an array column of table '{table.name}' holds arrays of more than one "
                "dimension, which can't be read exactly; cast it in `query:` (CAST(c AS text))."
            )
        case SourceCause.OUT_OF_RANGE:
            return (
                f"a timestamp or date column of table '{table.name}' holds a value Spark can't "
                "store (PostgreSQL 'infinity', or a year beyond 294247); map it in `query:`, "
                "e.g. CASE WHEN isfinite(c) THEN c END."
            )
        case SourceCause.NO_PATH:
            return (
                f"`table:` of table '{table.name}' must name an existing folder under the "
                "source path."
            )
    if table.query is not None:
        return f"the `query:` of table '{table.name}' must run on its own in the database."
    return "the cursor did not move; " + unknown_cause_fix(table.name)


def engine_error(table: TableSpec, exc: BaseException, doing: str) -> EngineError | None:
    """An EngineError if `exc` says the Spark Connect server stopped answering, else None."""
    if classify(exc) is not Failure.ENGINE_GONE:
        return None
    detail = " ".join(messages(exc)[-1].split())[:300]
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
