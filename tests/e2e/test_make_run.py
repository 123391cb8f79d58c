"""`make run`'s launcher on a bare machine: private NATS, offline stand-in, every service."""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import nats
import nats.errors
import pytest

from delegate.launcher import private_server
from delegate.launcher.procs import free_port
from tests.support.waiting import eventually_sync

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
        entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"NATS_USER={role}".encode() in entries
        assert f"NATS_PASSWORD={passwords[role]}".encode() in entries
        others = [pw for r, pw in passwords.items() if r != role]
        assert not any(pw.encode() in b"\0".join(entries) for pw in others), role

    config = (runtime / "nats" / "nats.conf").read_text().splitlines()
    listen = next(line for line in config if line.startswith("listen"))
    url = "nats://" + listen.split('"')[1]

    async def refused() -> None:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(url, allow_reconnect=False, connect_timeout=2)

    asyncio.run(refused())


def _ctrl_c(proc: subprocess.Popen[bytes]) -> float:
    """What a terminal does on Ctrl-C: SIGINT to the launcher's whole process group.

    Returns the seconds until the launcher exited (printed, never asserted: a loaded machine
    may be slow; what is asserted is that everything stopped and nothing was lost)."""
    began = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(60) == 0
    return time.monotonic() - began


def _assert_all_gone(children: dict[int, str]) -> None:
    for pid, cmd in children.items():
        path = Path(f"/proc/{pid}")
        assert not path.exists() or "zombie" in (path / "status").read_text(), cmd


def _terms(runtime: Path) -> tuple[int, int]:
    """How many agent terms the ledger stored as started and as ended."""
    with sqlite3.connect(runtime / "db" / "assistant.sqlite") as db:
        started = db.execute("SELECT count(*) FROM conversation_events WHERE kind = 'term.started'").fetchone()[0]
        ended = db.execute("SELECT count(*) FROM conversation_events WHERE kind = 'term.ended'").fetchone()[0]
    return int(started), int(ended)


def _launch(cwd: Path, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    # A session of its own, like a shell's foreground job: Ctrl-C is a SIGINT to the group.
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "delegate.launcher"], env=env, cwd=cwd, stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )


def test_launcher_runs_the_whole_system_offline_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "TWILIO_", "IMAP_", "SMTP_"))}
    env.pop("DELEGATE_TOKEN", None)
    env.pop("DELEGATE_PORT", None)
    env.pop("RUNTIME_DATA_DIR", None)
    # The settings come from .env in the working directory, as the README says: the port the
    # gateway binds, the one the launcher prints, and the runtime folder. An empty variable in
    # the environment means unset, so .env's value applies.
    (tmp_path / ".env").write_text(f"DELEGATE_PORT={port}\nRUNTIME_DATA_DIR={tmp_path / 'rt'}\n")
    env["DELEGATE_OFFLINE_MODEL"] = ""
    env["DELEGATE_PROCESSES"] = "split"  # a process per service: each is killed and checked alone
    launch_log = tmp_path / "launch.log"
    proc = _launch(tmp_path, env, launch_log)
    base = f"http://127.0.0.1:{port}"
    runtime = tmp_path / "rt"
    try:
        eventually_sync(lambda: _ready(base), "/readyz 200", 90)
        assert f"http://localhost:{port}" in launch_log.read_text()
        # First start: the generated owner token is shown once on the launcher's own output,
        # and never in the gateway's log file.
        token = (runtime / "delegate-token").read_text().strip()
        eventually_sync(lambda: token in launch_log.read_text(), "the token on the launcher's output", 10)
        auth = {"Authorization": f"Bearer {token}"}
        state = httpx.get(f"{base}/api/state", headers=auth, timeout=5).json()
        assert state["offline_model"] is True

        sent = httpx.post(f"{base}/api/messages", headers=auth, json={"text": "hello launcher", "client_msg_id": "m1"})
        assert sent.status_code == 202

        def answered(count: int = 1) -> bool:
            events = httpx.get(f"{base}/api/timeline", headers=auth, timeout=5).json()["events"]
            return bool(sum(e["kind"] == "message" and e["role"] == "assistant" for e in events) >= count)

        eventually_sync(answered, "an assistant answer from the offline stand-in", 60)
        _check_identities(runtime, proc.pid)

        # A service that dies is restarted by the supervisor.
        ledger = [pid for pid, cmd in _children(proc.pid).items() if "delegate.ledger" in cmd]
        assert len(ledger) == 1
        os.kill(ledger[0], signal.SIGKILL)
        eventually_sync(lambda: any("delegate.ledger" in c and p != ledger[0] for p, c in _children(proc.pid).items()),
                        "the ledger to be restarted", 30)
        eventually_sync(lambda: _ready(base), "/readyz after the restart", 60)
        # Answered after the restart: the new ledger commits again (its writer process, whose
        # imports take seconds on a loaded machine, is up), as it must for the stop's last events.
        sent = httpx.post(f"{base}/api/messages", headers=auth, json={"text": "still there?", "client_msg_id": "m2"})
        assert sent.status_code == 202
        eventually_sync(lambda: answered(2), "an answer after the ledger's restart", 60)

        children = _children(proc.pid)
        assert any("nats-server" in cmd for cmd in children.values())
        assert any("delegate.openai_standin" in cmd for cmd in children.values())
        # Each child leads a process group of its own: a terminal's Ctrl-C reaches only the
        # launcher, which stops them in order, NATS last.
        assert all(os.getpgid(pid) == pid for pid in children), children
        stop_s = _ctrl_c(proc)
        sys.stdout.write(f"first start: Ctrl-C stopped everything in {stop_s:.2f} s\n")
        _assert_all_gone(children)
        started, ended = _terms(runtime)
        assert started >= 1 and ended == started, (started, ended)
        agent_log = (runtime / "logs" / "agent.log").read_text()
        assert "not recorded" not in agent_log
        assert token not in (runtime / "logs" / "gateway.log").read_text()

        # A later start names the token file instead of showing the token.
        launch_log.write_text("")
        proc = _launch(tmp_path, env, launch_log)
        eventually_sync(lambda: _ready(base), "/readyz 200 on the second start", 90)
        eventually_sync(lambda: str(runtime / "delegate-token") in launch_log.read_text(), "the token file's hint", 10)
        assert token not in launch_log.read_text()
        children = _children(proc.pid)
        stop_s = _ctrl_c(proc)
        sys.stdout.write(f"warm start: Ctrl-C stopped everything in {stop_s:.2f} s\n")
        _assert_all_gone(children)
        started, ended = _terms(runtime)
        assert started >= 2 and ended == started, (started, ended)
        assert token not in (runtime / "logs" / "gateway.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _token_cli(runtime: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DELEGATE_TOKEN"}
    env["RUNTIME_DATA_DIR"] = str(runtime)
    return subprocess.run(
        [sys.executable, "-m", "delegate.gateway", "token", *args], env=env, cwd=runtime.parent,
        capture_output=True, text=True, timeout=60,
    )


def test_the_token_command_prints_and_rotates_the_stored_token(tmp_path: Path) -> None:
    runtime = tmp_path / "rt"
    missing = _token_cli(runtime)
    assert missing.returncode == 1 and "first start" in missing.stderr

    rotated = _token_cli(runtime, "--rotate")
    assert rotated.returncode == 0, rotated.stderr
    first = rotated.stdout.strip()
    assert len(first) >= 32
    assert "restart" in rotated.stderr.lower() and "revoked" in rotated.stderr
    path = runtime / "delegate-token"
    assert path.read_text().strip() == first
    assert path.stat().st_mode & 0o777 == 0o600

    shown = _token_cli(runtime)
    assert shown.returncode == 0 and shown.stdout.strip() == first
    assert str(path) in shown.stderr

    again = _token_cli(runtime, "--rotate")
    assert again.returncode == 0 and again.stdout.strip() not in ("", first)
    assert path.read_text().strip() == again.stdout.strip()
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in runtime.iterdir()] == ["delegate-token"]  # no temporary file left behind


def test_a_warm_start_reuses_the_nats_setup_until_what_it_depends_on_changes(tmp_path: Path) -> None:
    """The launcher's NATS identities and authorization block come from a child process (the role
    table is heavy); a warm start takes the kept result instead, while the identities file and
    the rendering code are unchanged, and the child's again when they are not."""
    auth_dir = tmp_path / "nats-auth"
    first = private_server.prepare_in_child(auth_dir)
    kept = auth_dir / private_server.CACHE
    assert kept.stat().st_mode & 0o777 == 0o600  # it holds every password
    assert private_server.prepare_in_child(auth_dir) == first

    # Kept and used: a block marked in the kept file comes back as it is.
    body = json.loads(kept.read_text())
    kept.write_text(json.dumps({**body, "authorization": "marked"}))
    assert private_server.prepare_in_child(auth_dir).authorization == "marked"

    # The identities changed (a role missing, as after an upgrade adds one): the child again.
    identities = auth_dir / "nats-identities.json"
    passwords = json.loads(identities.read_text())
    dropped = sorted(passwords)[0]
    identities.write_text(json.dumps({r: pw for r, pw in passwords.items() if r != dropped}))
    again = private_server.prepare_in_child(auth_dir)
    assert again.authorization != "marked" and dropped in again.passwords
    assert {r: pw for r, pw in again.passwords.items() if r != dropped} == {
        r: pw for r, pw in first.passwords.items() if r != dropped
    }
