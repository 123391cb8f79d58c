"""``make run``: the whole system on one machine, supervised, stopped by Ctrl-C.

Starts a private nats-server (unless NATS_URL names one) that authenticates each service as
its own role, the offline OpenAI stand-in (unless OPENAI_API_KEY is set), then every
service; a service that dies is restarted with backoff. Nothing here is needed when compose
runs it.

Settings come from the one settings source (`delegate.runtime.settings_source`): the
environment first, then `.env` in the working directory, an empty value meaning unset; the
children get that merged environment, so the launcher and every service read the same values.

Every child runs in its own session (process group): Ctrl-C on the terminal reaches only the
launcher, which stops the services in order (the gateway first, the ledger last) and NATS
after them, so every service can still record its last events on the bus.
"""

import logging
import os
import select
import signal
import sys
import time
from pathlib import Path

from delegate.runtime.logs import configure_logging
from delegate.runtime.settings_source import endpoint_from_environment, merged_environment

from . import identities, private_server
from .natsconf import password_variable
from .procs import ManagedProcess, NatsServer, free_port, python_module, wait_for_port

log = logging.getLogger("launch")

# How `stop` takes the system down: the services all at once (the gateway stops taking input,
# the agent records its term's end; input taken meanwhile waits in its durable stream), then
# the ledger, which commits what they sent, then the stand-in (a service may still be finishing
# a model call). NATS is stopped after all of these, by `main`. Stopping the gateway in a stage
# of its own before the others spent its graceful shutdown (up to 5 s with a browser's sockets
# open) out of the 5 s that the whole stop may take.
STOP_STAGES: tuple[tuple[str, ...], ...] = (
    ("gateway", "agent", "inner-plane", "memory", "tasks", "voice", "pollers"),
    ("ledger",),
    ("openai-standin",),
)

SUPERVISE_EVERY_S = 0.5  # how often the launcher looks at its children (and shows the token)
# How long the staged stop may take in all before what still runs is SIGKILLed: the services'
# own STOP_GRACE_S (each also ends itself then: `delegate.runtime.service`), and NATS's share
# after it. Together they keep the whole stop within 5 s.
STOP_BUDGET_S = 3.5
NATS_STOP_S = 0.5

# DELEGATE_PROCESSES: "host" (the default) runs every service in one process
# (`python -m delegate.host`); "split" runs each in a process of its own.
PROCESS_MODES = ("host", "split")

SERVICES = (
    ("ledger", "delegate.ledger"),
    ("agent", "delegate.agent"),
    ("inner-plane", "delegate.inner_plane"),
    ("memory", "delegate.memory"),
    ("tasks", "delegate.tasks"),
    ("voice", "delegate.voice"),
    ("pollers", "delegate.pollers"),
    ("gateway", "delegate.gateway"),
)


class Supervisor:
    def __init__(self, procs: list[ManagedProcess]) -> None:
        self.procs = procs
        self.restarts: dict[str, list[float]] = {p.name: [] for p in procs}
        # A service that exited with EX_CONFIG (`delegate.runtime.settings_check`): its settings
        # are wrong, so another start cannot help; the system stops and says why.
        self.refused: ManagedProcess | None = None

    def tick(self) -> None:
        for proc in self.procs:
            if proc.alive():
                continue
            if proc.proc is not None and proc.proc.returncode == os.EX_CONFIG:
                self.refused = self.refused or proc
                continue
            recent = [t for t in self.restarts[proc.name] if time.monotonic() - t < 60]
            delay = min(2 ** len(recent) * 0.5, 30)
            if recent and time.monotonic() - recent[-1] < delay:
                continue
            code = proc.proc.returncode if proc.proc else None
            log.warning("%s exited (%s); restarting (see %s)", proc.name, code, proc.log_path)
            self.restarts[proc.name] = [*recent, time.monotonic()]
            proc.start()

    def stop(self, hurry: "StopRequests", budget_s: float = STOP_BUDGET_S) -> None:
        """SIGTERM stage by stage (`STOP_STAGES`), each stage's processes together, each stage
        waited for before the next; a process no stage names stops with the first stage.

        The whole stop fits in ``budget_s``: what still runs then is SIGKILLed (a crash every
        service survives). Another signal while stopping (a second Ctrl-C) ends the wait too."""
        named = {name for stage in STOP_STAGES for name in stage}
        stages = [[p for p in self.procs if p.name in stage] for stage in STOP_STAGES]
        stages[0].extend(p for p in self.procs if p.name not in named)
        deadline = time.monotonic() + budget_s
        for stage in stages:
            for proc in stage:
                if proc.alive() and proc.proc:
                    proc.proc.send_signal(signal.SIGTERM)
            # Children are looked at every 50 ms; a signal in between ends the wait at once.
            while any(p.alive() for p in stage) and time.monotonic() < deadline:
                if hurry.wait(0.05):
                    deadline = time.monotonic()
        for proc in self.procs:
            if proc.alive():
                log.warning("%s did not stop in time; killing it", proc.name)
                proc.kill()


class StopRequests:
    """SIGINT and SIGTERM as a count and a wakeup pipe, with no lock anywhere. (Not ``Signals``:
    a signal is the inner plane's, in the glossary.)

    A Python signal handler runs between two bytecodes of the main thread, possibly inside
    another handler: one that set a `threading.Event` could deadlock on the Event's own lock
    when a second signal came while the first was being handled (`kill -TERM -<pgid>` of
    `make run` delivers two: make forwards its own). Here the handler only counts, and the
    interpreter's C-level handler writes the wakeup byte (`signal.set_wakeup_fd`) that ends the
    supervision wait.
    """

    def __init__(self) -> None:
        self.received = 0  # only ever incremented, by the handler
        self._taken = 0  # how many of them `wait` has reported
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.received += 1

    def stand_down(self) -> None:
        """Once everything is stopped: ignore SIGINT and SIGTERM from now on.

        A signal that comes late (make's forwarded SIGTERM, or a Ctrl-C, sent a moment after the
        one that stopped us) has nothing left to stop; but the interpreter's exit puts back the
        default action of every signal Python handles, so one landing then killed the launcher
        and made its exit code the signal's (-2, -15) instead of the stop's 0. An ignored signal
        stays ignored through that exit."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)

    def wait(self, timeout: float) -> int:
        """Up to ``timeout`` seconds, or until a signal came: how many came since the last call."""
        if self.received == self._taken:
            select.select([self._read], [], [], timeout)
            try:
                while os.read(self._read, 512):
                    pass
            except BlockingIOError:
                pass
        # The handler runs just after its wakeup byte is written, so a select that woke may
        # find the count not yet raised: that signal is reported by the next call.
        received = self.received
        new, self._taken = received - self._taken, received
        return new


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


def host_env(roles: list[str], base: dict[str, str], passwords: dict[str, str] | None) -> dict[str, str]:
    """The host process's environment: the shared settings and the identity of every service it
    runs, one password variable each (NATS_PASSWORD_AGENT, ...), never one NATS_USER for all."""
    env = {k: v for k, v in _without_identities(base).items() if k not in ("NATS_USER", "NATS_PASSWORD")}
    for role in roles:
        if passwords is not None:
            env[password_variable(role)] = passwords[role]
        elif password_variable(role) in base:
            env[password_variable(role)] = base[password_variable(role)]
    return env


def stop_budget(env: dict[str, str]) -> float:
    """The staged stop's budget: STOP_GRACE_S when set (the services' own bound), else 3.5 s."""
    try:
        return float(env.get("STOP_GRACE_S") or STOP_BUDGET_S)
    except ValueError:
        return STOP_BUDGET_S  # the services refuse it themselves (EX_CONFIG), and say why


def process_mode(env: dict[str, str]) -> str:
    mode = env.get("DELEGATE_PROCESSES", "host").strip().lower() or "host"
    if mode not in PROCESS_MODES:
        raise SystemExit(f"DELEGATE_PROCESSES={mode}: choose one of {', '.join(PROCESS_MODES)}")
    return mode


def service_processes(
    env: dict[str, str], passwords: dict[str, str] | None, logs: Path, extras: tuple[str, ...] = ()
) -> list[ManagedProcess]:
    """Every service: in one host process (DELEGATE_PROCESSES=host, the default) or one each (split).

    The host is supervised as any child: restarted when it dies, SIGTERMed on stop, and it dies
    with the launcher. The ledger's writer stays a process of its own under either (the ledger
    starts it). ``extras``: what else the host runs (the offline stand-in)."""
    if process_mode(env) == "split":
        return [
            python_module(name, module, service_env(name, env, passwords), logs / f"{name}.log", with_parent=True)
            for name, module in SERVICES
        ]
    names = [name for name, _ in SERVICES]
    return [python_module("host", "delegate.host", host_env(names, env, passwords), logs / "host.log",
                          with_parent=True, args=("--services", ",".join([*names, *extras])))]


def launch_environment(environ: dict[str, str] | None = None, env_file: str | Path | None = ".env") -> dict[str, str]:
    """What the launcher and its children read: the environment first, then `.env`."""
    env = merged_environment(environ, env_file)
    runtime = Path(env.get("RUNTIME_DATA_DIR", "./runtime-data")).resolve()
    env.update(RUNTIME_DATA_DIR=str(runtime), PYTHONUNBUFFERED="1")
    return env


def main() -> None:
    stop_requests = StopRequests()  # before any child starts: a Ctrl-C during start-up stops what started
    env = launch_environment()
    configure_logging("launch", env.get("LOG_LEVEL", "INFO"))
    runtime = Path(env["RUNTIME_DATA_DIR"])
    logs = runtime / "logs"
    extra: list[ManagedProcess] = []
    nats: NatsServer | None = None
    passwords: dict[str, str] | None = None

    if not env.get("NATS_URL"):
        auth = private_server.prepare_in_child(runtime / "nats-auth")
        passwords = auth.passwords
        # Not waited for here: the services start beside it (their imports take far longer than
        # its start, and their connect retries until it listens); `main` waits for it below.
        nats = NatsServer(runtime / "nats", authorization=auth.authorization, with_parent=True).start(wait=False)
        env["NATS_URL"] = nats.address
        log.info("private nats-server with JetStream at %s; one identity per service", nats.address)

    endpoint = endpoint_from_environment(env)
    hosted_extras: tuple[str, ...] = ()
    if endpoint.offline and endpoint.base_url is None and process_mode(env) == "host":
        # No key: the stand-in answers, from inside the host (one Python process less, ~45 MB).
        # The services make their first model call only after input, when it listens.
        standin_port = free_port()
        env.update(STANDIN_PORT=str(standin_port), STANDIN_DEMO="on")
        env["OPENAI_STANDIN_URL"] = f"http://127.0.0.1:{standin_port}/v1"
        hosted_extras = ("openai-standin",)
        log.info("no OPENAI_API_KEY: the offline stand-in answers (127.0.0.1:%d); set it in .env for OpenAI",
                 standin_port)
    elif endpoint.offline and endpoint.base_url is None:
        # No key: the stand-in answers. Its address goes to the services as OPENAI_STANDIN_URL;
        # each derives the key, base URL and the Offline badge from that (settings_source).
        standin_port = free_port()
        standin_env = _without_identities(dict(env, STANDIN_PORT=str(standin_port), STANDIN_DEMO="on"))
        standin_env.pop("OPENAI_API_KEY", None)
        standin = python_module(
            "openai-standin", "delegate.openai_standin", standin_env, logs / "openai-standin.log", with_parent=True
        )
        standin.start()  # waited for once the services are starting too (below)
        env["OPENAI_STANDIN_URL"] = f"http://127.0.0.1:{standin_port}/v1"
        extra.append(standin)
        log.info("no OPENAI_API_KEY: the offline stand-in answers (127.0.0.1:%d); set it in .env for OpenAI",
                 standin_port)
    elif endpoint.offline:
        log.info("no OPENAI_API_KEY: the model at OPENAI_BASE_URL %s answers, shown as offline", endpoint.base_url)
    else:
        log.info("OpenAI answers (model %s%s)", env.get("OPENAI_MODEL", "gpt-5.5"),
                 f", at {endpoint.base_url}" if endpoint.base_url else "")

    # The token is shown on this terminal (below), never in the gateway's log file.
    env["GATEWAY_ANNOUNCE_TOKEN"] = "0"
    procs = [proc.start() for proc in service_processes(env, passwords, logs, hosted_extras)]
    supervisor = Supervisor([*extra, *procs])
    port = env.get("DELEGATE_PORT", "8081")
    log.info("Delegate is starting on http://localhost:%s (logs in %s); Ctrl-C stops it", port, logs)

    # The gateway generates the owner token on first start; the person who typed `make run`
    # is looking at this terminal, so show it here, once, when it was just generated.
    token_file = runtime / "delegate-token"
    announce_token = not env.get("DELEGATE_TOKEN") and not token_file.exists()
    if env.get("DELEGATE_TOKEN"):
        log.info("sign in with the owner token set as DELEGATE_TOKEN")
    elif token_file.exists():
        log.info("sign in with the owner token stored in %s (`make token` prints it, `make token-rotate` "
                 "replaces it)", token_file)
    exit_code = 0
    try:
        # Started together, waited for together: a child that cannot listen fails the start.
        if nats:
            nats.wait_listening()
        for proc in extra:
            assert proc.proc is not None
            wait_for_port(int(proc.env["STANDIN_PORT"]), 20, proc.proc)
        while True:
            supervisor.tick()
            if announce_token and token_file.exists():
                announce_token = False
                token = token_file.read_text().strip()
                log.warning("owner token (shown once; sign in with it at http://localhost:%s): %s", port, token)
            # The wait is also the supervision period (children are looked at twice a second);
            # Ctrl-C or SIGTERM ends it at once.
            if supervisor.refused is not None:
                log.error("%s (see %s)", refusal(supervisor.refused), supervisor.refused.log_path)
                exit_code = os.EX_CONFIG
                break
            if stop_requests.wait(SUPERVISE_EVERY_S):
                break
    finally:
        log.info("stopping")
        began = time.monotonic()
        supervisor.stop(hurry=stop_requests, budget_s=stop_budget(env))
        if nats:
            nats.stop(timeout=NATS_STOP_S)
        log.info("stopped in %.1f s", time.monotonic() - began)
        stop_requests.stand_down()
    sys.exit(exit_code)


def refusal(proc: ManagedProcess) -> str:
    """What a service that refused its settings said (the last lines of its log say why)."""
    try:
        with open(proc.log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    said = next((line for line in reversed(lines) if "refuses to start" in line), None)
    return said or f"{proc.name} refused to start: its settings are not valid"
