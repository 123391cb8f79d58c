"""The NATS identities ``make run`` generates once: one user and random password per role.

User and password rather than nkeys: nats-py and nats-server support them with no extra
package in any image, and on one machine the private server's config (0600, beside the
passwords) is the only other copy. Each child process gets only its own pair.
"""

import json
import os
import secrets
from pathlib import Path

FILE = "nats-identities.json"


def load_or_create(directory: Path) -> dict[str, str]:
    """role -> password, kept in ``directory`` (0700) as a 0600 file; a missing role is added."""
    from delegate.contracts.roles import ROLES  # see natsconf: not in the launcher's own process

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / FILE
    passwords: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    missing = [role for role in ROLES if role not in passwords]
    if missing or not path.exists():
        passwords.update({role: secrets.token_urlsafe(24) for role in missing})
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(passwords, out, indent=1)
        os.replace(tmp, path)
    os.chmod(path, 0o600)
    return {role: passwords[role] for role in ROLES}


def child_env(role: str, passwords: dict[str, str]) -> dict[str, str]:
    """What one service's environment carries of the identities: its own, nothing else."""
    return {"NATS_USER": role, "NATS_PASSWORD": passwords[role]}
