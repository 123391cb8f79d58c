"""nats-server configuration rendered from the role table, never written by hand.

``make run`` renders it with generated passwords; ``python -m delegate.launcher nats-config``
renders the same for an operator's server, with each password read from an environment
variable (``$NATS_PASSWORD_GATEWAY``), so the file holds no secret and cannot drift from
delegate.contracts.roles.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from delegate.runtime.settings_source import password_variable as password_variable  # re-exported

if TYPE_CHECKING:  # the role table is loaded where it is read: the launcher's own process never does
    from delegate.contracts.roles import Permissions


@dataclass(frozen=True)
class NatsUser:
    name: str
    password: str = ""
    permissions: "Permissions | None" = None  # None: everything (the tests' own identity)
    password_env: str | None = None  # render ``$VAR``: nats-server reads it from its environment


def role_users(passwords: dict[str, str]) -> list[NatsUser]:
    """One user per role, named after it, allowed exactly what its row of the table says."""
    from delegate.contracts.roles import ROLES, permissions

    return [NatsUser(role, passwords[role], permissions(spec)) for role, spec in ROLES.items()]


def _list(items: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _user(user: NatsUser) -> str:
    # Quoted strings are literal to nats-server ("$JS.API..." is no variable); an unquoted
    # $NAME is a variable, looked up in the server's environment when not defined in the file.
    password = f"${user.password_env}" if user.password_env else json.dumps(user.password)
    lines = [f"    {{\n      user: {json.dumps(user.name)}\n      password: {password}"]
    perms = user.permissions
    if perms is not None:
        lines.append(
            "      permissions: {\n"
            f"        publish: {{ allow: {_list(perms.publish)} }}\n"
            f"        subscribe: {{ allow: {_list(perms.subscribe)} }}\n"
            + ("        allow_responses: true\n" if perms.allow_responses else "")
            + "      }"
        )
    return "\n".join(lines) + "\n    }"


def authorization_block(users: Sequence[NatsUser]) -> str:
    """Every connection must log in as one of ``users``; each may use only its own subjects."""
    body = "\n".join(_user(u) for u in users)
    return f"authorization {{\n  users: [\n{body}\n  ]\n}}\n"


def operator_config(*, listen: str = "0.0.0.0:4222", http: str = "0.0.0.0:8222", store_dir: str = "/nats") -> str:
    """A complete server config for compose or any external server; passwords come from the environment."""
    from delegate.contracts.roles import ROLES, permissions

    users = [
        NatsUser(role, permissions=permissions(spec), password_env=password_variable(role))
        for role, spec in ROLES.items()
    ]
    return (
        "# nats-server config for compose, generated from delegate.contracts.roles by\n"
        "# `python -m delegate.launcher nats-config`: edit the table, not this file.\n"
        "# sync_interval always: JetStream fsyncs each write, so an acknowledged publish\n"
        "# survives power loss (the default fsyncs every two minutes).\n"
        "# Each service logs in as its role; its password is read from the server's\n"
        "# environment (NATS_PASSWORD_<ROLE>, e.g. NATS_PASSWORD_GATEWAY): a missing one\n"
        "# stops the server from starting, and a connection without credentials is refused.\n"
        f"listen: {json.dumps(listen)}\n"
        f"http: {json.dumps(http)}\n"
        "max_payload: 1MB\n"
        "jetstream {\n"
        f"  store_dir: {json.dumps(store_dir)}\n"
        "  sync_interval: always\n"
        "}\n" + authorization_block(users)
    )
