"""A container's health check: ``python /app/deploy/healthcheck.py <service>``; exit 0 when healthy.

- ``gateway``: its ``/readyz`` answers 200 (NATS connected, the ledger and the agent answer
  their pings and say they are ready).
- ``openai-standin``: its ``/_standin/health`` answers 200.
- every other service: nats-server says this container's identity (``NATS_USER``) holds an open
  connection subscribed to its ``<service>.cmd.ping`` query, i.e. it logged in with its own
  credentials and got far enough into its start to answer pings (the ledger only after its
  migrations). The monitoring endpoint (port 8222) of every server in ``NATS_URL`` is asked, so
  it works on one server and on the cluster alike.

Why not a ping round trip with the container's own credentials: the role table
(delegate.contracts.roles) lets only the gateway request pings, and only of some services, so a
service's identity may not publish to its own ``<service>.cmd.ping``. Once each role may request
its own ping, ``Bus.ping`` can replace ``_serving_ping`` below.

Standard library and delegate.contracts only: it runs every few seconds, so it starts fast.
"""

import json
import os
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


def healthy(service: str) -> bool:
    if service == "gateway":
        return _get(f"http://127.0.0.1:{os.environ.get('DELEGATE_PORT', '8081')}/readyz") is not None
    if service == "openai-standin":
        return _get(f"http://127.0.0.1:{os.environ.get('STANDIN_PORT', '8765')}/_standin/health") is not None
    return _serving_ping(service)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python deploy/healthcheck.py <service>")
    sys.exit(0 if healthy(sys.argv[1]) else 1)
