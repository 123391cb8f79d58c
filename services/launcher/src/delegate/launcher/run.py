"""``make run``: the whole system on one machine, supervised, stopped by Ctrl-C.

Starts a private nats-server (unless NATS_URL names one) that authenticates each service as
its own role, the offline OpenAI stand-in (unless OPENAI_API_KEY is set), then every
service; a service that dies is restarted with backoff. Nothing here is needed when compose
runs it.
"""

import logging
import os
import signal
import sys
import time
from pathlib import Path

from delegate.runtime.logs import configure_logging

from . import identities
from .natsconf import password_variable, role_users
from .procs import ManagedProcess, NatsServer, free_port, python_module, wait_for_port

log = logging.getLogger("launch")

SERVICES = (
    ("ledger", "delegate.ledger"),
    ("agent", "delegate.agent"),
    ("inner-plane", "delegate.inner_plane"),
    ("voice", "delegate.voice"),
    ("pollers", "delegate.pollers"),
    ("gateway", "delegate.gateway"),
)


class Supervisor:
    def __init__(self, procs: list[ManagedProcess]) -> None:
        self.procs = procs
        self.restarts: dict[str, list[float]] = {p.name: [] for p in procs}

    def tick(self) -> None:
        for proc in self.procs:
            if proc.alive():
                continue
            recent = [t for t in self.restarts[proc.name] if time.monotonic() - t < 60]
            delay = min(2 ** len(recent) * 0.5, 30)
            if recent and time.monotonic() - recent[-1] < delay:
                continue
            code = proc.proc.returncode if proc.proc else None
            log.warning("%s exited (%s); restarting (see %s)", proc.name, code, proc.log_path)
            self.restarts[proc.name] = [*recent, time.monotonic()]
            proc.start()

    def stop(self) -> None:
        # Reverse order: the gateway stops taking input before the ledger stops writing.
        for proc in reversed(self.procs):
            if proc.alive() and proc.proc:
                proc.proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            proc.stop(timeout=15)


def _without_identities(env: dict[str, str]) -> dict[str, str]:
    """The environment minus every NATS identity: each child gets back only its own."""
    return {k: v for k, v in env.items() if not k.startswith("NATS_PASSWORD_")}


def service_env(role: str, base: dict[str, str], passwords: dict[str, str] | None) -> dict[str, str]:
    """One service's environment: the shared settings and its own NATS identity only."""
    env = _without_identities(base)
    if passwords is not None:  # our private server: the generated identity
        env.update(identities.child_env(role, passwords))
    elif password_variable(role) in base:  # an external server, one variable per service
        env.update(identities.child_env(role, {role: base[password_variable(role)]}))
    return env


def main() -> None:
    configure_logging("launch", os.environ.get("LOG_LEVEL", "INFO"))
    runtime = Path(os.environ.get("RUNTIME_DATA_DIR", "./runtime-data")).resolve()
    logs = runtime / "logs"
    env = dict(os.environ, RUNTIME_DATA_DIR=str(runtime), PYTHONUNBUFFERED="1")
    extra: list[ManagedProcess] = []
    nats: NatsServer | None = None
    passwords: dict[str, str] | None = None

    if not env.get("NATS_URL"):
        passwords = identities.load_or_create(runtime / "nats-auth")
        nats = NatsServer(runtime / "nats", users=role_users(passwords)).start()
        env["NATS_URL"] = nats.address
        log.info("private nats-server with JetStream at %s; one identity per service", nats.address)

    if not env.get("OPENAI_API_KEY"):
        standin_port = free_port()
        standin_env = _without_identities(dict(env, STANDIN_PORT=str(standin_port), STANDIN_DEMO="on"))
        standin = python_module("openai-standin", "delegate.openai_standin", standin_env, logs / "openai-standin.log")
        standin.start()
        assert standin.proc is not None
        wait_for_port(standin_port, 20, standin.proc)
        env.update(
            OPENAI_API_KEY="offline-standin",
            OPENAI_BASE_URL=f"http://127.0.0.1:{standin_port}/v1",
            DELEGATE_OFFLINE_MODEL="1",
        )
        extra.append(standin)
        log.info("no OPENAI_API_KEY: the offline stand-in answers (127.0.0.1:%d)", standin_port)

    # The token is shown on this terminal (below), never in the gateway's log file.
    env["GATEWAY_ANNOUNCE_TOKEN"] = "0"
    procs = [
        python_module(name, module, service_env(name, env, passwords), logs / f"{name}.log").start()
        for name, module in SERVICES
    ]
    supervisor = Supervisor([*extra, *procs])
    port = env.get("DELEGATE_PORT", "8081")
    log.info("Delegate is starting on http://localhost:%s (logs in %s); Ctrl-C stops it", port, logs)

    # The gateway generates the owner token on first start; the person who typed `make run`
    # is looking at this terminal, so show it here, once, when it was just generated.
    token_file = runtime / "delegate-token"
    announce_token = not env.get("DELEGATE_TOKEN") and not token_file.exists()
    if not env.get("DELEGATE_TOKEN") and token_file.exists():
        log.info("sign in with the owner token stored in %s", token_file)
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stopping:
            supervisor.tick()
            if announce_token and token_file.exists():
                announce_token = False
                token = token_file.read_text().strip()
                log.warning("owner token (shown once; sign in with it at http://localhost:%s): %s", port, token)
            time.sleep(0.5)
    finally:
        log.info("stopping")
        supervisor.stop()
        if nats:
            nats.stop()
    sys.exit(0)
