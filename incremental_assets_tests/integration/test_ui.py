"""The Dagster UI, in a real headless browser (Debian's chromium driven by Playwright).

Two materializations into a DAGSTER_HOME, then `dagster dev` on it: the asset's page must show
the cursor, the row counts, the description and the column schema, plot numeric metadata, and
list the checks that ran with the materialization.
The screenshots are kept in test-artifacts/.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from incremental_assets.demo import change, seed
from incremental_assets.resources import IncrementalSparkResource
from incremental_assets_tests.support.postgres import free_port
from incremental_assets_tests.support.project import materialize, write_project

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def loaded_home(tmp_path: Path, spark_resource: IncrementalSparkResource) -> tuple[Path, Path]:
    """A DAGSTER_HOME holding two materializations of the demo's orders."""
    landing = tmp_path / "landing"
    seed(landing)
    table = {
        "name": "orders",
        "source": "export",
        "table": "orders",
        "mode": "merge",
        "cursor": "updated_at",
        "primary_key": ["id"],
        "delete_column": "deleted_at",
        "buckets": 4,
    }
    config = {
        "lake": {"path": str(tmp_path / "lake")},
        "sources": {"export": {"type": "files", "path": str(landing)}},
        "tables": [table],
    }
    project = write_project(tmp_path, config)
    home = tmp_path / "home"
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert materialize(project, "orders", instance, spark_resource).success
        change(landing)
        assert materialize(project, "orders", instance, spark_resource).success
    return home, Path(project.path)


@pytest.fixture
def dagster_dev(loaded_home: tuple[Path, Path], tmp_path: Path) -> Iterator[str]:
    home, config = loaded_home
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "INCREMENTAL_ASSETS_CONFIG": str(config)}
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


def _open(page: Page, url: str) -> None:
    page.goto(url, wait_until="networkidle")
    skip = page.get_by_role("button", name="Skip")  # the newsletter prompt of a fresh instance
    try:
        skip.wait_for(timeout=8_000)
        skip.click()
    except PlaywrightTimeout:
        pass


def test_the_asset_page_shows_the_cursor_counts_schema_and_plots(dagster_dev: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1400})
        _open(page, f"{dagster_dev}/assets/orders")
        page.get_by_text("Loaded incrementally on cursor updated_at", exact=False).wait_for(
            timeout=60_000
        )
        overview = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "asset-overview.png"), full_page=True)

        page.get_by_text("Plots", exact=True).click()
        page.get_by_text("rows_extracted", exact=True).wait_for(timeout=30_000)
        plots = page.locator("canvas").count()
        page.screenshot(path=str(ARTIFACTS / "asset-plots.png"), full_page=True)

        _open(page, f"{dagster_dev}/assets/orders?view=events")
        page.get_by_text("rows_extracted", exact=True).first.wait_for(timeout=30_000)
        events = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "asset-events.png"), full_page=True)

        _open(page, f"{dagster_dev}/assets/orders?view=checks")
        page.get_by_text("primary_key_unique", exact=False).first.wait_for(timeout=30_000)
        checks = page.inner_text("body")
        page.screenshot(path=str(ARTIFACTS / "asset-checks.png"), full_page=True)
        browser.close()

    assert "2025-01-03T01:00:10.000000+00:00" in overview  # the cursor
    assert "Row count" in overview and "1,040" in overview
    for column in ("customer_id", "deleted_at", "_batch"):
        assert column in overview
    assert plots >= 4  # one plot per numeric metadata key
    for key in (
        "cursor",
        "previous_cursor",
        "rows_extracted",
        "rows_written",
        "rows_inserted",
        "extract_seconds",
    ):
        assert key in events
    assert "161" in events and "147" in events  # the second run's rows read and written
    for check in ("cursor_not_backwards", "primary_key_unique"):
        assert check in checks
    assert checks.count("Succeeded") >= 2 and "Passed" in checks, checks[:2000]
