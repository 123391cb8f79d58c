"""The private nats-server's identities and authorization block, prepared in a process of its own.

They come from the role table, which loads pydantic and every contract (~18 MB). The launcher
supervises for as long as the system runs, so it asks a short-lived child for the result
(``python -m delegate.launcher nats-setup DIR``) rather than keep the table in its own memory.

That child is a second or more of every start on a loaded machine, before NATS can start, so
its result is kept beside the identities (as private as they are) and used again while
neither they nor the code that renders them (the contracts, `natsconf`) changed.
"""

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .identities import FILE as IDENTITIES

CACHE = "nats-setup.json"


@dataclass(frozen=True)
class PrivateServerAuth:
    passwords: dict[str, str]  # role -> password (each child gets only its own)
    authorization: str  # the server config's block: one user per role, its subjects only


def prepare(directory: Path) -> PrivateServerAuth:
    """Load or create the identities in ``directory`` and render the block (the child's side)."""
    from . import identities
    from .natsconf import authorization_block, role_users

    passwords = identities.load_or_create(directory)
    return PrivateServerAuth(passwords, authorization_block(role_users(passwords)))


def print_prepared(directory: Path) -> None:
    """``nats-setup``: the result as JSON on stdout, a pipe only the launcher reads."""
    json.dump(asdict(prepare(directory)), sys.stdout)


def fingerprint(directory: Path) -> str:
    """What the result depends on: the identities file and the rendering code's files (their
    names, sizes and modification times: a changed install changes them), read without
    importing any of it."""
    digest = hashlib.sha256()
    try:
        digest.update((directory / IDENTITIES).read_bytes())
    except FileNotFoundError:
        digest.update(b"no identities yet")
    spec = importlib.util.find_spec("delegate.contracts")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    files = [f for root in roots for f in sorted(root.rglob("*.py"))]
    files.append(Path(__file__).with_name("natsconf.py"))
    for path in files:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _cached(directory: Path) -> PrivateServerAuth | None:
    try:
        body = json.loads((directory / CACHE).read_text())
        if body.get("fingerprint") == fingerprint(directory):
            return PrivateServerAuth(passwords=body["passwords"], authorization=body["authorization"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable: the child makes it again
    return None


def _keep(directory: Path, auth: PrivateServerAuth) -> None:
    body = {"fingerprint": fingerprint(directory), **asdict(auth)}
    tmp = directory / (CACHE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds every password
    with os.fdopen(fd, "w") as out:
        json.dump(body, out)
    os.replace(tmp, directory / CACHE)


def prepare_in_child(directory: Path) -> PrivateServerAuth:
    """The identities and the block: the last result while nothing it depends on changed,
    else the child's (kept for the next start)."""
    cached = _cached(directory)
    if cached is not None:
        return cached
    done = subprocess.run(
        [sys.executable, "-m", "delegate.launcher", "nats-setup", str(directory)],
        capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"preparing the NATS identities failed:\n{done.stderr.strip()}")
    body = json.loads(done.stdout)
    auth = PrivateServerAuth(passwords=body["passwords"], authorization=body["authorization"])
    _keep(directory, auth)
    return auth
