"""The one settings source: the environment first, then `.env`; an empty value means unset.

Every service's settings class (`delegate.runtime.settings.ServiceSettings`) reads its fields
with these rules through pydantic-settings, and the launcher (`make run`) builds the
environment it hands its children with `merged_environment`, which applies the same rules to
every variable, so a setting in `.env` means the same to the launcher and to each service.
Which `.env`: the one in the current working directory, as pydantic-settings resolves it
(`make run` and the services started by it run in the repository's root).

It also says, in one place, which model answers: `openai_endpoint` derives the API key, the
base URL and the offline flag from whether a real `OPENAI_API_KEY` is given. Without one the
offline stand-in at `OPENAI_STANDIN_URL` answers (started by `make run`, or compose's
`openai-standin` service); with one, OpenAI (or `OPENAI_BASE_URL`) does, and the stand-in
never sees the key.
"""

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from dotenv import dotenv_values

ENV_FILE = ".env"

# The API key the services send the offline stand-in: the stand-in gives its demo answers
# (first-run guide, notes, reminders) to requests that carry it.
OFFLINE_KEY = "offline-standin"


def read_env_file(path: str | Path | None = ENV_FILE) -> dict[str, str]:
    """The non-empty assignments of a `.env` file (missing file: none), as pydantic-settings reads them."""
    if path is None or not Path(path).is_file():
        return {}
    return {k: v for k, v in dotenv_values(path).items() if v}


def merged_environment(
    environ: Mapping[str, str] | None = None, env_file: str | Path | None = ENV_FILE
) -> dict[str, str]:
    """Every variable the settings classes would see: the environment wins over `.env`, and an
    empty value in either counts as unset (so an empty variable falls back to `.env`)."""
    environ = os.environ if environ is None else environ
    merged = read_env_file(env_file)
    merged.update({k: v for k, v in environ.items() if v != ""})
    return merged


def password_variable(role: str) -> str:
    """The variable holding ``role``'s NATS password where one environment serves several roles
    (an external server's settings, or one host process running several services):
    NATS_PASSWORD_INNER_PLANE."""
    return "NATS_PASSWORD_" + role.upper().replace("-", "_")


@dataclass(frozen=True)
class OpenAIEndpoint:
    api_key: str
    base_url: str | None  # None: the SDK's default, OpenAI itself
    offline: bool  # the offline stand-in answers, not a real model


def openai_endpoint(
    api_key: str | None, base_url: str | None = None, standin_url: str | None = None
) -> OpenAIEndpoint:
    """Who answers, from whether a real key is given: the one place this is decided."""
    key = (api_key or "").strip()
    base = (base_url or "").strip() or None
    standin = (standin_url or "").strip() or None
    if key and key != OFFLINE_KEY:
        return OpenAIEndpoint(key, base, offline=False)
    return OpenAIEndpoint(OFFLINE_KEY, standin or base, offline=True)


def endpoint_from_environment(env: Mapping[str, str]) -> OpenAIEndpoint:
    return openai_endpoint(env.get("OPENAI_API_KEY"), env.get("OPENAI_BASE_URL"), env.get("OPENAI_STANDIN_URL"))


def export_openai_environment(endpoint: OpenAIEndpoint, environ: MutableMapping[str, str] | None = None) -> None:
    """Make the OpenAI SDK (which reads `OPENAI_API_KEY` / `OPENAI_BASE_URL` itself) use `endpoint`.

    An offline endpoint with nowhere to point at (no stand-in URL) leaves the environment alone.
    """
    environ = os.environ if environ is None else environ
    if environ.get("OPENAI_BASE_URL") == "":  # compose passes unset variables as "": the SDK would use it
        del environ["OPENAI_BASE_URL"]
    if endpoint.offline and endpoint.base_url is None:
        return
    environ["OPENAI_API_KEY"] = endpoint.api_key
    if endpoint.base_url is not None:
        environ["OPENAI_BASE_URL"] = endpoint.base_url
    else:
        environ.pop("OPENAI_BASE_URL", None)
