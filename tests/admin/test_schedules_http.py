"""``/admin/schedules`` over a real ledger: the same operations as ``ledgerq schedule``. A
schedule paused over HTTP does not fire while an active one does, runs record their job and
instance, and every mistake is a 4xx naming the problem."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ledgerq import JobContext
from ledgerq.app import wiring
from tests.admin.conftest import ADMIN, READ, Served

EVERY_SECOND = "* * * * * *"


def add(served: Served, name: str, **fields: Any) -> Any:
    body = {"name": name, "task": "admin.add", "cron": EVERY_SECOND, "args": [1, 2], **fields}
    return served.client.post("/admin/schedules", json=body, headers=ADMIN)


def listed(served: Served) -> dict[str, dict[str, Any]]:
    response = served.client.get("/admin/schedules", headers=READ)
    assert response.status_code == 200, response.text
    return {s["name"]: s for s in response.json()["schedules"]}


def test_pause_over_http_stops_firing_and_runs_are_recorded(served: Served) -> None:
    created = add(served, "tick-on", kwargs={"api_token": "s3cret"}, tz="Europe/Berlin")
    assert created.status_code == 201, created.text
    assert created.json() | {"next_tick": None} == {
        "name": "tick-on",
        "cron": EVERY_SECOND,
        "tz": "Europe/Berlin",
        "task": "admin.add",
        "args": [1, 2],
        "kwargs": {"api_token": "***"},
        "queue": None,
        "paused": False,
        "missed": "skip",
        "max_catchup": 10,
        "overlap": "allow",
        "source": "runtime",
        "last_tick": None,
        "next_tick": None,
        "last_run": None,
    }
    assert add(served, "tick-off", overlap="skip", missed="once").status_code == 201
    paused = served.client.post("/admin/schedules/tick-off/pause", headers=ADMIN)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    schedules = listed(served)
    assert (schedules["tick-on"]["paused"], schedules["tick-off"]["paused"]) == (False, True)
    assert (schedules["tick-off"]["overlap"], schedules["tick-off"]["missed"]) == ("skip", "once")

    # Both schedules owe the ticks of the last three seconds; one scheduler pass fires them.
    store = wiring.schedule_store(served.app.parts)
    behind = store.database_now() - timedelta(seconds=3)
    for name in ("tick-on", "tick-off"):
        store.advance(name, last_tick=behind, next_tick=None)
    report = served.app.scheduler(instance_id="sched-under-test").run_once()
    assert report.fired.get("tick-on", 0) >= 2 and "tick-off" not in report.fired

    runs = served.client.get("/admin/schedules/tick-on/runs", headers=READ).json()
    assert runs["name"] == "tick-on" and len(runs["runs"]) == report.fired["tick-on"]
    ticks = [run["tick"] for run in runs["runs"]]
    assert ticks == sorted(ticks, reverse=True)  # newest first
    for run in runs["runs"]:
        assert run["executed_by"] == "sched-under-test"
        job = served.client.get(f"/api/v1/jobs/{run['job_id']}", headers=READ).json()
        assert (job["task"], job["args"]) == ("admin.add", [1, 2])
    limited = served.client.get("/admin/schedules/tick-on/runs?limit=1", headers=READ).json()
    assert limited["runs"] == runs["runs"][:1]
    off_runs = served.client.get("/admin/schedules/tick-off/runs", headers=READ)
    assert off_runs.status_code == 200 and off_runs.json()["runs"] == []

    schedules = listed(served)
    assert schedules["tick-on"]["last_run"] == runs["runs"][0]
    assert schedules["tick-on"]["next_tick"] is not None
    assert schedules["tick-off"]["last_run"] is None

    resumed = served.client.post("/admin/schedules/tick-off/resume", headers=ADMIN)
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert listed(served)["tick-off"]["paused"] is False


def test_remove_keeps_history_and_unknown_names_are_404(served: Served) -> None:
    assert add(served, "doomed").status_code == 201
    store = wiring.schedule_store(served.app.parts)
    store.advance("doomed", last_tick=store.database_now() - timedelta(seconds=2), next_tick=None)
    assert served.app.scheduler(instance_id="s1").run_once().fired.get("doomed", 0) >= 1

    assert served.client.delete("/admin/schedules/doomed", headers=ADMIN).status_code == 204
    assert "doomed" not in listed(served)
    history = served.client.get("/admin/schedules/doomed/runs", headers=READ)
    assert history.status_code == 200 and history.json()["runs"]  # the runs stay
    for method, path in [
        ("delete", "/admin/schedules/doomed"),
        ("post", "/admin/schedules/doomed/pause"),
        ("post", "/admin/schedules/ghost/resume"),
        ("get", "/admin/schedules/ghost/runs"),
    ]:
        headers = READ if method == "get" else ADMIN
        response = served.client.request(method, path, headers=headers)
        assert response.status_code == 404, (method, path)
        assert response.json()["detail"] in (
            "no schedule named 'doomed'",
            "no schedule named 'ghost'",
        )


def test_a_taken_name_is_409_and_a_code_schedule_cannot_be_removed(served_sqlite: Served) -> None:
    served = served_sqlite
    assert add(served, "twice").status_code == 201
    again = add(served, "twice")
    assert (again.status_code, again.json()) == (409, {"detail": "a schedule named 'twice' exists"})

    @served.app.periodic(cron="0 * * * *", name="hourly")
    def hourly(ctx: JobContext) -> None:
        return None

    served.app.scheduler().declare(list(served.app.schedules.values()))
    refused = served.client.delete("/admin/schedules/hourly", headers=ADMIN)
    assert refused.status_code == 409 and "declared in the application's code" in refused.text
    assert listed(served)["hourly"]["source"] == "code"
    assert served.client.post("/admin/schedules/hourly/pause", headers=ADMIN).status_code == 200


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"cron": "61 * * * *"}, 422, "invalid cron expression '61 * * * *'"),
        ({"cron": "every day"}, 422, "invalid cron expression 'every day': expected 5 fields"),
        ({"cron": "0 0 30 2 *"}, 422, "cron expression '0 0 30 2 *' never fires"),
        ({"tz": "Europe/Atlantis"}, 422, "unknown time zone 'Europe/Atlantis'"),
        ({"missed": "sometimes"}, 422, "Input should be 'skip', 'once' or 'all'"),
        ({"overlap": "never"}, 422, "Input should be 'skip' or 'allow'"),
        ({"max_catchup": 0}, 422, "greater than or equal to 1"),
        ({"queue": "no spaces"}, 422, "String should match pattern"),
        ({"name": "has space"}, 422, "String should match pattern"),
        ({"args": "1, 2"}, 422, "Input should be a valid list"),
        ({"colour": "red"}, 422, "Extra inputs are not permitted"),
        ({"task": "nope.task"}, 400, "unknown task 'nope.task'"),
        ({"args": [{"big": "x" * 300_000}]}, 400, "exceeds the cap"),
    ],
)
def test_bad_schedules_are_4xx_naming_the_problem_and_store_nothing(
    served_sqlite: Served, fields: dict[str, Any], status: int, message: str
) -> None:
    (field,) = fields
    response = add(served_sqlite, fields.pop("name", "s"), **fields)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    if status == 422:  # FastAPI's shape, whether pydantic or the cron parser refused it
        (problem,) = detail
        assert problem["loc"] == ["body", field] and message in problem["msg"], detail
    else:
        assert message in detail
    assert listed(served_sqlite) == {}


def test_schedules_need_a_token_and_changes_need_the_admin_one(served_sqlite: Served) -> None:
    client = served_sqlite.client
    assert client.get("/admin/schedules").status_code == 401
    assert client.get("/admin/schedules/x/runs").status_code == 401
    assert add(served_sqlite, "s").status_code == 201
    for path in ("/admin/schedules/s/pause", "/admin/schedules/s/resume"):
        assert client.post(path).status_code == 401
        assert client.post(path, headers=READ).status_code == 403
    body = {"name": "t", "task": "admin.add", "cron": EVERY_SECOND}
    assert client.post("/admin/schedules", json=body).status_code == 401
    assert client.post("/admin/schedules", json=body, headers=READ).status_code == 403
    assert client.delete("/admin/schedules/s", headers=READ).status_code == 403
    assert set(listed(served_sqlite)) == {"s"} and not listed(served_sqlite)["s"]["paused"]


@pytest.mark.parametrize("quoted", [False, True])
def test_a_name_with_slashes_works_in_every_path(served_sqlite: Served, quoted: bool) -> None:
    """Names such as ``billing/nightly`` are valid schedule names, so the paths that carry a
    name take them, whether the client sends the slashes as they are or as ``%2F``."""
    served = served_sqlite
    name = "billing/nightly/runs"  # ends like the runs path: the name still comes out whole
    in_path = name.replace("/", "%2F") if quoted else name
    assert add(served, name).status_code == 201

    paused = served.client.post(f"/admin/schedules/{in_path}/pause", headers=ADMIN)
    assert paused.status_code == 200, paused.text
    assert (paused.json()["name"], listed(served)[name]["paused"]) == (name, True)
    resumed = served.client.post(f"/admin/schedules/{in_path}/resume", headers=ADMIN)
    assert resumed.status_code == 200 and listed(served)[name]["paused"] is False

    store = wiring.schedule_store(served.app.parts)
    store.advance(name, last_tick=store.database_now() - timedelta(seconds=2), next_tick=None)
    assert served.app.scheduler(instance_id="s1").run_once().fired.get(name, 0) >= 1
    runs = served.client.get(f"/admin/schedules/{in_path}/runs", headers=READ)
    assert runs.status_code == 200, runs.text
    assert runs.json()["name"] == name and runs.json()["runs"]

    assert served.client.delete(f"/admin/schedules/{in_path}", headers=ADMIN).status_code == 204
    assert name not in listed(served)
    gone = served.client.post(f"/admin/schedules/{in_path}/pause", headers=ADMIN)
    assert (gone.status_code, gone.json()["detail"]) == (404, f"no schedule named {name!r}")
