"""How a service proves who it is to NATS: credentials from the environment, per identity.

Every service connects as its own NATS identity (see ``delegate.contracts.roles``), and NATS
itself enforces what that identity may publish and subscribe. ``make run`` generates the
identities and hands each child its own; an external server (``NATS_URL``) gets them from the
environment, like the OpenAI SDK gets ``OPENAI_API_KEY``.
"""

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from delegate.contracts import roles


class NatsCredentials(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", env_ignore_empty=True)

    nats_creds: Path | None = None  # NATS_CREDS: a creds file (JWT and nkey seed)
    nats_nkey_seed: Path | None = None  # NATS_NKEY_SEED: a file holding this identity's nkey seed
    nats_user: str | None = None  # NATS_USER
    nats_password: SecretStr | None = None  # NATS_PASSWORD


def role_of(service: str) -> str:
    """The identity's role from a connection name: ``agent:host:leader`` -> ``agent``."""
    return service.split(":", 1)[0]


def inbox_prefix(role: str) -> str:
    """Each identity's private reply inboxes: nobody else may subscribe to them."""
    return roles.inbox_prefix(role)


def _url_user(url: str | None) -> str | None:
    """The user a ``nats://user:password@host`` URL logs in as (nats-py prefers it to options)."""
    login = _url_login(url)
    return login[0] if login else None


def _url_login(url: str | None) -> tuple[str, str] | None:
    """User and password of the first URL of a seed list, if it carries them."""
    if not url:
        return None
    parts = urlsplit(url.split(",", 1)[0].strip())
    if not parts.username:
        return None
    return unquote(parts.username), unquote(parts.password or "")


def identity_role(service: str, credentials: NatsCredentials | None = None, *, url: str | None = None) -> str:
    """The role this process acts as: its NATS user (named after its role) when it has one.

    The connection name is only the fallback: ``INSTANCE_NAME=gateway-2`` names a process,
    not a role, and its replies must still come back on the gateway's inbox prefix.
    """
    creds = credentials if credentials is not None else NatsCredentials()
    for user in (_url_user(url), creds.nats_user):
        if user in roles.ROLES:
            return str(user)
    return role_of(service)


def connect_options(
    service: str, credentials: NatsCredentials | None = None, *, url: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``nats.connect``: who we are, and where our replies come back."""
    creds = credentials if credentials is not None else NatsCredentials()
    options: dict[str, Any] = {"inbox_prefix": inbox_prefix(identity_role(service, creds, url=url))}
    if creds.nats_creds is not None:
        options["user_credentials"] = str(creds.nats_creds)
    elif creds.nats_nkey_seed is not None:
        options["nkeys_seed"] = str(creds.nats_nkey_seed)
    elif creds.nats_user is not None:
        options["user"] = creds.nats_user
        options["password"] = creds.nats_password.get_secret_value() if creds.nats_password else ""
    elif (login := _url_login(url)) is not None:
        # Also for the cluster's other nodes, which the servers announce without credentials.
        options["user"], options["password"] = login
    return options
