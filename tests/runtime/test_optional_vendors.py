"""Vendor SDKs the runtime wraps but does not require: ``openai_client`` and ``twilio_rest``
import them on first use, and only the services that use those modules install them."""

import re
import tomllib
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"
OPTIONAL = {"openai_client": "openai", "twilio_rest": "twilio"}


def _requires(member: str) -> set[str]:
    meta = tomllib.loads((SERVICES / member / "pyproject.toml").read_text())
    return {re.split(r"[\[<>=~!; ]", dep, maxsplit=1)[0].lower() for dep in meta["project"]["dependencies"]}


@pytest.mark.parametrize(("module", "vendor"), sorted(OPTIONAL.items()))
def test_the_runtime_does_not_require_it_and_every_user_does(module: str, vendor: str) -> None:
    assert vendor not in _requires("runtime")
    users = sorted(
        member.name
        for member in SERVICES.iterdir()
        if member.name != "runtime" and (member / "src").is_dir()
        and any(f"delegate.runtime.{module}" in path.read_text() for path in (member / "src").rglob("*.py"))
    )
    assert users, f"nobody uses delegate.runtime.{module}"
    missing = [member for member in users if vendor not in _requires(member)]
    assert missing == [], f"{missing} import delegate.runtime.{module} but do not require {vendor}"
