"""The private nats-server's identities and authorization block, prepared in a process of its own.

They come from the role table, which loads pydantic and every contract (~18 MB). The launcher
supervises for as long as the system runs, so it asks a short-lived child for the result
(``python -m delegate.launcher nats-setup DIR``) rather than keep the table in its own memory.
"""

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path


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


def prepare_in_child(directory: Path) -> PrivateServerAuth:
    done = subprocess.run(
        [sys.executable, "-m", "delegate.launcher", "nats-setup", str(directory)],
        capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"preparing the NATS identities failed:\n{done.stderr.strip()}")
    body = json.loads(done.stdout)
    return PrivateServerAuth(passwords=body["passwords"], authorization=body["authorization"])
