"""The dashboard in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``, driven
by Selenium), one browser for the module, over a real SQLite ledger: every page loads and shows
the ledger's data; the actions on it (retry a job, pause and resume a schedule, retry a batch's
failed members, retry a workflow's failed steps, retry a queue's dead jobs in bulk after its
count) change the database.

Set ``LEDGERQ_TEST_SCREENSHOT_DIR=docs`` (``make screenshots``) to write ``dashboard-<page>.png``
(1280x800) of each page there."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from ledgerq.admin.server import AdminServer
from ledgerq.app import schedule_ops
from ledgerq.core import fleet
from ledgerq.core.schedules import ScheduleRequest
from ledgerq.core.states import JobState
from ledgerq.core.workflow import StepState, WorkflowState
from ledgerq.store.tables import queue_workers
from tests.admin import dashboard_scene
from tests.admin.conftest import ADMIN_TOKEN, Served
from tests.admin.test_requeue_failed import bury
from tests.helpers import running_worker, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
SCREENSHOTS = os.environ.get("LEDGERQ_TEST_SCREENSHOT_DIR")
T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium under Selenium, shared by the module's tests."""
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
        "--window-size=1280,800",
        "--hide-scrollbars",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The browser pointed at one served ledger, signed in with the admin token."""

    def __init__(self, driver: Any, base: str) -> None:
        self.driver = driver
        self.base = base

    def sign_in(self) -> None:
        from selenium.webdriver.common.by import By

        self.driver.delete_all_cookies()
        self.driver.get(f"{self.base}/dashboard")
        assert self.driver.current_url.endswith("/dashboard/login")
        self.driver.find_element(By.NAME, "token").send_keys(ADMIN_TOKEN)
        self.driver.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait_until(lambda: self.driver.current_url.endswith("/dashboard"), what="signed in")

    def open(self, path: str) -> None:
        self.driver.get(f"{self.base}{path}")

    def find(self, selector: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def text(self, selector: str) -> str:
        """The element's text; "" while there is none (e.g. the page is reloading)."""
        from selenium.common.exceptions import NoSuchElementException

        try:
            return str(self._fresh(lambda: self.find(selector).text))
        except NoSuchElementException:
            return ""

    def has(self, selector: str) -> bool:
        from selenium.webdriver.common.by import By

        return bool(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def click(self, selector: str) -> None:
        self._fresh(lambda: self.find(selector).click())

    @staticmethod
    def _fresh(action: Callable[[], T]) -> T:
        """``action`` again when the element it found was replaced meanwhile (the
        Coordination section is swapped for a fresh copy every 3 s)."""
        from selenium.common.exceptions import StaleElementReferenceException

        for _ in range(4):
            try:
                return action()
            except StaleElementReferenceException:
                continue
        return action()

    def at(self, path: str) -> bool:
        return bool(self.driver.current_url == f"{self.base}{path}")

    def shoot(self, name: str) -> None:
        """Keep a screenshot of the page as ``dashboard-<name>.png`` when asked to."""
        if SCREENSHOTS:
            self.driver.execute_script("window.scrollTo(0, 0)")
            self.driver.save_screenshot(str(Path(SCREENSHOTS) / f"dashboard-{name}.png"))


@pytest.fixture
def page(served_sqlite: Served, browser: Any) -> Iterator[Page]:
    """The browser signed in to a server of its own over a fresh SQLite ledger."""
    server = AdminServer(served_sqlite.http, host="127.0.0.1", port=0)
    base = f"http://127.0.0.1:{server.start()}"
    try:
        shown = Page(browser, base)
        shown.sign_in()
        yield shown
    finally:
        server.stop()


def _leave_fleet(served: Served) -> None:
    """A worker that stopped cleanly and one that stopped heartbeating (failed over)."""
    admin = served.app.parts.fleet
    for worker_id in ("w-stopped@host-a", "w-dead@host-b"):
        admin.register_worker(fleet.Registration(worker_id, "host", 1, ("default",), 4, "1"))
    admin.deregister_worker("w-stopped@host-a")
    long_ago = admin.failover.dialect.bind_time(datetime.now(UTC) - timedelta(hours=1))
    with served.app.parts.store.engine.begin() as conn:
        stale = sa.update(queue_workers).where(queue_workers.c.id == "w-dead@host-b")
        conn.execute(stale.values(heartbeat_at=long_ago))
    admin.fail_over_workers(ttl_seconds=60, detected_by="test")


def test_overview_is_live_and_its_actions_change_the_ledger(
    served_sqlite: Served, page: Page
) -> None:
    app = served_sqlite.app
    client = app.client
    failed_id = client.enqueue([client.build("admin.flaky")])[0].job_id
    done = client.enqueue([client.build("admin.add", [n, n]) for n in range(5)])
    ops = schedule_ops.schedule_ops(app.settings, app.parts, app.registry, app.schedules)
    ops.add_schedule(ScheduleRequest("nightly-sum", cron="0 3 * * *", task="admin.add"))
    _leave_fleet(served_sqlite)

    def paused(name: str) -> bool:
        return next(o.state.paused for o in ops.list_schedules() if o.state.schedule.name == name)

    with running_worker(app, queues=("default", "mail"), poll_interval_seconds=0.05) as w:
        wait_until(lambda: client.get(failed_id).state is JobState.DEAD, what="job dead")
        wait_until(
            lambda: all(client.get(r.job_id).state is JobState.SUCCEEDED for r in done),
            what="jobs done",
        )
        client.enqueue([client.build("admin.slow", [30])])
        page.open("/dashboard")
        # The charts start from the ledger's last hour: the jobs finished before the load.
        chart = page.find("#chart-throughput")
        assert int(chart.get_attribute("data-total")) >= 5
        assert chart.get_attribute("data-minutes") == "60"
        assert int(page.find("#chart-failures").get_attribute("data-total")) >= 1

        # Live: the script polls the API and shows the busy worker and the five jobs done.
        wait_until(lambda: w.id in page.text("#workers"), timeout=20, what="worker shown")
        row = '#queues tr[data-queue="default"]'
        wait_until(lambda: page.text(row).split()[5:6] == ["5"], timeout=20, what="succeeded")
        assert "mail" in page.text("#queues")
        # ...and the throughput chart goes on from its history with the jobs done since.
        more = client.enqueue([client.build("admin.add", [n, 1]) for n in range(3)])
        wait_until(
            lambda: all(client.get(r.job_id).state is JobState.SUCCEEDED for r in more),
            what="more jobs done",
        )
        wait_until(
            lambda: int(chart.get_attribute("data-total")) >= 8, timeout=10, what="chart live"
        )
        assert page.has('#workers tr[data-status="stopped"]')
        assert page.has('#workers tr[data-status="dead"]')
        assert "w-dead@host-b" in page.text('#workers tr[data-status="dead"]')

        # The coordination section refreshes by itself: a schedule added now shows up.
        assert "0 3 * * *" in page.text('#schedules tr[data-schedule="nightly-sum"]')
        ops.add_schedule(ScheduleRequest("added-later", cron="*/5 * * * *", task="admin.add"))
        wait_until(
            lambda: page.has('#schedules tr[data-schedule="added-later"]'),
            timeout=15,
            what="coordination refreshed",
        )
        page.shoot("overview")

        page.click('#schedules tr[data-schedule="nightly-sum"] button.act')
        wait_until(lambda: paused("nightly-sum"), what="schedule paused")
        wait_until(
            lambda: "Resume" in page.text('#schedules tr[data-schedule="nightly-sum"]'),
            what="resume offered",
        )
        page.click('#schedules tr[data-schedule="nightly-sum"] button.act')
        wait_until(lambda: not paused("nightly-sum"), what="schedule resumed")

        failure = f'#failures tr[data-job-id="{failed_id}"]'
        wait_until(lambda: page.has(failure), what="failure listed")
        assert "dead" in page.text(failure)
        page.click(f"{failure} button.act")
        wait_until(
            lambda: client.get(failed_id).state is JobState.SUCCEEDED, what="retried job ran"
        )
        page.open(f"/dashboard/jobs/{failed_id}")
        assert page.text("#job-state") == "succeeded"
        assert "2 of 1" in page.text("table.detail")

        # A session that ends (signed out elsewhere, serve restarted) stops the live updates
        # with one message.
        page.open("/dashboard")
        page.driver.delete_all_cookies()
        wait_until(lambda: "session ended" in page.text("#toast"), what="session ended shown")


def test_batch_jobs_and_job_pages_link_both_ways_and_retry_failed_members(
    served_sqlite: Served, page: Page
) -> None:
    from selenium.webdriver.common.by import By

    app = served_sqlite.app
    scene = dashboard_scene.build(app)
    dashboard_scene.run(app, scene)

    page.open("/dashboard/batches")
    row = f'#batches tr[data-batch-id="{scene.batch_id}"]'
    assert "5 / 5" in page.text(row) and "2 dead" in page.text(row)
    page.shoot("batches")
    page.click(f"{row} a")
    wait_until(lambda: page.at(f"/dashboard/batches/{scene.batch_id}"), what="batch page")
    assert "5 / 5" in page.text("#batch-progress")
    page.shoot("batch")

    page.click(f'#members tr[data-job-id="{scene.items_job}"] a')
    wait_until(lambda: page.at(f"/dashboard/jobs/{scene.items_job}"), what="job page")
    bar = page.find("#job-items progress")
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("3", "5")
    assert page.text("#job-error") == "RuntimeError: item 3 failed"
    page.shoot("job")
    page.click("#job-batch")
    wait_until(lambda: page.at(f"/dashboard/batches/{scene.batch_id}"), what="back to batch")
    (dead_step,) = [
        s.job_id for s in app.workflows.get(scene.workflow_id).steps if s.name == "enrich"
    ]

    # The jobs page filters with its form: the dead ones, with their error headers.
    page.open("/dashboard/jobs")
    from selenium.webdriver.support.ui import Select

    Select(page.find("form.filters select[name=state]")).select_by_value("dead")
    page.click("form.filters button")
    wait_until(lambda: "state=dead" in page.driver.current_url, what="filtered")
    rows = page.driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
    assert sorted(int(r.get_attribute("data-job-id")) for r in rows) == sorted(
        [scene.items_job, scene.boom_job, dead_step]
    )
    assert "RuntimeError: item 3 failed" in page.text(f'#jobs tr[data-job-id="{scene.items_job}"]')
    page.shoot("jobs")

    page.open(f"/dashboard/batches/{scene.batch_id}")
    page.click("main p button.act")  # Retry failed members
    wait_until(
        lambda: all(
            app.client.get(i).state is JobState.QUEUED for i in (scene.items_job, scene.boom_job)
        ),
        what="dead members queued again",
    )


def test_workflow_page_draws_the_dag_and_retries_failed_steps(
    served_sqlite: Served, page: Page
) -> None:
    app = served_sqlite.app
    scene = dashboard_scene.build(app)
    dashboard_scene.run(app, scene)

    page.open("/dashboard/workflows")
    link = f'#workflow-list tr[data-workflow="{scene.workflow_id}"] a'
    page.shoot("workflows")
    page.click(link)
    wait_until(lambda: page.at(f"/dashboard/workflows/{scene.workflow_id}"), what="workflow")
    assert page.text("#workflow-state") == "failed"

    def fill(step: str) -> str:
        rect = page.find(f'#dag g[data-step="{step}"] rect')
        return str(page.driver.execute_script("return getComputedStyle(arguments[0]).fill", rect))

    # Each step is coloured by its state, from the served style sheet.
    assert fill("extract") == fill("clean") == "rgb(218, 251, 225)"
    assert fill("enrich") == "rgb(255, 235, 233)"
    assert fill("report") == "rgb(246, 248, 250)"
    page.shoot("workflow")

    page.click('#dag a g[data-step="extract"]')
    wait_until(lambda: "/dashboard/jobs/" in page.driver.current_url, what="step's job")
    page.click("#job-workflow")
    wait_until(lambda: page.at(f"/dashboard/workflows/{scene.workflow_id}"), what="back")

    page.click("main p button.act")  # Retry failed steps (the only action of a failed one)
    view = wait_until(
        lambda: (v := app.workflows.get(scene.workflow_id)).state is WorkflowState.RUNNING and v,
        what="workflow running again",
    )
    states = {s.name: s.state for s in view.steps}
    assert states["enrich"] is StepState.QUEUED and states["extract"] is StepState.SUCCEEDED


def test_failover_page_and_the_bulk_retry_of_dead_jobs(served_sqlite: Served, page: Page) -> None:
    app = served_sqlite.app
    requeued, buried = dashboard_scene.fail_over_a_busy_worker(app)
    dead = [buried, *bury(app, "admin.flaky", [], 2)]

    def live() -> bool:
        """The script has redrawn the queues and workers (their links are its, not the
        server's, from now on)."""
        return bool(page.find("#overview").get_attribute("data-updated"))

    # A dead worker's row leads to its failover: who noticed, the jobs moved, linked.
    page.open("/dashboard")
    wait_until(live, what="live numbers drawn")
    lost = f'#workers tr[data-worker="{dashboard_scene.LOST}"]'
    page.click(f"{lost} a.failovers")
    wait_until(lambda: "/dashboard/failovers?worker=" in page.driver.current_url, what="page")
    event = f'#failovers tr[data-worker="{dashboard_scene.LOST}"]'
    assert dashboard_scene.DETECTED_BY in page.text(event) and " ms" in page.text(event)
    assert page.find(f'{event} a[data-kind="requeued"]').text == f"#{requeued}"
    page.shoot("failovers")
    page.click(f'{event} a[data-kind="dead"]')
    wait_until(lambda: page.at(f"/dashboard/jobs/{buried}"), what="the buried job's page")
    assert page.text("#job-state") == "dead"
    page.click('nav a[href="/dashboard/failovers"]')
    wait_until(lambda: page.at("/dashboard/failovers"), what="every failover")

    # Bulk retry from the queue's row: the dry run's count first, nothing moved yet...
    page.open("/dashboard")
    wait_until(live, what="live numbers drawn")
    page.click('#queues tr[data-queue="mail"] a.retry-dead')
    wait_until(lambda: page.at("/dashboard/retry-dead?queue=mail"), what="confirmation")
    assert "3 dead job(s) match" in page.text("#retry-dead-count")
    page.shoot("retry-dead")
    assert {app.client.get(i).state for i in dead} == {JobState.DEAD}
    # ...then the confirmed retry queues every one of them again.
    page.click("#retry-dead-run")
    wait_until(lambda: page.find("#retry-dead-result").is_displayed(), what="result shown")
    assert page.text("#retry-dead-result").startswith("3 dead job(s) queued again.")
    assert {app.client.get(i).state for i in dead} == {JobState.QUEUED}
    page.click("#retry-dead-result a")
    wait_until(lambda: "state=queued" in page.driver.current_url, what="queued jobs listed")
    assert all(page.has(f'#jobs tr[data-job-id="{i}"]') for i in dead)
