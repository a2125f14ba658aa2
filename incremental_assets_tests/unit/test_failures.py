"""`sources/failures.py` without Spark: a Java cause chain (as py4j presents it) or a Spark Connect
error's text becomes one paragraph with the database's own words and a fix. Real failures from
real servers are in test_bad_inputs.py and test_quiet_failures.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from incremental_assets.config import TableSpec, project_from_mapping
from incremental_assets.engine_failures import messages as root_messages
from incremental_assets.errors import ConfigError, EngineError, SourceError
from incremental_assets.lake.table import lake_error
from incremental_assets.sources.failures import engine_error, failures_of, source_error
from incremental_assets_tests.support.java_failures import SparkFailure, chain


def table_spec(**settings: str) -> TableSpec:
    entry = {"name": "orders", "source": "db", "table": "public.orders", "cursor": "updated_at"}
    raw = {
        "lake": {"path": "/lake"},
        "sources": {
            "db": {
                "type": "jdbc",
                "url": "jdbc:postgresql://db:5432/shop?password=hunter2",
                "user": "app",
            }
        },
        "tables": [{**entry, **settings}],
    }
    return project_from_mapping(raw, Path("/project/incremental_assets.yaml")).tables[0]


def test_the_cause_chain_is_walked_outside_in_without_stack_frames() -> None:
    java = chain(
        ("SparkException", "Job aborted.\n\tat org.apache.spark.Job.run(Job.java:1)"),
        ("PSQLException", 'ERROR: relation "public.orders" does not exist\n  Position: 15'),
    )

    messages = root_messages(SparkFailure("An error occurred while calling o42.load", java))

    assert messages == [
        "SparkException: Job aborted.",
        'PSQLException: ERROR: relation "public.orders" does not exist\n  Position: 15',
    ]


def test_over_spark_connect_the_first_line_of_the_text_is_used() -> None:
    text = "An error occurred while calling o1.x\n: java.sql.SQLException: boom\nmore"

    assert root_messages(SparkFailure(text)) == ["java.sql.SQLException: boom"]


def test_the_database_says_what_went_wrong_and_the_fix_follows_from_it() -> None:
    java = chain(
        ("SparkException", "Job aborted"),
        ("PSQLException", 'ERROR: relation "public.orders" does not exist'),
    )

    error = source_error(table_spec(), SparkFailure("x", java), "reading the window")

    assert isinstance(error, SourceError)
    text = str(error)
    assert 'reading the window failed: ERROR: relation "public.orders" does not exist.' in text
    assert "names a table the database doesn't have (write schema.table)" in text
    assert "hunter2" not in text  # the URL is shown redacted


def test_the_innermost_cause_is_added_when_the_driver_message_lacks_it() -> None:
    java = chain(
        ("PSQLException", "The connection attempt failed."),
        ("ConnectException", "Connection refused"),
    )

    text = str(source_error(table_spec(), SparkFailure("x", java), "freezing the window"))

    assert "The connection attempt failed. (ConnectException: Connection refused)." in text
    assert "check that the database is running and reachable" in text


@pytest.mark.parametrize(
    ("said", "fix"),
    [
        ('FATAL: password authentication failed for user "app"', "check the user (app)"),
        ("Access denied for user 'app'@'10.0.0.1'", "check the user (app)"),
        ("UnknownHostException: db", "is running and reachable"),
        ('ERROR: column "updated_at" does not exist', "(cursor, primary_key, delete_column"),
        ("Table 'shop.orders' doesn't exist", "names a table the database doesn't have"),
        ("wrong number of dimensions: 2-dimensional array", "more than one dimension"),
        ("The column holds infinity", "PostgreSQL 'infinity'"),
        ("[PATH_NOT_FOUND] Path does not exist: /landing/x", "existing folder"),
        ("something unheard of", "the cursor did not move"),
        # A failure of no known kind: a rerun helps only if its cause passes, and says so.
        ("something unheard of", "If the same run fails the same way again, it will every time"),
    ],
)
def test_each_kind_of_failure_gets_its_fix(said: str, fix: str) -> None:
    text = str(source_error(table_spec(), SparkFailure(said), "reading"))

    assert fix in text


def test_a_query_table_is_told_to_check_its_query() -> None:
    table = table_spec(table=None, query="SELECT * FROM orders WHERE")  # type: ignore[arg-type]

    text = str(source_error(table, SparkFailure("syntax error at end of input"), "reading"))

    assert "the `query:` of table 'orders' must run on its own in the database" in text


def test_our_own_raised_check_keeps_its_words_without_sparks_wrapping() -> None:
    said = (
        "SparkRuntimeException: [USER_RAISED_EXCEPTION] column 'amount' holds 1e400, which "
        "double can't keep SQLSTATE: P0001"
    )

    text = str(source_error(table_spec(), SparkFailure(said), "reading"))

    assert "reading failed: column 'amount' holds 1e400, which double can't keep." in text
    assert "USER_RAISED_EXCEPTION" not in text and "SQLSTATE" not in text


def test_a_spark_connect_server_that_is_gone_is_an_engine_error_and_nothing_else_is() -> None:
    gone = SparkFailure("<_MultiThreadedRendezvous of RPC: StatusCode.UNAVAILABLE ...>")

    error = engine_error(table_spec(), gone, "reading the window")

    assert isinstance(error, EngineError)
    assert "stopped answering while reading the window" in str(error)
    assert "incremental-assets engine start" in str(error)
    assert engine_error(table_spec(), SparkFailure("relation does not exist"), "reading") is None


def test_failures_of_keeps_our_errors_and_words_the_others() -> None:
    ours = ConfigError("already worded")

    with pytest.raises(ConfigError) as kept, failures_of(table_spec(), "reading"):
        raise ours
    with pytest.raises(SourceError) as worded, failures_of(table_spec(), "reading"):
        raise RuntimeError("Connection refused")

    assert kept.value is ours
    assert "reading failed: Connection refused." in str(worded.value)
    assert worded.value.__cause__ is None and worded.value.__suppress_context__


def test_a_write_failure_of_unknown_cause_never_just_says_run_again() -> None:
    """The review's finding: deterministic failures (a sparse key's width, a map column) said
    "Fix: fix the cause and run again", which can't work for them."""
    text = str(lake_error("orders", "/lake/orders", "IllegalArgumentException: something"))

    assert "fix the cause and run again" not in text
    assert "If the same run fails the same way again, it will every time" in text
    assert "table 'orders'" in text and "The lake stays as the last run left it" in text
