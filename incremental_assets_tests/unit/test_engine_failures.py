"""The one classifier of engine failures (`engine_failures.py`), table-tested with messages as
Spark, Spark Connect, the JDBC drivers, S3 and Iceberg's catalogs write them. Each row is a
failure as the package meets it (a py4j cause chain, or a Spark Connect error's text) and what
the package must make of it: a commit that conflicted, one whose outcome is unknown, a server
gone, the package's own refusal raised inside a job, a source that failed, or anything else."""

from __future__ import annotations

import pytest

from incremental_assets.engine_failures import Failure, SourceCause, classify, source_cause
from incremental_assets_tests.support.java_failures import SparkFailure, chain

CALL = "An error occurred while calling o87.sql"

CLASSIFIED = [
    # Iceberg's fast_forward once another writer moved main.
    (
        "fast_forward refused",
        SparkFailure(
            CALL,
            chain(
                (
                    "ValidationException",
                    "Cannot fast-forward: main is not an ancestor of ia-20261128T070101-ab12",
                ),
            ),
        ),
        Failure.CONFLICT,
    ),
    # A first load's CREATE TABLE after another run made the table.
    (
        "table made meanwhile",
        SparkFailure(
            "[TABLE_OR_VIEW_ALREADY_EXISTS] Cannot create table or view `lake`.`shop`.`orders` "
            "because it already exists. SQLSTATE: 42P07"
        ),
        Failure.CONFLICT,
    ),
    # The JDBC catalog lost its connection while committing.
    (
        "catalog answer lost",
        SparkFailure(
            CALL,
            chain(
                ("CommitStateUnknownException", "Failed to commit: connection reset"),
                ("SQLTransientConnectionException", "Connection reset"),
            ),
        ),
        Failure.UNKNOWN,
    ),
    (
        "catalog answer lost, over Spark Connect",
        SparkFailure(
            "org.apache.iceberg.exceptions.CommitStateUnknownException: Commit state unknown "
            "for table lake.shop.orders\nCannot determine whether the commit was successful"
        ),
        Failure.UNKNOWN,
    ),
    # A catalog's connection closed mid-commit: the commit's outcome is unknown, not the engine
    # gone (Iceberg's exception carries its cause's words).
    (
        "catalog connection closed",
        SparkFailure(
            CALL,
            chain(
                ("CommitStateUnknownException", "Socket closed\nCannot determine whether ..."),
                ("SocketException", "Socket closed"),
            ),
        ),
        Failure.UNKNOWN,
    ),
    (
        "engine stopped",
        SparkFailure(
            "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = "
            'StatusCode.UNAVAILABLE\n\tdetails = "failed to connect to all addresses">'
        ),
        Failure.ENGINE_GONE,
    ),
    (
        "engine restarted",
        SparkFailure(
            "[INVALID_HANDLE.SESSION_NOT_FOUND] The handle 6a1f... is invalid. Session not found."
        ),
        Failure.ENGINE_GONE,
    ),
    # `transport.py`'s check of a value the lake can't hold, raised by Spark's raise_error.
    (
        "our own check",
        SparkFailure(
            CALL,
            chain(
                ("SparkException", "Job aborted due to stage failure"),
                (
                    "SparkRuntimeException",
                    "[USER_RAISED_EXCEPTION] column amount holds 1E+40 SQLSTATE: P0001",
                ),
            ),
        ),
        Failure.REFUSED,
    ),
    (
        "PostgreSQL during the read",
        SparkFailure(
            CALL,
            chain(
                ("SparkException", "Job aborted due to stage failure"),
                ("PSQLException", "ERROR: canceling statement due to statement timeout"),
            ),
        ),
        Failure.SOURCE_FAILED,
    ),
    (
        "Spark's JDBC error",
        SparkFailure(
            "[FAILED_JDBC.UNCLASSIFIED] Failed JDBC jdbc: on the operation: Load the table. "
            "SQLSTATE: HV000"
        ),
        Failure.SOURCE_FAILED,
    ),
    (
        "MariaDB's driver",
        SparkFailure(
            CALL,
            chain(
                ("SparkException", "Job aborted due to stage failure"),
                (
                    "SQLNonTransientConnectionException",
                    "(conn=42) Connection reset by peer",
                ),
            ),
        ),
        Failure.SOURCE_FAILED,
    ),
    # The lake's object store: the lake's failure, not the source's.
    (
        "S3",
        SparkFailure(
            CALL,
            chain(
                ("SparkException", "Job aborted"),
                (
                    "S3Exception",
                    "The specified bucket does not exist (Service: S3, Status Code: 404)",
                ),
            ),
        ),
        Failure.OTHER,
    ),
    (
        "out of memory",
        SparkFailure(CALL, chain(("OutOfMemoryError", "Java heap space"))),
        Failure.OTHER,
    ),
]


@pytest.mark.parametrize(
    ("failure", "expected"),
    [(failure, expected) for _, failure, expected in CLASSIFIED],
    ids=[name for name, _, _ in CLASSIFIED],
)
def test_each_failure_is_classified_by_what_the_engine_said(
    failure: SparkFailure, expected: Failure
) -> None:
    assert classify(failure) is expected


CAUSES = [
    ('FATAL: password authentication failed for user "app"', SourceCause.CREDENTIALS),
    ("(conn=7) Access denied for user 'app'@'10.0.0.2'", SourceCause.CREDENTIALS),
    ("Connection refused (Connection refused)", SourceCause.UNREACHABLE),
    ("java.net.UnknownHostException: db", SourceCause.UNREACHABLE),
    ('ERROR: relation "public.orders" does not exist', SourceCause.NO_TABLE),
    ("(conn=3) Table 'shop.orders' doesn't exist", SourceCause.NO_TABLE),
    ('ERROR: column "updated" does not exist', SourceCause.NO_COLUMN),
    ("cannot read a 2-dimensional array", SourceCause.ARRAY_DIMENSIONS),
    ("timestamp column holds infinity", SourceCause.OUT_OF_RANGE),
    ("[PATH_NOT_FOUND] Path does not exist: file:/landing/returns", SourceCause.NO_PATH),
    ("ERROR: division by zero", None),
]


@pytest.mark.parametrize(("text", "expected"), CAUSES)
def test_a_sources_failure_names_its_cause(text: str, expected: SourceCause | None) -> None:
    assert source_cause(text) is expected
