"""The dashboard in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven
by Selenium): sign in, see live data from a running worker and a schedule in the Coordination
section, retry a failed job from the page.
Set ``LEDGERQ_TEST_SCREENSHOT=path.png`` to keep a screenshot of the overview."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq.admin.server import AdminServer
from ledgerq.app import schedule_ops
from ledgerq.core.schedules import ScheduleRequest
from ledgerq.core.states import JobState
from tests.admin.conftest import ADMIN_TOKEN, Served
from tests.helpers import running_worker, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[object]:
    """A headless Chromium under Selenium."""
    if CHROMIUM is None or DRIVER is None:
        message = "chromium and chromium-driver are not installed (apt-get install them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_dashboard_shows_live_data_and_retries_a_failed_job(
    served_sqlite: Served, browser: object, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    driver: WebDriver = browser  # type: ignore[assignment]
    app = served_sqlite.app
    client = app.client
    failed_id = client.enqueue([client.build("admin.flaky")])[0].job_id
    client.enqueue([client.build("admin.add", [n, n]) for n in range(5)])
    ops = schedule_ops.schedule_ops(app.settings, app.parts, app.registry, app.schedules)
    ops.add_schedule(ScheduleRequest("nightly-sum", cron="0 3 * * *", task="admin.add"))
    server = AdminServer(served_sqlite.http, host="127.0.0.1", port=0)
    base = f"http://127.0.0.1:{server.start()}"
    try:
        with running_worker(app, queues=("default", "mail"), poll_interval_seconds=0.05) as w:
            wait_until(lambda: client.get(failed_id).state is JobState.DEAD, what="job dead")
            client.enqueue([client.build("admin.slow", [30])])

            driver.get(f"{base}/dashboard")
            assert driver.current_url.endswith("/dashboard/login")
            driver.find_element(By.NAME, "token").send_keys(ADMIN_TOKEN)
            driver.find_element(By.CSS_SELECTOR, "form.login button").click()
            wait_until(lambda: driver.current_url.endswith("/dashboard"), what="signed in")

            def text_of(selector: str) -> str:
                return str(driver.find_element(By.CSS_SELECTOR, selector).text)

            # Live data: the page's script polls the API and shows the busy worker and the
            # five jobs it finished, without a reload.
            wait_until(lambda: w.id in text_of("#workers"), timeout=20, what="worker shown")
            row = '#queues tr[data-queue="default"]'
            wait_until(
                lambda: text_of(row).split()[5:6] == ["5"], timeout=20, what="succeeded count"
            )
            assert "mail" in text_of("#queues")
            coordination = driver.find_element(By.ID, "coordination")
            assert coordination.is_displayed()
            assert "0 3 * * *" in text_of('#schedules tr[data-schedule="nightly-sum"]')
            if target := os.environ.get("LEDGERQ_TEST_SCREENSHOT"):
                driver.save_screenshot(target)

            failure = f'#failures tr[data-job-id="{failed_id}"]'
            assert "dead" in text_of(failure)
            driver.find_element(By.CSS_SELECTOR, f"{failure} button.act").click()
            wait_until(
                lambda: client.get(failed_id).state is JobState.SUCCEEDED,
                what="retried job succeeded",
            )
            driver.get(f"{base}/dashboard/jobs/{failed_id}")
            assert text_of("#job-state") == "succeeded"
            assert "2 of 1" in text_of("table.detail")
            driver.save_screenshot(str(tmp_path / "job.png"))
    finally:
        server.stop()
