"""Is this mail really the owner's? From must be OWNER_EMAIL, and, when EMAIL_AUTHSERV_ID is
set, our own receiving server must have stamped it authenticated.

A From header is trivially forged, so with an authserv-id configured only an
Authentication-Results header carrying exactly that authserv-id counts (RFC 8601 §5: the
receiving server removes or ignores others; any header with a different id was written by
someone else and may be a forgery). It must say dmarc=pass, or dkim=pass for a signing
domain aligned with the owner's (the same domain, or one a parent of the other).

authres parses the header: maintained (dkimpy's authors), implements RFC 8601 with its
property syntax, comments and quoting, which a regex gets wrong.
"""

import logging
from dataclasses import dataclass
from typing import Literal

import authres

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: Literal["accepted", "not_owner", "unauthenticated"]
    detail: str


def _aligned(domain: str, owner_domain: str) -> bool:
    d, o = domain.lower().rstrip("."), owner_domain.lower().rstrip(".")
    return bool(d) and (d == o or d.endswith("." + o) or o.endswith("." + d))


def _parse(value: str) -> "authres.AuthenticationResultsHeader | None":
    try:
        return authres.AuthenticationResultsHeader.parse("Authentication-Results: " + value)
    except Exception as exc:  # a malformed header is no evidence either way
        log.info("unparseable Authentication-Results ignored: %r", exc)
        return None


def check(from_addrs: list[str], auth_results: list[str], owner_email: str | None, authserv_id: str | None) -> Verdict:
    owner = (owner_email or "").strip().lower()
    if not owner:
        return Verdict(False, "not_owner", "OWNER_EMAIL is not set: no sender is accepted")
    if len(from_addrs) != 1 or from_addrs[0].lower() != owner:
        return Verdict(False, "not_owner", f"From {', '.join(from_addrs) or '(none)'} is not the owner")
    if not authserv_id:
        return Verdict(True, "accepted", "from the owner (EMAIL_AUTHSERV_ID unset: From not verified)")
    owner_domain = owner.rpartition("@")[2]
    seen: list[str] = []
    for value in auth_results:
        header = _parse(value)
        if header is None or str(header.authserv_id).lower() != authserv_id.lower():
            continue
        for result in header.results:
            method, verdict = str(result.method).lower(), str(result.result).lower()
            seen.append(f"{method}={verdict}")
            if method == "dmarc" and verdict == "pass":
                return Verdict(True, "accepted", f"{authserv_id}: dmarc=pass")
            if method == "dkim" and verdict == "pass":
                for prop in result.properties:
                    if str(prop.type).lower() == "header" and str(prop.name).lower() == "d" and _aligned(
                        str(prop.value), owner_domain
                    ):
                        return Verdict(True, "accepted", f"{authserv_id}: dkim=pass header.d={prop.value}")
    found = ", ".join(seen) if seen else f"no Authentication-Results from {authserv_id}"
    return Verdict(False, "unauthenticated", f"owner address without authentication: {found}"[:2000])
