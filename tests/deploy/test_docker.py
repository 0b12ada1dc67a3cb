"""The image's HEALTHCHECK follows the command the container runs, and the compose services
run as written (no docker needed): the Dockerfile and compose.yaml are parsed, their commands
run as the image would run them (ENTRYPOINT + command, the image's ENV, the compose
environment), and the HEALTHCHECK command is run against them."""

from __future__ import annotations

import importlib.util
import json
import re
import secrets
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.deploy_files import (
    DEPLOY,
    LEDGERQ,
    Services,
    base_env,
    http_request,
)
from tests.helpers import wait_until
from tests.redis_server import RedisServer, free_port

DOCKER = DEPLOY / "docker"


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's final stage as (INSTRUCTION, arguments), continued lines joined."""
    joined = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), rest.strip()))
    return stages[-1]


def instruction(name: str) -> str:
    """The arguments of the final stage's one ``name`` instruction."""
    (value,) = [rest for inst, rest in dockerfile() if inst == name]
    return value


def image_env() -> dict[str, str]:
    """The final stage's ENV."""
    env: dict[str, str] = {}
    for inst, rest in dockerfile():
        if inst == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(rest))  # type: ignore[misc]
    return env


def healthcheck_argv() -> list[str]:
    """The HEALTHCHECK command, with the image's paths mapped to this checkout: ``python`` is
    this interpreter, a file COPY'd into the image is its source here."""
    options, _, command = instruction("HEALTHCHECK").partition("CMD ")
    assert "--timeout=" in options
    argv = json.loads(command)
    copied = {}
    for inst, rest in dockerfile():
        if inst == "COPY" and not rest.startswith("--from"):
            source, target = rest.split()
            copied[target] = str(DEPLOY.parent / source)
    assert argv[0] == "python", argv
    return [sys.executable, *(copied.get(word, word) for word in argv[1:])]


def healthy(pid: int) -> bool:
    """Whether the HEALTHCHECK command exits 0 for the process ``pid`` (the container's pid 1
    in the image; the check reads that process's command line)."""
    result = subprocess.run(
        [*healthcheck_argv(), str(pid)], capture_output=True, timeout=10, check=False
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def image_command(command: list[str], ports: dict[str, int]) -> list[str]:
    """ENTRYPOINT + ``command`` as this checkout runs it, with fixed ports made free ones."""
    entrypoint = json.loads(instruction("ENTRYPOINT"))
    assert entrypoint == ["ledgerq"]
    return [LEDGERQ, *(str(ports.get(word, word)) for word in command)]


def test_healthcheck_follows_the_image_command(
    pg_url: str, app_dir: Path, services: Services
) -> None:
    """The image's CMD (a worker) turns healthy by the HEALTHCHECK, and unhealthy once gone."""
    command = json.loads(instruction("CMD"))
    port = free_port()
    argv = image_command(command, {"9100": port})
    assert str(port) in argv
    env = base_env(**image_env(), LEDGERQ_APP="tasks:app", LEDGERQ_DATABASE_URL=pg_url)
    proc = services.start(argv, env={**env, "PYTHONPATH": str(app_dir)})
    wait_until(
        lambda: healthy(proc.pid) or proc.poll() is not None,
        timeout=30,
        interval=0.2,  # each check starts a Python process
        what="healthy",
    )
    assert proc.poll() is None, services.log(proc)
    assert services.stop(proc) == 0
    assert not healthy(proc.pid)


def compose_expand(value: str, env: dict[str, str]) -> str:
    """Compose's variable forms: ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``."""

    def one(match: re.Match[str]) -> str:
        name, form, arg = match[1], match[2], match[3]
        if form == ":?" and not env.get(name):
            raise AssertionError(f"compose would refuse to start: {arg}")
        return env.get(name) or (arg if form == ":-" else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-?])([^}]*))?\}", one, value)


def test_compose_services_run_with_redis_password(
    pg_url: str, app_dir: Path, services: Services, tmp_path: Path
) -> None:
    """Redis as compose runs it demands the password; the worker and serve, with compose's
    environment (whose Redis URL carries the password), turn healthy by the image's
    HEALTHCHECK, and a job sent through serve is run by the worker over Redis."""
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    variables = {
        "REDIS_PASSWORD": secrets.token_urlsafe(16),
        "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
        "LEDGERQ_API_TOKEN": secrets.token_urlsafe(24),
    }
    redis_command = [compose_expand(w, variables) for w in compose["services"]["redis"]["command"]]
    assert redis_command[0] == "redis-server"
    (tmp_path / "redis").mkdir()
    server = RedisServer(
        tmp_path / "redis", *redis_command[1:], password=variables["REDIS_PASSWORD"]
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as anonymous:
            anonymous.sendall(b"PING\r\n")
            assert anonymous.recv(100).startswith(b"-NOAUTH"), "Redis answers without password"

        procs = {}
        ports = {"8000": free_port(), "9100": free_port()}
        for name in ("worker", "serve"):
            service = compose["services"][name]
            env = {k: compose_expand(str(v), variables) for k, v in service["environment"].items()}
            assert env["LEDGERQ_REDIS_URL"].startswith(
                f"redis://:{variables['REDIS_PASSWORD']}@redis:6379/"
            )
            env["LEDGERQ_REDIS_URL"] = env["LEDGERQ_REDIS_URL"].replace(
                "@redis:6379/", f"@127.0.0.1:{server.port}/"
            )
            env["LEDGERQ_DATABASE_URL"] = pg_url  # the test's database in place of `postgres`
            env["PYTHONPATH"] = str(app_dir)  # the ./app mount
            command = [compose_expand(w, variables) for w in service["command"]]
            procs[name] = services.start(
                image_command(command, ports), env=base_env(**{**image_env(), **env})
            )
        for proc in procs.values():
            wait_until(
                lambda p=proc: healthy(p.pid) or p.poll() is not None,
                timeout=30,
                interval=0.2,
                what="healthy",
            )
            assert proc.poll() is None, services.log(proc)

        # compose's own check of serve (readiness) passes as well.
        check = compose["services"]["serve"]["healthcheck"]["test"]
        assert check[:2] == ["CMD", "python"] and "127.0.0.1:8000/" in check[-1], check
        code = [*check[2:-1], check[-1].replace(":8000/", f":{ports['8000']}/")]
        assert subprocess.run([sys.executable, *code], timeout=10, check=False).returncode == 0

        base = f"http://127.0.0.1:{ports['8000']}"
        auth = {"Authorization": f"Bearer {variables['LEDGERQ_API_TOKEN']}"}
        body = json.dumps({"task": "tasks.hello", "args": ["you"]}).encode()
        status, _, answer = http_request(
            f"{base}/api/v1/jobs",
            method="POST",
            data=body,
            headers={**auth, "Content-Type": "application/json"},
        )
        assert status == 201, answer
        job_url = f"{base}/api/v1/jobs/{json.loads(answer)['id']}"

        def state() -> str:
            return str(json.loads(http_request(job_url, headers=auth)[2])["state"])

        wait_until(lambda: state() == "succeeded", timeout=30, what="job run")
        with server.client() as client:  # the processes reached Redis with the password
            assert len(client.client_list()) > 1, "no ledgerq process is connected to Redis"
        for proc in procs.values():
            services.stop(proc)
    finally:
        server.stop()


def test_healthcheck_reads_each_documented_command() -> None:
    """Where the check asks, for the commands the Dockerfile and compose.yaml document."""
    spec = importlib.util.spec_from_file_location("healthcheck", DOCKER / "healthcheck.py")
    assert spec and spec.loader
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    python = ["/usr/local/bin/python", "/usr/local/bin/ledgerq"]
    url = check.health_url
    assert url([*python, "serve", "--host", "0.0.0.0"]) == "http://127.0.0.1:8000/health/live"
    assert url([*python, "serve", "--port=9000"]) == "http://127.0.0.1:9000/health/live"
    worker = [*python, "worker", "start", "--health-port", "9100", "--health-host", "0.0.0.0"]
    assert url(worker) == "http://127.0.0.1:9100/health/live"
    assert url([*python, "db", "migrate"]) is None  # one-shot: healthy while it runs
    with pytest.raises(SystemExit, match="no --health-port"):
        url([*python, "worker", "start"])
    assert check.main(["ledgerq-healthcheck", "999999999"]) == 1  # no such process


def test_compose_publishes_ports_on_host_loopback_only() -> None:
    """Every published port (the health and API ports included) binds 127.0.0.1 of the host;
    the workers publish none (their health port stays inside the container)."""
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    published = [(name, p) for name, s in services.items() for p in s.get("ports", [])]
    assert published, "serve publishes its port"
    for name, port in published:
        assert str(port).startswith("127.0.0.1:"), (name, port)
    assert "ports" not in services["worker"]
