"""Authentication-Results as the owner's mail providers stamp them, for the sender check.

Each is copied from a public sample of real mail, with only the sender's address replaced by
the owner's (``{local}@{domain}``) so the sample can stand for the owner's own mail:

- Gmail: deltachat/deltachat-core-rust, test-data/message/dkimchecks-2022-09-28/
  alice@gmail.com/alice@fastmail.com (mail from Fastmail received by Gmail): one header from
  ``mx.google.com``, DKIM given as ``header.i=@domain`` without ``header.d``.
- Fastmail: the same folder, alice@fastmail.com/alice@mail.ru: four headers from
  ``mx3.messagingengine.com``, DMARC in the last of them; other mails of that folder come from
  ``mx1.messagingengine.com`` (alice@fastmail.com/forged-authres-added@example.com).
- iCloud: the same folder, alice@icloud.com/alice@gmail.com: one header per check from
  ``bimi.icloud.com``, ``dmarc.icloud.com``, ``dkim-verifier.icloud.com``, ``spf.icloud.com``.
- Outlook.com / Microsoft 365: the same folder, alice@outlook.com/alice@mail.ru, and the
  shape Microsoft documents ("Anti-spam message headers in Microsoft 365"): no authserv-id at
  all. In that sample the sender's own header (mail.ru writes ``smtpng1.m.smailru.net;
  auth=pass``, kept by Fastmail and iCloud) is gone: Exchange Online removes them.

The forged headers follow the same folder's ``forged-authres-added@example.com`` samples (an
attacker's Authentication-Results below the provider's), with the attacker's id replaced by
the provider's own: the case a receiver that trusts any header of its id gets wrong.
"""

OWNER_LOCAL, OWNER_DOMAIN = "owner", "example.com"


def gmail(domain: str = OWNER_DOMAIN, local: str = OWNER_LOCAL) -> list[str]:
    return [
        "mx.google.com;\r\n"
        f"       dkim=pass header.i=@{domain} header.s=fm2 header.b=9iLihtf9;\r\n"
        "       dkim=pass header.i=@messagingengine.com header.s=fm2 header.b=vFQyciDG;\r\n"
        f"       spf=pass (google.com: domain of {local}@{domain} designates 66.111.4.28 as permitted sender)"
        f" smtp.mailfrom={local}@{domain};\r\n"
        f"       dmarc=pass (p=NONE sp=NONE dis=NONE) header.from={domain}",
    ]


def gmail_dkim_only(domain: str) -> list[str]:
    """Gmail's header for a sender domain without a DMARC record: no ``dmarc=`` clause, and
    the signature named by ``header.i`` only."""
    return [
        "mx.google.com;\r\n"
        f"       dkim=pass header.i=@{domain} header.s=fm2 header.b=9iLihtf9;\r\n"
        f"       spf=pass (google.com: domain of owner@{domain} designates 66.111.4.28 as permitted sender)"
        f" smtp.mailfrom=owner@{domain}",
    ]


def gmail_forged_below(domain: str = OWNER_DOMAIN) -> list[str]:
    """Gmail's real verdict (a From the sending server may not use: spf=neutral, DMARC fails)
    and under it the sender's own forgery with Gmail's id saying dmarc=pass."""
    return [
        "mx.google.com;\r\n"
        "       spf=neutral (google.com: 89.22.108.212 is neither permitted nor denied by best guess record"
        " for domain of mallory@attacker.example) smtp.mailfrom=mallory@attacker.example;\r\n"
        f"       dmarc=fail (p=NONE sp=NONE dis=NONE) header.from={domain}",
        f"mx.google.com; dkim=pass header.i=@{domain};\r\n"
        f"       dmarc=pass (p=NONE sp=NONE dis=NONE) header.from={domain}",
    ]


def gmail_unsigned_forged_below(domain: str = OWNER_DOMAIN, *forged: str) -> list[str]:
    """Gmail's whole verdict on unsigned mail from a domain without a DMARC record (the folder's
    alice@gmail.com/forged-authres-added@example.com, sent from delta.blinzeln.de): one header,
    ``spf`` and nothing else. Below it the sender's own headers, as in that sample, but written
    with Gmail's id and naming the methods Gmail's header lacks."""
    return [
        "mx.google.com;\r\n"
        "       spf=neutral (google.com: 89.22.108.212 is neither permitted nor denied by best guess record"
        f" for domain of mallory@{domain}) smtp.mailfrom=mallory@{domain}",
        *(f"mx.google.com; {clause}" for clause in forged),
    ]


def fastmail(domain: str = OWNER_DOMAIN, local: str = OWNER_LOCAL, mx: str = "mx3") -> list[str]:
    by = f"{mx}.messagingengine.com"
    return [
        f"{by};\r\n    x-csa=none;\r\n    x-me-sender=none;\r\n"
        "    x-ptr=pass smtp.helo=smtpng1.i.mail.ru policy.ptr=smtpng1.i.mail.ru",
        f"{by};\r\n    bimi=none (No BIMI records found)",
        f"{by};\r\n    arc=none (no signatures found)",
        f"{by};\r\n"
        f"    dkim=pass (2048-bit rsa key sha256) header.d={domain} header.i=@{domain}\r\n"
        "      header.b=0EDw+VrK header.a=rsa-sha256 header.s=mail4 x-bits=2048;\r\n"
        "    dmarc=pass policy.published-domain-policy=reject\r\n"
        "      policy.applied-disposition=none policy.evaluated-disposition=none\r\n"
        "      (p=reject,d=none,d.eval=none) policy.policy-from=p\r\n"
        f"      header.from={domain};\r\n"
        "    iprev=pass smtp.remote-ip=94.100.181.251 (smtpng1.i.mail.ru);\r\n"
        f"    spf=pass smtp.mailfrom={local}@{domain} smtp.helo=smtpng1.i.mail.ru",
    ]


def icloud(domain: str = OWNER_DOMAIN, local: str = OWNER_LOCAL) -> list[str]:
    return [
        'bimi.icloud.com; bimi=skipped reason="insufficient dmarc"',
        f"dmarc.icloud.com; dmarc=pass header.from={domain}",
        f"dkim-verifier.icloud.com;\r\n"
        f"\tdkim=pass (2048-bit key) header.d={domain} header.i=@{domain} header.b=HYnahEVt",
        f"spf.icloud.com; spf=pass (spf.icloud.com: domain of {local}@{domain} designates 209.85.221.67 as"
        f" permitted sender) smtp.mailfrom={local}@{domain}",
    ]


def outlook(domain: str = OWNER_DOMAIN) -> list[str]:
    return [
        "spf=pass (sender IP is 94.100.181.251)\r\n"
        f" smtp.mailfrom={domain}; dkim=pass (signature was verified)\r\n"
        f" header.d={domain};dmarc=pass action=none header.from={domain};compauth=pass\r\n"
        " reason=100",
    ]


# EMAIL_AUTHSERV_ID for each, as README's "Connect email" gives it
AUTHSERV_IDS = {
    "gmail": "mx.google.com",
    "fastmail": "*.messagingengine.com",
    "icloud": "*.icloud.com",
    "outlook": "(none)",
}
