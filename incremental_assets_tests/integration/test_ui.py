"""The Dagster UI, in a real headless browser (Debian's chromium driven by Playwright).

Two materializations of the demo's orders into a DAGSTER_HOME holding the shipped dagster.yaml, a
table whose first run failed, a table whose configuration is wrong, then `dagster dev` on it. The
UI must show: the source table as an asset upstream of the lake table, labelled apart from it on
the graph, its description saying how to start its sensor; the bad table beside the good ones,
saying what is wrong (and `incremental-assets status` listing the good ones and naming it); the
asset's cursor, row counts, description (with the command that moves the cursor) and column
schema; plots of quantities only; the checks that ran with the materialization, none of them a
value dressed as a verdict; a cursor set from the CLI as what the next run reads, before that
run, and the run reading it; and the failed first run's checks as skipped, never failed, by a
checks-only run the Runs page names as such, from a sensor that ticks every few minutes. The
screenshots are kept in test-artifacts/ (docs/images/ holds copies).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from incremental_assets.checks import SKIPPED_WHY
from incremental_assets.config import Project
from incremental_assets.definitions import build_definitions
from incremental_assets.demo import change, seed
from incremental_assets.progress import INTERVAL_ENV
from incremental_assets.progress_lines import MARK
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets.sensors import SENSOR_NAME_TAG, evaluate
from incremental_assets.translator import CHECKS_SENSOR, IncrementalAssetsTranslator
from incremental_assets_tests.support.cli import cli_env, run_command
from incremental_assets_tests.support.postgres import free_port
from incremental_assets_tests.support.project import materialize, write_project

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ORDERS = {
    "name": "orders",
    "source": "export",
    "table": "orders",
    "mode": "merge",
    "cursor": "updated_at",
    "primary_key": ["id"],
    "delete_column": "deleted_at",
    "buckets": 4,
}
# Its landing folder never arrives: its first run fails before it commits anything.
RETURNS = {**ORDERS, "name": "returns", "table": "returns", "delete_column": None}
# A typo in its mode: the UI shows it beside the others, every run of it failing with the problem.
REFUNDS = {"name": "refunds", "source": "export", "table": "refunds", "mode": "upsert"}
BAD_MODE = "table 'refunds', field 'mode': 'upsert' is not one of its values"
SET_CURSOR = "2025-01-02T00:00:00.000000+00:00"
NEXT_RUN_READS = f"The next run reads from {SET_CURSOR}: cursor set by hand (replay"
CHECKS = """
query ($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      dependencyKeys { path }
      assetChecksOrError {
        ... on AssetChecks { checks { name executionForLatestMaterialization { status } } }
      }
    }
  }
}
"""


@dataclass(frozen=True)
class Loaded:
    home: Path
    project: Project


@pytest.fixture
def loaded(tmp_path: Path, spark_resource: IncrementalSparkResource) -> Loaded:
    """A DAGSTER_HOME holding two materializations of the demo's orders, a failed first run of
    `returns`, and one observation of the orders' source by its sensor; then the configuration
    gains `refunds`, whose mode is wrong."""
    landing = tmp_path / "landing"
    seed(landing)
    config: dict[str, Any] = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"export": {"type": "files", "path": str(landing)}},
        "tables": [ORDERS, {k: v for k, v in RETURNS.items() if v is not None}],
    }
    project = write_project(tmp_path, config)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert materialize(project, "orders", instance, spark_resource).success
        change(landing)
        assert materialize(project, "orders", instance, spark_resource).success
        assert not materialize(project, "returns", instance, spark_resource).success
        orders = project.table("orders")
        source = IncrementalAssetsTranslator(project.lake).source_asset_key(orders)
        tick = evaluate(instance, orders, dg.AssetKey("orders"), None, None, source)
        assert isinstance(tick, dg.SensorResult) and tick.asset_events
        for event in tick.asset_events:
            instance.report_runless_asset_event(event)  # as the sensor's tick records it
    with_refunds = {**config, "tables": [*config["tables"], REFUNDS]}
    Path(project.path).write_text(yaml.safe_dump(with_refunds, sort_keys=False))
    return Loaded(home, project)


@pytest.fixture
def dagster_dev(loaded: Loaded, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(loaded.home),
        "INCREMENTAL_ASSETS_CONFIG": loaded.project.path,
    }
    command = [
        str(Path(sys.executable).with_name("dagster")),
        "dev",
        "-m",
        "incremental_assets",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    log = (tmp_path / "dagster-dev.log").open("w")
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError(
                        (tmp_path / "dagster-dev.log").read_text()[-3000:]
                    ) from None
                time.sleep(1)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        log.close()


def _open(page: Page, url: str, *, first: bool = False) -> None:
    """Go to `url`. The first page a fresh instance shows holds its newsletter prompt: skipped
    there, it doesn't come back (the browser keeps that), so later pages don't wait for it (8 s
    each); should it come back anyway, it is skipped before the next action on the page."""
    page.goto(url, wait_until="networkidle")
    if not first:
        return
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=8_000)
        skip.click()
    except PlaywrightTimeout:
        pass
    page.add_locator_handler(skip, lambda: skip.click())


def _asset(page: Page, url: str, path: list[str]) -> dict[str, Any]:
    """The asset as the UI's own GraphQL API gives it: its upstream keys, its checks' status."""
    answer = page.request.post(
        f"{url}/graphql",
        data=json.dumps({"query": CHECKS, "variables": {"path": path}}),
        headers={"Content-Type": "application/json"},
    )
    node: dict[str, Any] = answer.json()["data"]["assetNodeOrError"]
    return node


def _statuses(node: dict[str, Any]) -> dict[str, str | None]:
    return {
        check["name"]: (check["executionForLatestMaterialization"] or {}).get("status")
        for check in node["assetChecksOrError"]["checks"]
    }


def _check_page(page: Page, url: str, table: str, check: str) -> str:
    """The text of the table's Checks tab with `check` selected."""
    _open(page, f"{url}/assets/{table}?view=checks")
    page.get_by_text(check, exact=True).first.click()
    page.get_by_text("Latest execution", exact=True).wait_for(timeout=30_000)
    return page.inner_text("body")


def _cli(loaded: Loaded, *args: str) -> subprocess.CompletedProcess[str]:
    """`incremental-assets <args>` on the project, as a user runs it."""
    command = str(Path(sys.executable).with_name("incremental-assets"))
    done = subprocess.run(
        [command, "--config", loaded.project.path, *args],
        env={**os.environ, "DAGSTER_HOME": str(loaded.home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.xdist_group("connect")
def test_the_ui_shows_lineage_cursor_counts_schema_plots_and_honest_checks(
    dagster_dev: str,
    loaded: Loaded,
    spark_resource: IncrementalSparkResource,
    tmp_path: Path,
    connect: str,
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    url = dagster_dev
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1200})

        # The source table is an asset upstream of the lake table, drawn with an edge to it and
        # labelled apart from it; the bad table beside the good ones.
        _open(page, f"{url}/asset-groups/export", first=True)
        page.get_by_text("files", exact=True).first.wait_for(timeout=60_000)
        page.wait_for_timeout(2_000)
        lineage = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "lineage.png"))
        orders = _asset(page, url, ["orders"])

        _open(page, f"{url}/assets/export/orders_source")
        page.get_by_text("dagster sensor start", exact=False).first.wait_for(timeout=30_000)
        source_page = page.inner_text("body")

        _open(page, f"{url}/assets/refunds")
        page.get_by_text("Not loaded", exact=False).first.wait_for(timeout=30_000)
        bad_table = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "bad-table.png"), full_page=True)
        status = _cli(loaded, "status")

        # The asset's page: the cursor, counts, schema, and how to move the cursor.
        _open(page, f"{url}/assets/orders")
        page.get_by_text("Loaded incrementally on cursor updated_at", exact=False).wait_for(
            timeout=60_000
        )
        overview = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "asset-overview.png"), full_page=True)

        # Plots: quantities only (identifiers are text, the internals one JSON entry).
        page.get_by_text("Plots", exact=True).click()
        page.get_by_text("rows_extracted", exact=True).wait_for(timeout=30_000)
        plotted = page.inner_text("body").split("Plots", 1)[1].split("Lineage", 1)[0].split()
        page.screenshot(path=str(ARTIFACTS / "asset-plots.png"), full_page=True)

        _open(page, f"{url}/assets/orders?view=events")
        page.get_by_text("rows_extracted", exact=True).first.wait_for(timeout=30_000)
        events = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "asset-events.png"), full_page=True)

        checks = _check_page(page, url, "orders", "primary_key_unique")
        page.screenshot(path=str(ARTIFACTS / "asset-checks.png"), full_page=True)

        # A cursor set from the CLI is on the page before any run, and the next run reads it.
        _cli(loaded, "cursor", "set", "orders", "2025-01-02T00:00:00Z", "--reason", "replay")
        _open(page, f"{url}/assets/orders?view=events")
        page.get_by_text(NEXT_RUN_READS, exact=False).first.wait_for(timeout=30_000)
        hand_set = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "cursor-set-by-hand.png"), full_page=True)
        with dg.DagsterInstance.from_config(str(loaded.home)) as instance:
            run = materialize(loaded.project, "orders", instance, spark_resource)
        assert run.success
        _open(page, f"{url}/assets/orders?view=events")
        page.get_by_text("previous_cursor", exact=True).first.wait_for(timeout=30_000)
        replayed = page.inner_text("body")

        # The failed first run's checks: skipped (once the checks sensor has ticked), not failed.
        deadline = time.monotonic() + 180
        while set(_statuses(_asset(page, url, ["returns"])).values()) - {"SKIPPED", "SUCCEEDED"}:
            assert time.monotonic() < deadline, _statuses(_asset(page, url, ["returns"]))
            time.sleep(5)
        returns = _check_page(page, url, "returns", "primary_key_unique")
        page.screenshot(path=str(ARTIFACTS / "failed-run-checks.png"), full_page=True)
        returns_statuses = _statuses(_asset(page, url, ["returns"]))

        # The run that marked them: on the Runs page, launched by the sensor named for it.
        _open(page, f"{url}/runs")
        page.get_by_text(CHECKS_SENSOR, exact=True).first.wait_for(timeout=30_000)
        runs_page = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "runs-after-failure.png"), full_page=True)

        # A run over Spark Connect, as on the shared engine: its progress in the run's log.
        remote = _over_connect(loaded, connect, tmp_path)
        env = cli_env(remote, loaded.home, **{INTERVAL_ENV: "0.3"})
        over_connect = run_command(tmp_path, env, "run", "orders", "--full")
        assert over_connect.returncode == 0, over_connect.stderr[-2000:]
        with dg.DagsterInstance.from_config(str(loaded.home)) as instance:
            (latest,) = instance.get_runs(limit=1)
        _open(page, f"{url}/runs/{latest.run_id}")
        page.get_by_placeholder("Filter…", exact=True).first.fill("progress")
        page.get_by_text(f"orders: {MARK}", exact=False).first.wait_for(timeout=60_000)
        run_log = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "run-progress.png"), full_page=True)
        browser.close()

    assert orders["dependencyKeys"] == [{"path": ["export", "orders_source"]}]
    # The graph's labels: the source's node apart from the lake table's, of the source's kind.
    labels = lineage.split()
    assert {"orders_source", "orders", "returns_source", "returns", "refunds"} <= set(labels)
    assert "files" in labels
    assert "Automation page" in source_page
    assert "dagster sensor start orders_source_sensor" in source_page
    # The bad table beside the good ones, in the UI and in `incremental-assets status`.
    assert "Not loaded: its configuration is invalid" in bad_table and BAD_MODE in bad_table
    listed = [line.split()[0] for line in status.stdout.splitlines()[1:] if line[:1].strip()]
    assert listed == ["orders", "returns"]
    assert "table 'refunds' is left out until its configuration is fixed" in status.stderr
    assert BAD_MODE in status.stderr
    assert "2025-01-03T01:00:10.000000+00:00" in overview  # the cursor
    assert "Row count" in overview and "1,040" in overview
    for column in ("customer_id", "deleted_at", "_batch"):
        assert column in overview
    assert "incremental-assets cursor set orders <value>" in overview
    assert "Moving the cursor by hand" in overview
    assert {"rows_extracted", "rows_written", "extract_seconds", "dagster/row_count"} <= set(
        plotted
    )
    assert not {"batch", "iceberg_snapshot_id", "internals", "cursor"} & set(plotted), plotted
    for key in ("cursor", "previous_cursor", "rows_extracted", "rows_written", "rows_inserted"):
        assert key in events
    assert "161" in events and "147" in events  # the second run's rows read and written
    for check in ("cursor_not_backwards", "primary_key_unique"):
        assert check in checks
    assert "Passed" in checks and "Failed" not in checks
    assert "next_run_reads_from" not in checks  # a value is no check
    assert NEXT_RUN_READS in hand_set
    assert run.metadata["previous_cursor"] == SET_CURSOR
    assert SET_CURSOR in replayed  # the run's previous_cursor, as the page showed it
    assert returns_statuses == {"cursor_not_backwards": "SKIPPED", "primary_key_unique": "SKIPPED"}
    assert "Skipped" in returns and "Execution failed" not in returns.split("Checks (2)")[1]
    assert SKIPPED_WHY in returns  # why, on the check's page
    # A checks-only run: no asset, the three checks, and said so where it is listed.
    with dg.DagsterInstance.from_config(str(loaded.home)) as instance:
        (marking,) = instance.get_runs(dg.RunsFilter(tags={SENSOR_NAME_TAG: CHECKS_SENSOR}))
    assert marking.status == dg.DagsterRunStatus.SUCCESS and not marking.asset_selection
    assert {key.asset_key.path[0] for key in marking.asset_check_selection or ()} == {"returns"}
    assert len(marking.asset_check_selection or ()) == 2
    assert "incremental_assets/checks_only: after failure" in runs_page
    assert CHECKS_SENSOR in runs_page and "Failure" in runs_page
    # The checks sensor's ticks: one per 5 minutes, each two INFO lines of the daemon's (the
    # tick, and why it skipped), and three more for the tick that launched the checks-only run.
    ticks, seconds, lines = _ticks(tmp_path / "dagster-dev.log", CHECKS_SENSOR)
    assert 1 <= ticks <= 1 + seconds // 300, (ticks, seconds)
    assert len(lines) <= 2 * ticks + 3, lines
    # The test's window may be shorter than Dagster's default 30 seconds: the interval as the
    # project's definitions give it to Dagster says the rest.
    served = build_definitions(loaded.project).resolve_sensor_def(CHECKS_SENSOR)
    assert served.minimum_interval_seconds == 300
    # Progress a person can read, in the UI's log of a run over Spark Connect: the phase and its
    # time (the stages' tasks, where one ran at the moment, `test_run_progress.py` checks).
    assert re.search(rf"orders: {MARK} [a-z][^;]* for \d+ s; ", run_log), run_log


def _over_connect(loaded: Loaded, connect: str, tmp_path: Path) -> Path:
    """The project's configuration, its runs on the Spark Connect server at `connect`."""
    config = yaml.safe_load(Path(loaded.project.path).read_text())
    config["spark"] = {"remote": connect, "conf": {"spark.sql.shuffle.partitions": "2"}}
    path = tmp_path / "over-connect.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _ticks(log: Path, sensor: str) -> tuple[int, float, list[str]]:
    """How many ticks of `sensor` the daemon logged, over how many seconds of its log, and the
    daemon's lines naming it."""
    lines = log.read_text().splitlines()
    stamps = [
        datetime.strptime(found.group(), "%Y-%m-%d %H:%M:%S %z")
        for found in map(_STAMP.search, lines)
        if found
    ]
    daemon = [line for line in lines if "dagster.daemon" in line and sensor in line]
    started = f"Checking for new runs for sensor: {sensor}"
    ticks = sum(line.rstrip().endswith(started) for line in daemon)
    return ticks, (stamps[-1] - stamps[0]).total_seconds(), daemon


# When a line of `dagster dev`'s log was written (its lines may start with colour codes).
_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}")
