"""nginx with the shipped site in front of a real ``ledgerq serve``: health is public, the API
still needs ledgerq's token (bearer, or the dashboard's session cookie, marked Secure behind
TLS, plus its CSRF token for changes), an over-limit body is refused by nginx (413), and plain
HTTP is sent to HTTPS.

nginx runs as the test's own process (``-p``/``-c``/``-e`` in ``tmp_path``, ``daemon off``);
the shipped site is included as written except for its ports, certificate paths and upstream
port."""

from __future__ import annotations

import getpass
import http.client
import json
import os
import re
import secrets
import ssl
import subprocess
import urllib.parse
from pathlib import Path

from tests.deploy.deploy_files import (
    DEPLOY,
    LEDGERQ,
    Services,
    base_env,
    http_request,
    http_status,
    need_tool,
    substitute,
)
from tests.helpers import wait_until
from tests.redis_server import free_port

LIMIT_BYTES = 1024 * 1024  # the site's client_max_body_size 1m


def site_file(tmp_path: Path, https: int, plain: int, upstream: int) -> Path:
    """The shipped deploy/nginx/ledgerq.conf on this host's ports, with a test certificate."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [need_tool("openssl"), "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
         "/CN=queue.example.com", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    text = (DEPLOY / "nginx" / "ledgerq.conf").read_text()
    text = substitute(text, r"listen 443 ssl", f"listen 127.0.0.1:{https} ssl")
    text = substitute(text, r"listen 80;", f"listen 127.0.0.1:{plain};")
    text = substitute(text, r"ssl_certificate +/etc/ssl/certs/\S+;", f"ssl_certificate {cert};")
    text = substitute(
        text, r"ssl_certificate_key /etc/ssl/private/\S+;", f"ssl_certificate_key {key};"
    )
    text = substitute(text, r"server 127\.0\.0\.1:8000;", f"server 127.0.0.1:{upstream};")
    path = tmp_path / "site.conf"
    path.write_text(text)
    return path


def nginx_conf(tmp_path: Path, site: Path) -> Path:
    """A main configuration of the test's own: pid, logs and temp folders in ``tmp_path``."""
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""
    temp = "".join(
        f"    {kind}_temp_path {tmp_path}/{kind}_temp;\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"{user}worker_processes 1;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
        "events { worker_connections 64; }\n"
        f"http {{\n    access_log {tmp_path}/access.log;\n{temp}    include {site};\n}}\n"
    )
    return conf


def oversized_post(port: int, path: str, token: str) -> tuple[int, bytes]:
    """A POST announcing a body over the limit: nginx answers from the headers alone."""
    context = ssl._create_unverified_context()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Authorization", f"Bearer {token}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(LIMIT_BYTES + 1))
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_nginx_site_proxies_to_serve_with_auth_and_body_limit(
    pg_url: str, app_dir: Path, services: Services, tmp_path: Path
) -> None:
    nginx = need_tool("nginx")
    token = secrets.token_urlsafe(24)
    serve_port, https, plain = free_port(), free_port(), free_port()
    env = base_env(LEDGERQ_APP="tasks:app", LEDGERQ_DATABASE_URL=pg_url, LEDGERQ_API_TOKEN=token)
    serve = services.start(
        [LEDGERQ, "serve", "--host", "127.0.0.1", "--port", str(serve_port)],
        env=env,
        cwd=app_dir,
    )
    conf = nginx_conf(tmp_path, site_file(tmp_path, https, plain, serve_port))
    proxy = services.start(
        [nginx, "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log"),
         "-g", "daemon off;"],
        env=base_env(),
    )  # fmt: skip
    base = f"https://127.0.0.1:{https}"
    wait_until(
        lambda: (
            http_status(f"{base}/health/ready") == 200
            or serve.poll() is not None
            or proxy.poll() is not None
        ),
        timeout=30,
        what="serve healthy through nginx",
    )
    assert proxy.poll() is None, (tmp_path / "error.log").read_text()
    assert serve.poll() is None, services.log(serve)
    assert http_status(f"{base}/health/live") == 200

    # Plain HTTP goes to HTTPS.
    status, headers, _ = http_request(f"http://127.0.0.1:{plain}/dashboard")
    assert status == 301 and headers["location"].startswith("https://"), headers

    # The API behind nginx still wants ledgerq's token.
    jobs = f"{base}/api/v1/jobs"
    assert http_status(jobs) == 401
    assert http_status(jobs, headers={"Authorization": "Bearer wrong"}) == 403
    bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps({"task": "tasks.hello", "args": ["nginx"]}).encode()
    assert http_request(jobs, method="POST", data=body, headers=bearer)[0] == 201

    # The dashboard's session: the cookie is Secure (nginx says https), and a change made with
    # it needs the page's CSRF token.
    form = urllib.parse.urlencode({"token": token}).encode()
    status, headers, _ = http_request(
        f"{base}/dashboard/login",
        method="POST",
        data=form,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 303, status
    set_cookie = headers["set-cookie"]
    assert "; secure" in set_cookie.lower() and "httponly" in set_cookie.lower(), set_cookie
    cookie = {"Cookie": set_cookie.split(";", 1)[0]}
    assert http_status(jobs, headers=cookie) == 200
    json_cookie = {**cookie, "Content-Type": "application/json"}
    assert http_request(jobs, method="POST", data=body, headers=json_cookie)[0] == 403
    page = http_request(f"{base}/dashboard", headers=cookie)[2].decode()
    csrf = re.search(r'name=csrf-token content="([^"]+)"', page)
    assert csrf, page[:500]
    with_csrf = {**json_cookie, "X-CSRF-Token": csrf[1]}
    assert http_request(jobs, method="POST", data=body, headers=with_csrf)[0] == 201

    # Over client_max_body_size: nginx refuses it before ledgerq sees it.
    status, answer = oversized_post(https, "/api/v1/jobs", token)
    assert status == 413 and b"nginx" in answer, (status, answer[:200])
    access_log = tmp_path / "access.log"
    wait_until(lambda: b'"POST /api/v1/jobs HTTP/1.1" 413' in access_log.read_bytes(), what="log")

    services.stop(proxy)
    services.stop(serve)
