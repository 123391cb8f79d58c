"""8-bit mail is declared (RFC 6152): ``BODY=8BITMIME`` to a server that offers 8BITMIME, and
quoted-printable to one that does not, against a real SMTP server (aiosmtpd) that refuses
undeclared 8-bit data."""

from collections.abc import Iterator

import pytest

from delegate.contracts.channels import OutboundEmail
from tests.pollers.outbox_fixtures import OutboxRig, outbox_fixture, twilio_fixture  # noqa: F401
from tests.pollers.smtp_servers import StrictSmtp

pytestmark = pytest.mark.integration

TEXT = "Grüße aus Köln: der Termin ist am Dienstag."


@pytest.fixture
def smtp(request: pytest.FixtureRequest) -> Iterator[StrictSmtp]:
    server = StrictSmtp(eight_bit_mime=getattr(request, "param", True)).start()
    yield server
    server.stop()


def _mail(text: str) -> OutboundEmail:
    return OutboundEmail(subject="Re: Termin", text=text, in_reply_to="<m1@example.com>", parent_id="answer-8")


async def test_8bit_text_is_sent_with_body_8bitmime(outbox: OutboxRig, smtp: StrictSmtp) -> None:
    await outbox.start()
    eight, ascii_only = _mail(TEXT), _mail("Booked for Tuesday.")
    for mail in (eight, ascii_only):
        await outbox.send(mail)
        assert (await outbox.outcome(mail.id)).payload["status"] == "sent"
    assert smtp.mail_options == [["BODY=8BITMIME"], []]
    plain = smtp.messages[0].message.get_body(("plain",))
    assert plain is not None and plain["Content-Transfer-Encoding"] == "8bit"
    assert plain.get_content().rstrip("\n") == TEXT


@pytest.mark.parametrize("smtp", [False], indirect=True)
async def test_a_server_without_8bitmime_gets_quoted_printable(outbox: OutboxRig, smtp: StrictSmtp) -> None:
    await outbox.start()
    mail = _mail(TEXT)
    await outbox.send(mail)
    assert (await outbox.outcome(mail.id)).payload["status"] == "sent"
    (captured,) = smtp.messages
    assert smtp.mail_options == [[]] and max(captured.data) < 128
    message = captured.message
    for subtype in ("plain", "html"):
        part = message.get_body((subtype,))
        assert part is not None and part["Content-Transfer-Encoding"] == "quoted-printable"
    plain = message.get_body(("plain",))
    assert plain is not None and plain.get_content().rstrip("\n") == TEXT
