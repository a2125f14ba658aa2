"""What a shared engine lacks for a run's configuration, and what it is restarted with: pure."""

from __future__ import annotations

import pytest

from incremental_assets.engine_settings import Lack, described, fixed_at_start, lacks, with_needed

STARTED = {
    "spark.master": "local[*]",
    "spark.app.name": "shop (shared engine)",
    "spark.jars": "/jars/iceberg.jar,/jars/sqlite.jar",
    "spark.driver.extraClassPath": "/jars/sqlite.jar",
    "spark.sql.extensions": "Iceberg",
    "spark.driver.memory": "2g",
}


@pytest.mark.parametrize(
    ("key", "fixed"),
    [
        ("spark.jars", True),
        ("spark.master", True),
        ("spark.driver.memory", True),
        ("spark.sql.extensions", True),  # static, though under spark.sql.
        ("spark.sql.warehouse.dir", True),
        ("spark.sql.shuffle.partitions", False),  # a session sets it
        ("spark.sql.session.timeZone", False),
        ("spark.app.name", False),  # the client's own
        ("spark.ui.showConsoleProgress", False),
        ("spark.connect.grpc.binding.port", False),  # the engine's own
    ],
)
def test_only_settings_a_server_takes_at_its_start_need_a_restart(key: str, fixed: bool) -> None:
    assert fixed_at_start(key) is fixed


@pytest.mark.parametrize(
    ("wanted", "lacking"),
    [
        ({**STARTED, "spark.app.name": "shop", "spark.sql.shuffle.partitions": "2"}, ()),
        ({"spark.jars": "/jars/sqlite.jar"}, ()),  # a subset of its jars serves
        ({"spark.master": "local[*]", "spark.driver.memory": "2g"}, ()),
        (
            {
                "spark.jars": "/jars/sqlite.jar,/jars/postgresql.jar",
                "spark.driver.extraClassPath": "/jars/sqlite.jar:/jars/postgresql.jar",
            },
            (
                Lack("spark.jars", ("/jars/postgresql.jar",)),
                Lack("spark.driver.extraClassPath", ("/jars/postgresql.jar",)),
            ),
        ),
        (
            {"spark.driver.memory": "4g", "spark.executor.cores": "2"},
            (
                Lack("spark.driver.memory", ("4g",), "2g"),
                Lack("spark.executor.cores", ("2",), None),
            ),
        ),
        ({"spark.sql.extensions": "Iceberg,Delta"}, (Lack("spark.sql.extensions", ("Delta",)),)),
    ],
)
def test_an_engine_lacks_what_a_run_needs_that_it_did_not_start_with(
    wanted: dict[str, str], lacking: tuple[Lack, ...]
) -> None:
    assert lacks(STARTED, wanted) == lacking


def test_a_jar_is_named_once_with_every_list_it_is_missing_from() -> None:
    lacking = lacks(
        STARTED,
        {
            "spark.jars": "/jars/postgresql.jar",
            "spark.driver.extraClassPath": "/jars/postgresql.jar",
            "spark.driver.memory": "4g",
            "spark.executor.cores": "2",
        },
    )
    assert described(lacking) == (
        "the jar postgresql.jar (/jars/postgresql.jar, in spark.jars and "
        "spark.driver.extraClassPath); spark.driver.memory=4g (it has 2g); "
        "spark.executor.cores=2 (it has none)"
    )


def test_a_restart_keeps_what_the_engine_had_and_adds_what_the_run_needs() -> None:
    wanted = {
        "spark.jars": "/jars/postgresql.jar",
        "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": "2",
        "spark.app.name": "shop",
    }
    restarted = with_needed(STARTED, wanted)
    assert restarted == {
        **STARTED,
        "spark.jars": "/jars/iceberg.jar,/jars/sqlite.jar,/jars/postgresql.jar",
        "spark.driver.memory": "4g",
    }
    assert lacks(restarted, wanted) == ()
