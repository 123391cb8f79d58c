"""A real IMAP server for tests: pymap's in-memory backend as a subprocess.

pymap has IDLE and gives every process start a new UIDVALIDITY, so restarting it (and
re-appending the same mail) is how a test changes UIDVALIDITY. Tests put mail in with
APPEND over IMAP (imaplib), as a delivering server would.

With ``introspect_url`` the server also speaks XOAUTH2 as Gmail and Outlook do
(``pymap_xoauth2``): an access token is good when that OAuth2 server says it is live and
the user's.
"""

import imaplib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from delegate.launcher.procs import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
USER = "owner-inbox"
PASSWORD = "inbox-secret"


def _pymap() -> str:
    beside = Path(sys.executable).parent / "pymap"  # the venv's console script
    if beside.exists():
        return str(beside)
    found = shutil.which("pymap")
    if found is None:
        raise FileNotFoundError("pymap is not installed: pip install -r requirements-dev.txt")
    return found


class ImapServer:
    def __init__(self, log_path: Path, *, introspect_url: str | None = None, user: str = USER) -> None:
        self.introspect_url, self.user = introspect_url, user
        self.host = "127.0.0.1"
        self.port = free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> "ImapServer":
        return self.launch().wait_listening(timeout)

    def launch(self) -> "ImapServer":
        """The process, not yet waited for: a caller starts other processes meanwhile, then
        ``wait_listening`` (their start-ups overlap instead of adding up)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        listen = ["--host", self.host, "--port", str(self.port), "--no-tls"]
        account = ["--demo-user", self.user, "--demo-password", PASSWORD]
        if self.introspect_url is None:
            command, env = [_pymap(), *listen, "dict", *account], None
        else:
            command = [sys.executable, "-m", "tests.support.pymap_xoauth2", *listen, "xoauth2-dict", *account,
                       "--introspect-url", self.introspect_url]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def wait_listening(self, timeout: float = 15.0) -> "ImapServer":
        assert self.proc is not None, "launch() first"
        try:
            # pymap's asyncio server greets every connection as soon as it listens
            wait_for_port(self.port, timeout, proc=self.proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {self.log_path.read_text()[-2000:]}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        """A new process on the same port: an empty mailbox with a new UIDVALIDITY."""
        self.stop()
        self.start()

    def env(self, **extra: str) -> dict[str, str]:
        """The pollers' IMAP settings for this server."""
        return {
            "IMAP_HOST": self.host, "IMAP_PORT": str(self.port), "IMAP_USER": self.user,
            "IMAP_PASSWORD": PASSWORD, "IMAP_TLS": "none", "IMAP_MAILBOX": "INBOX", "IMAP_START": "all", **extra,
        }

    def _client(self) -> imaplib.IMAP4:
        client = imaplib.IMAP4(self.host, self.port, timeout=10)
        client.login(self.user, PASSWORD)
        return client

    def append(self, *raws: bytes, mailbox: str = "INBOX") -> None:
        client = self._client()
        try:
            for raw in raws:
                status, data = client.append(mailbox, None, None, raw)
                if status != "OK":
                    raise RuntimeError(f"APPEND failed: {data!r}")
        finally:
            client.logout()

    def uidvalidity(self, mailbox: str = "INBOX") -> int:
        client = self._client()
        try:
            _, data = client.status(mailbox, "(UIDVALIDITY)")
            text = data[0].decode() if isinstance(data[0], bytes) else str(data[0])
            return int(text.split("UIDVALIDITY")[1].strip(" )"))
        finally:
            client.logout()
