"""OAuth2 mail (XOAUTH2): the inbox logs in to a real IMAP server (pymap with XOAUTH2) and the
outbox to a real SMTP server (aiosmtpd with an XOAUTH2 handler) with access tokens that a real
HTTP token endpoint hands out for the refresh token (RFC 6749 §6). Neither server takes a
password here, so mail in or out at all means XOAUTH2 worked."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.contracts.channels import OutboundEmail
from tests.pollers import mails
from tests.pollers.conftest import Rig
from tests.pollers.outbox_fixtures import OutboxRig, outbox_fixture, twilio_fixture  # noqa: F401
from tests.pollers.smtp_servers import StrictSmtp
from tests.support.imap_server import ImapServer
from tests.support.oauth_server import OAuthServer

pytestmark = pytest.mark.integration

MAILBOX = "delegate@example.com"  # the account the tokens are for


@pytest.fixture
def auth(request: pytest.FixtureRequest) -> Iterator[OAuthServer]:
    options = getattr(request, "param", {})
    server = OAuthServer(MAILBOX, **options).start()
    yield server
    server.stop()


@pytest.fixture
def imap(tmp_path: Path, auth: OAuthServer) -> Iterator[ImapServer]:
    # replaces conftest's: the same pymap, with XOAUTH2 checked at ``auth``
    server = ImapServer(tmp_path / "logs" / "pymap.log", introspect_url=auth.introspect_url, user=MAILBOX).launch()
    yield server
    server.stop()


@pytest.fixture
def smtp(auth: OAuthServer) -> Iterator[StrictSmtp]:
    # replaces outbox_fixtures': XOAUTH2 only, AUTH required
    server = StrictSmtp(oauth=auth).start()
    yield server
    server.stop()


def _imap_oauth(auth: OAuthServer) -> dict[str, str]:
    """The inbox with one MAIL_OAUTH2_* set and no password."""
    return {
        "imap_user": MAILBOX, "imap_password": "", "mail_oauth2_client_id": auth.client_id,
        "mail_oauth2_client_secret": auth.client_secret, "mail_oauth2_refresh_token": auth.refresh_token,
        "mail_oauth2_token_url": auth.token_url,
    }


def _smtp_oauth(auth: OAuthServer) -> dict[str, str]:
    """The outbox with SMTP_OAUTH2_* and no password."""
    return {
        "smtp_user": MAILBOX, "smtp_password": "", "smtp_oauth2_client_id": auth.client_id,
        "smtp_oauth2_client_secret": auth.client_secret, "smtp_oauth2_refresh_token": auth.refresh_token,
        "smtp_oauth2_token_url": auth.token_url,
    }


def _mail(text: str) -> OutboundEmail:
    return OutboundEmail(subject="Re: Dentist", text=text, in_reply_to="<m2@example.com>", parent_id="answer-1")


async def test_the_inbox_logs_in_with_xoauth2_and_a_rejected_token_is_refreshed(rig: Rig, auth: OAuthServer) -> None:
    await rig.start_inbox(**_imap_oauth(auth))
    rig.imap.append(mails.plain("first, over XOAUTH2", message_id="<o1@example.com>"))
    await rig.wait_inputs(1)
    (first,) = auth.refreshes
    assert (first["grant_type"], first["refresh_token"], first["client_id"]) == (
        "refresh_token", auth.refresh_token, auth.client_id)

    # the provider revokes the token early; the reconnecting inbox is refused, refreshes, logs in
    auth.revoke_access_tokens()
    rig.imap.restart()
    rig.imap.append(mails.plain("second, after the refresh", message_id="<o2@example.com>"))
    inputs = await rig.wait_inputs(2, timeout=40)
    assert [i["text"] for i in inputs] == ["first, over XOAUTH2", "second, after the refresh"]
    assert len(auth.refreshes) == 2
    # one login with the first token, one refused with it, one with the second
    assert auth.introspections == 3


@pytest.mark.parametrize("auth", [{"expires_in": 30}], indirect=True)
async def test_an_expired_token_is_refreshed_before_the_login(rig: Rig, auth: OAuthServer) -> None:
    # 30 s of life is inside the client's 60 s leeway: each new login needs a fresh token
    await rig.start_inbox(**_imap_oauth(auth))
    rig.imap.append(mails.plain("one", message_id="<e1@example.com>"))
    await rig.wait_inputs(1)
    rig.imap.restart()
    rig.imap.append(mails.plain("two", message_id="<e2@example.com>"))
    await rig.wait_inputs(2, timeout=40)
    assert len(auth.refreshes) == 2
    assert auth.introspections == 2  # no login was tried with the old token


async def test_the_outbox_sends_over_xoauth2_and_a_rejected_token_is_refreshed(
    outbox: OutboxRig, auth: OAuthServer, smtp: StrictSmtp
) -> None:
    await outbox.start(**_smtp_oauth(auth))
    first = _mail("Booked for Tuesday.")
    await outbox.send(first)
    assert (await outbox.outcome(first.id)).payload["status"] == "sent"
    assert len(auth.refreshes) == 1 and set(smtp.auth_attempts) == {True}  # the start's probe logs in too

    auth.revoke_access_tokens()
    before = len(smtp.auth_attempts)
    second = _mail("Moved to Wednesday.")
    await outbox.send(second)
    assert (await outbox.outcome(second.id)).payload["status"] == "sent"
    assert await outbox.statuses(second.id) == ["sending", "sent"]  # refreshed inside the one attempt
    assert smtp.auth_attempts[before:] == [False, True] and len(auth.refreshes) == 2
    sent = [m.message["Message-ID"] for m in smtp.messages]
    assert sent == [f"<{first.id}@mail.example.test>", f"<{second.id}@mail.example.test>"]


async def test_a_refused_refresh_token_fails_the_mail_with_the_reason(
    outbox: OutboxRig, auth: OAuthServer, smtp: StrictSmtp
) -> None:
    auth.revoke_refresh_tokens()
    await outbox.start(**_smtp_oauth(auth))
    mail = _mail("Booked.")
    await outbox.send(mail)
    failed = await outbox.outcome(mail.id)
    assert failed.payload["status"] == "failed"
    assert "invalid_grant" in failed.payload["error"] and "new refresh token" in failed.payload["error"]
    assert set(auth.refused) == {"invalid_grant"} and smtp.messages == []  # the probe at start asked too


@pytest.mark.parametrize("auth", [{"rotate": True}], indirect=True)
async def test_a_rotated_refresh_token_is_kept_for_the_next_process(
    outbox: OutboxRig, auth: OAuthServer, smtp: StrictSmtp
) -> None:
    # the sender in a process of its own: the second process knows only what the first kept
    values = _smtp_oauth(auth)
    runner = outbox.start_runner(**values)
    first = _mail("one")
    await outbox.send(first)
    assert (await outbox.outcome(first.id, timeout=40)).payload["status"] == "sent"
    runner.stop()

    auth.revoke_access_tokens()  # the new process must refresh, with the rotated token
    outbox.start_runner(**values)
    second = _mail("two")
    await outbox.send(second)
    assert (await outbox.outcome(second.id, timeout=40)).payload["status"] == "sent"
    configured, rotated = (r["refresh_token"] for r in auth.refreshes)
    assert configured == auth.refresh_token and rotated != configured
    kept = list((outbox.system.runtime / "mail-oauth2").iterdir())
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o077 == 0
