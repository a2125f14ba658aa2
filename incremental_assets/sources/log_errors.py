"""The refusals a `capture: log` table's log gives, worded with their fix, the same for
PostgreSQL's slot and MySQL's and MariaDB's binary log."""

from __future__ import annotations

from incremental_assets.config import JdbcSourceSpec, TableSpec
from incremental_assets.errors import SourceError, TableProblem
from incremental_assets.sources.log_changes import LogRefused, full_refresh_fix


def lost_error(table: TableSpec, lost: str, since: str) -> SourceError:
    return SourceError(
        TableProblem(
            table.name,
            f"{lost}: the changes since {since} can't be read, and loading on would miss them. "
            "Nothing was written and the position did not move.",
            "capture",
            full_refresh_fix(table.name),
        )
    )


def lacks_error(table: TableSpec, lacking: list[str]) -> SourceError:
    return SourceError(
        TableProblem(
            table.name,
            "the source can't keep a log of its changes for this package: "
            + "; ".join(lacking)
            + ".",
            "capture",
            "change what is named, then run again (`incremental-assets validate --connect` "
            "checks it).",
        )
    )


def refused_error(table: TableSpec, exc: LogRefused) -> SourceError:
    return SourceError(
        TableProblem(table.name, exc.message + " Nothing was written.", "capture", exc.fix)
    )


def source_failed(table: TableSpec, exc: Exception, doing: str) -> SourceError:
    source = table.source
    assert isinstance(source, JdbcSourceSpec)
    detail = " ".join(str(exc).split())[:400]
    return SourceError(
        TableProblem(
            table.name,
            f"{doing} failed: {detail}. Nothing was written and the position did not move.",
            source=f"source '{source.name}', {source.redacted_url()}",
            fix="check that the database answers and the source's user may read the log "
            "(REPLICATION on PostgreSQL; REPLICATION SLAVE and BINLOG MONITOR on MariaDB), then "
            "run again.",
        )
    )
