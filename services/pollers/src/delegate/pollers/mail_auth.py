"""Is this mail really the owner's? From must be OWNER_EMAIL, and, when EMAIL_AUTHSERV_ID is
set, the owner's own mail provider must have stamped it authenticated.

A From header is trivially forged, and so is an Authentication-Results header: the sender
may write any of them, with any authserv-id. What the sender cannot do is put one *above*
the headers the receiving provider adds, since every hop prepends its own. So only the
provider's stamp counts: the topmost Authentication-Results header whose authserv-id is
trusted (RFC 8601 §5; Mailman trusts "the most recent" header the same way), together with
the headers right below it that the same provider wrote at the same time (Fastmail writes
four, iCloud one per check). That run ends at the first header from an untrusted id or one
that reports a method the run already has (a second ``dmarc=`` is not the provider's, which
writes each check once), and it ends with the header that gives the provider's SPF verdict:
Gmail and Microsoft write one header, Fastmail and iCloud put SPF in the last of theirs (every
receiving sample in deltachat-core-rust's test-data/message/dkimchecks-2022-09-28 does). Without
that end, a sender's header under the provider's id could add what the provider did not write:
Gmail's whole verdict on unsigned mail from a domain without DMARC is ``spf=…``, so a forged
``dkim=pass`` or ``dmarc=pass`` below it repeats no method.

The run must say dmarc=pass, or dkim=pass for a signing domain aligned with the owner's
(``header.d``, or the domain of ``header.i`` where only that is given, as Gmail writes it) —
unless it says DMARC failed: that settles it.

EMAIL_AUTHSERV_ID is a comma-separated list of ids (``mx.google.com``) and ``*.domain``
patterns (Fastmail stamps ``mx1.messagingengine.com``, ``mx3…``, ``phl-mx-07…``); the entry
``(none)`` trusts the header Microsoft 365 and Outlook.com write without any authserv-id
(they remove such headers arriving from outside, so theirs is the only one).

authres parses the header: maintained (dkimpy's authors), implements RFC 8601 with its
property syntax, comments and quoting, which a regex gets wrong.
"""

import logging
import re
from dataclasses import dataclass
from typing import Literal

import authres

log = logging.getLogger(__name__)

NO_ID = "(none)"  # the EMAIL_AUTHSERV_ID entry for Microsoft's header without an authserv-id
_NO_ID_PARSE = "no-authserv-id.invalid"  # stands in for the missing id while authres parses
_STARTS_WITH_RESULT = re.compile(r"^\s*[A-Za-z0-9_.-]+\s*=")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: Literal["accepted", "not_owner", "unauthenticated"]
    detail: str


@dataclass(frozen=True)
class Result:
    method: str
    result: str
    props: dict[str, str]  # "header.d" -> "example.com"


@dataclass(frozen=True)
class Stamp:
    """One parsed Authentication-Results header; ``authserv_id`` None when it names none."""

    authserv_id: str | None
    results: list[Result]


class TrustedIds:
    """EMAIL_AUTHSERV_ID: exact ids, ``*.domain`` patterns (any name below the domain) and
    ``(none)``. Ids compare case-insensitively (RFC 8601 §2.5)."""

    def __init__(self, setting: str | None) -> None:
        entries = [e.strip().lower().rstrip(".") for e in (setting or "").split(",") if e.strip()]
        self.exact = {e for e in entries if not e.startswith("*.") and e != NO_ID}
        self.suffixes = [e[1:] for e in entries if e.startswith("*.")]  # ".messagingengine.com"
        self.no_id = NO_ID in entries
        self.text = ", ".join(entries)

    def __bool__(self) -> bool:
        return bool(self.exact or self.suffixes or self.no_id)

    def trusts(self, authserv_id: str | None) -> bool:
        if authserv_id is None:
            return self.no_id
        name = authserv_id.lower().rstrip(".")
        return name in self.exact or any(name.endswith(s) and len(name) > len(s) for s in self.suffixes)


def check_setting(setting: str | None) -> str | None:
    """A pattern wider than one provider (``*``, ``*.com``) would trust anyone: refused."""
    for entry in (e.strip() for e in (setting or "").split(",") if e.strip()):
        if entry == NO_ID:
            continue
        domain = entry[2:] if entry.startswith("*.") else entry
        if "*" in domain or (entry.startswith("*.") and "." not in domain) or not domain:
            return f"EMAIL_AUTHSERV_ID entry {entry!r}: use an id (mx.google.com) or *.provider-domain"
    return None


def parse(value: str) -> Stamp | None:
    """One header's value, or None when it cannot be read (no evidence either way)."""
    no_id = bool(_STARTS_WITH_RESULT.match(value))
    text = f"{_NO_ID_PARSE}; {value}" if no_id else value
    try:
        header = authres.AuthenticationResultsHeader.parse("Authentication-Results: " + text)
    except Exception as exc:
        log.info("unparseable Authentication-Results ignored: %r", exc)
        return None
    results = [
        Result(
            str(r.method).lower(), str(r.result).lower(),
            {f"{p.type}.{p.name}".lower(): str(p.value) for p in r.properties},
        )
        for r in header.results
    ]
    return Stamp(None if no_id else str(header.authserv_id), results)


def provider_stamp(values: list[str], trusted: TrustedIds) -> list[Stamp]:
    """The receiving provider's own headers: the topmost trusted one and the run below it."""
    run: list[Stamp] = []
    methods: set[str] = set()
    for value in values:  # in header order: the newest hop first
        stamp = parse(value)
        if stamp is None or not trusted.trusts(stamp.authserv_id):
            if run:
                break
            continue
        found = {r.method for r in stamp.results}
        if run and found & methods:
            break
        run.append(stamp)
        methods |= found
        if "spf" in found:  # the provider's last word: below it is not the provider's
            break
    return run


def aligned(domain: str, owner_domain: str) -> bool:
    """DMARC's relaxed alignment, approximated: the same domain, or one below the other (a
    one-label "domain" such as ``com`` aligns with nothing)."""
    d, o = domain.lower().strip().rstrip("."), owner_domain.lower().rstrip(".")
    return "." in d and (d == o or d.endswith("." + o) or o.endswith("." + d))


def dkim_domain(result: Result) -> str:
    """The signing domain: ``header.d``, else the domain part of ``header.i`` (Gmail writes
    ``header.i=@gmail.com`` and no ``header.d``)."""
    if result.props.get("header.d"):
        return result.props["header.d"]
    return result.props.get("header.i", "").rpartition("@")[2]


def check(from_addrs: list[str], auth_results: list[str], owner_email: str | None, authserv_id: str | None) -> Verdict:
    owner = (owner_email or "").strip().lower()
    if not owner:
        return Verdict(False, "not_owner", "OWNER_EMAIL is not set: no sender is accepted")
    if len(from_addrs) != 1 or from_addrs[0].lower() != owner:
        return Verdict(False, "not_owner", f"From {', '.join(from_addrs) or '(none)'} is not the owner")
    trusted = TrustedIds(authserv_id)
    if not trusted:
        return Verdict(True, "accepted", "from the owner (EMAIL_AUTHSERV_ID unset: From not verified)")
    owner_domain = owner.rpartition("@")[2]
    stamps = provider_stamp(auth_results, trusted)
    if not stamps:
        return Verdict(False, "unauthenticated", f"owner address without Authentication-Results from {trusted.text}")
    results = [(s.authserv_id or NO_ID, r) for s in stamps for r in s.results]
    seen = ", ".join(f"{r.method}={r.result}" for _, r in results)
    dmarc = next(((by, r) for by, r in results if r.method == "dmarc"), None)
    if dmarc is not None and dmarc[1].result == "pass":
        return Verdict(True, "accepted", f"{dmarc[0]}: dmarc=pass")
    if dmarc is None or dmarc[1].result not in ("fail", "quarantine", "reject"):
        for by, r in results:
            if r.method == "dkim" and r.result == "pass" and aligned(dkim_domain(r), owner_domain):
                return Verdict(True, "accepted", f"{by}: dkim=pass header.d={dkim_domain(r)}")
    return Verdict(False, "unauthenticated", f"owner address without authentication: {seen}"[:2000])
