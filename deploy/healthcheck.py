"""A container's health check: ``python /app/deploy/healthcheck.py <service>``; exit 0 when healthy.

- ``gateway``: its ``/readyz`` answers 200 (NATS connected, the ledger and the agent answer
  their pings and say they are ready).
- ``openai-standin``: its ``/_standin/health`` answers 200.
- every other service: a ping round trip over the bus, as the container's own identity
  (``NATS_USER``/``NATS_PASSWORD``; the role table lets each role ask its own ping): the service
  answers ``<service>.cmd.ping`` and says it is ready. Each server of ``NATS_URL`` is tried in
  turn, so it works on one server and on the cluster alike.
- an identity that logs in with an nkey or a creds file (signing the server's nonce needs a
  library this check does not load), or a server that requires TLS (not spoken here):
  nats-server's monitoring endpoint (port 8222) must show that identity connected and
  subscribed to its ping, which proves less (a hung process keeps its connection until the
  server's own ping times out).

Standard library and delegate.contracts only, and the NATS protocol spoken directly (a
request is four lines of it): it runs every 10 s in every container, so it starts fast.
"""

import json
import os
import secrets
import socket
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

TIMEOUT_S = 3.0
MONITOR_PORT = "NATS_MONITOR_PORT"  # nats-server's `http` listener: 8222 in deploy/nats.conf (tests pick their own)


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.read() if response.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None


def _monitor_hosts(nats_url: str) -> list[str]:
    """The host of each server of a seed list: nats://nats-1:4222,nats://nats-2:4222 -> nats-1, nats-2."""
    hosts = []
    for seed in nats_url.split(","):
        host = urlsplit(seed.strip()).hostname
        if host and host not in hosts:
            hosts.append(host)
    return hosts


def _serving_ping(service: str) -> bool:
    from delegate.contracts.topics import PINGS

    subject = PINGS[service].subject
    user = os.environ.get("NATS_USER") or service
    port = os.environ.get(MONITOR_PORT) or "8222"
    for host in _monitor_hosts(os.environ.get("NATS_URL", "nats://nats:4222")):
        body = _get(f"http://{host}:{port}/connz?auth=true&subs=1&limit=4096")
        if body is None:
            continue
        for conn in json.loads(body).get("connections") or []:
            if conn.get("authorized_user") == user and subject in (conn.get("subscriptions_list") or []):
                return True
    return False


class _NeedsTls(Exception):
    """The server wants TLS, which this check does not speak: the monitoring endpoint decides."""


def _request(seed: str, user: str, password: str, inbox: str, subject: str) -> bytes | None:
    """One NATS request over a plain socket: the reply's payload, or None."""
    parts = urlsplit(seed.strip())
    host, port = parts.hostname or "127.0.0.1", parts.port or 4222
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S) as sock:
            stream = sock.makefile("rb")
            info = stream.readline()
            if not info.startswith(b"INFO "):
                return None  # not a NATS server
            if json.loads(info[5:]).get("tls_required"):
                raise _NeedsTls(seed)
            connect = {"verbose": False, "pedantic": False, "user": user, "pass": password,
                       "name": "healthcheck", "lang": "python", "version": "1", "protocol": 1}
            reply = f"{inbox}.health.{secrets.token_hex(8)}"
            sock.sendall(
                f"CONNECT {json.dumps(connect)}\r\nSUB {reply} 1\r\nPUB {subject} {reply} 2\r\n{{}}\r\n".encode()
            )
            while line := stream.readline():
                if line.startswith(b"PING"):
                    sock.sendall(b"PONG\r\n")
                elif line.startswith(b"-ERR"):  # bad credentials, or a subject the role may not use
                    return None
                elif line.startswith(b"MSG "):
                    size = int(line.split()[-1])
                    return stream.read(size + 2)[:size]
    except (OSError, ValueError):
        return None
    return None


def _answers_ping(service: str) -> bool:
    from delegate.contracts.roles import inbox_prefix
    from delegate.contracts.topics import PINGS

    user = os.environ.get("NATS_USER") or service
    password = os.environ.get("NATS_PASSWORD", "")
    for seed in os.environ.get("NATS_URL", "nats://nats:4222").split(","):
        login = urlsplit(seed.strip())
        try:
            data = _request(seed, login.username or user, login.password or password, inbox_prefix(user),
                            PINGS[service].subject)
        except _NeedsTls:
            return _serving_ping(service)
        if data is not None:
            try:
                return json.loads(data).get("ready") is True
            except ValueError:
                return False
    return False


def healthy(service: str) -> bool:
    if service == "gateway":
        return _get(f"http://127.0.0.1:{os.environ.get('DELEGATE_PORT', '8081')}/readyz") is not None
    if service == "openai-standin":
        return _get(f"http://127.0.0.1:{os.environ.get('STANDIN_PORT', '8765')}/_standin/health") is not None
    if os.environ.get("NATS_CREDS") or os.environ.get("NATS_NKEY_SEED"):
        return _serving_ping(service)
    return _answers_ping(service)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python deploy/healthcheck.py <service>")
    sys.exit(0 if healthy(sys.argv[1]) else 1)
