"""`make run`'s launcher on a bare machine: private NATS, offline stand-in, every service."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import nats
import nats.errors
import pytest

from delegate.launcher.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _children(pid: int) -> dict[int, str]:
    """Direct children of ``pid`` with their command lines, read from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    return found


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _check_identities(runtime: Path, launcher: int) -> None:
    """One identity per service, kept private; each child knows only its own; NATS wants one."""
    secrets_file = runtime / "nats-auth" / "nats-identities.json"
    assert secrets_file.stat().st_mode & 0o777 == 0o600
    assert (runtime / "nats-auth").stat().st_mode & 0o777 == 0o700
    assert (runtime / "nats" / "nats.conf").stat().st_mode & 0o777 == 0o600
    passwords = json.loads(secrets_file.read_text())
    for pid, cmd in _children(launcher).items():
        module = next((m for m in cmd.split() if m.startswith("delegate.")), None)
        if module is None or module == "delegate.openai_standin":
            environ = (Path(f"/proc/{pid}/environ")).read_bytes()
            assert not any(pw.encode() in environ for pw in passwords.values()), cmd
            continue
        role = module.removeprefix("delegate.").replace("_", "-")
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"NATS_USER={role}".encode() in environ
        assert f"NATS_PASSWORD={passwords[role]}".encode() in environ
        others = [pw for r, pw in passwords.items() if r != role]
        assert not any(pw.encode() in b"\0".join(environ) for pw in others), role

    config = (runtime / "nats" / "nats.conf").read_text().splitlines()
    listen = next(line for line in config if line.startswith("listen"))
    url = "nats://" + listen.split('"')[1]

    async def refused() -> None:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(url, allow_reconnect=False, connect_timeout=2)

    asyncio.run(refused())


def test_launcher_runs_the_whole_system_offline_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "TWILIO_", "IMAP_", "SMTP_"))}
    env.update(RUNTIME_DATA_DIR=str(tmp_path / "rt"), DELEGATE_PORT=str(port))
    env.pop("DELEGATE_TOKEN", None)
    log = open(tmp_path / "launch.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "delegate.launcher"], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _ready(base), 90, "/readyz 200")
        # First start: the generated owner token is shown once on the launcher's own output.
        token = (tmp_path / "rt" / "delegate-token").read_text().strip()
        _wait(lambda: token in (tmp_path / "launch.log").read_text(), 10, "the token on the launcher's output")
        auth = {"Authorization": f"Bearer {token}"}
        state = httpx.get(f"{base}/api/state", headers=auth, timeout=5).json()
        assert state["offline_model"] is True

        sent = httpx.post(f"{base}/api/messages", headers=auth, json={"text": "hello launcher", "client_msg_id": "m1"})
        assert sent.status_code == 202

        def answered() -> bool:
            events = httpx.get(f"{base}/api/timeline", headers=auth, timeout=5).json()["events"]
            return any(e["kind"] == "message" and e["role"] == "assistant" for e in events)

        _wait(answered, 60, "an assistant answer from the offline stand-in")
        events = httpx.get(f"{base}/api/timeline", headers=auth).json()["events"]
        answer = next(e for e in events if e["kind"] == "message" and e["role"] == "assistant")
        assert "hello launcher" in answer["payload"]["text"]

        _check_identities(tmp_path / "rt", proc.pid)

        # A service that dies is restarted by the supervisor.
        ledger = [pid for pid, cmd in _children(proc.pid).items() if "delegate.ledger" in cmd]
        assert len(ledger) == 1
        os.kill(ledger[0], signal.SIGKILL)
        _wait(lambda: any("delegate.ledger" in c and p != ledger[0] for p, c in _children(proc.pid).items()),
              30, "the ledger to be restarted")
        _wait(lambda: _ready(base), 60, "/readyz after the restart")

        children = _children(proc.pid)
        assert any("nats-server" in cmd for cmd in children.values())
        assert any("delegate.openai_standin" in cmd for cmd in children.values())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        for pid in children:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
