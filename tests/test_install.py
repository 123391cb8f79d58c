"""The install keeps urllib3 itself: caldav's niquests brings urllib3-future, whose wheel copies the
fork over urllib3 at every interpreter start (a .pth file). requests, and with it the twilio SDK
and schemathesis, must run on the urllib3 constraints.txt pins; niquests on its own namespace."""

import importlib.metadata
import re
import site
from pathlib import Path

import niquests
import requests
from urllib3._version import __version__ as urllib3_version  # not in urllib3's __all__

ROOT = Path(__file__).resolve().parent.parent


def pinned(name: str) -> str:
    text = (ROOT / "constraints.txt").read_text()
    match = re.search(rf"^{re.escape(name)}==(\S+)$", text, re.MULTILINE)
    assert match, f"{name} is not pinned in constraints.txt"
    return match.group(1)


def test_urllib3_is_the_pinned_urllib3_not_the_fork() -> None:
    assert urllib3_version == pinned("urllib3")
    assert importlib.metadata.version("urllib3") == pinned("urllib3")
    assert not any((Path(root) / "urllib3_future.pth").exists() for root in site.getsitepackages()), (
        "urllib3-future was installed from its wheel: its .pth overwrites urllib3 at each start"
    )


def test_requests_pools_are_urllib3s_own() -> None:
    # schemathesis counts a session's open connections through these (it failed CI on the fork's
    # TrafficPolice, which has no keys()).
    adapter = requests.Session().get_adapter("http://127.0.0.1/")
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    assert list(adapter.poolmanager.pools.keys()) == []


def test_niquests_still_has_its_fork() -> None:
    # caldav's client is built on niquests, which needs urllib3-future under its own name.
    assert niquests.Session() is not None
    assert importlib.metadata.version("urllib3-future") == pinned("urllib3-future")
