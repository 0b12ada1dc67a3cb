"""Container health check of the ledgerq image (installed as /usr/local/bin/ledgerq-healthcheck).

Healthy (exit 0) when the process the container runs answers its liveness endpoint where that
process listens: read from its command line (/proc/<pid>/cmdline, pid 1 unless given), so the
check follows the command the container was started with:

- ``worker start --health-port P [--health-host H]``: http://H:P/health/live (H defaults to
  127.0.0.1; a wildcard host is probed on loopback);
- ``serve [--port P] [--host H]``: http://H:P/health/live (P defaults to 8000);
- any other command (``db migrate``, one-shot commands): healthy while it runs.

Unhealthy (exit 1, the reason on stderr) when the endpoint does not answer 200 within 2 s, or
a worker has no --health-port (nothing to ask).

    ledgerq-healthcheck [PID]
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

WILDCARDS = ("0.0.0.0", "::", "")


def option(words: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` in ``words`` (the last one wins)."""
    found = None
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(name + "="):
            found = word.split("=", 1)[1]
    return found


def health_url(words: list[str]) -> str | None:
    """Where the command ``words`` answers liveness; None if it serves no endpoint."""
    if "serve" in words:
        host, port = option(words, "--host") or "127.0.0.1", option(words, "--port") or "8000"
    elif "worker" in words and "start" in words:
        port = option(words, "--health-port") or ""
        host = option(words, "--health-host") or "127.0.0.1"
        if not port or port == "0":
            raise SystemExit("unhealthy: the worker has no --health-port to ask")
    else:
        return None
    host = "127.0.0.1" if host in WILDCARDS else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/health/live"


def main(argv: list[str]) -> int:
    """Check the process ``argv[1]`` (default 1); 0 healthy, 1 not."""
    pid = argv[1] if len(argv) > 1 else "1"
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError as exc:
        print(f"unhealthy: cannot read the command of process {pid}: {exc}", file=sys.stderr)
        return 1
    url = health_url(words)
    if url is None:
        return 0
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return 0
            print(f"unhealthy: {url} answered {response.status}", file=sys.stderr)
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
