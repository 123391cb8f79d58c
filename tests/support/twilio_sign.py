"""Sign a webhook the way Twilio does (twilio-email-wire.md §3.1), with the stdlib only, so the
tests check the gateway's RequestValidator against an independent implementation.

``algorithm`` "sha256" is a Webhook Rule's SharedKey signature (HMAC-SHA256 over the same string,
``X-Twilio-Webhooks-Signature-Settings: key=<id>,algorithm=HMAC_SHA256`` alongside).
"""

import base64
import hmac
from collections.abc import Mapping


def twilio_signature(token: str, url: str, params: Mapping[str, str], algorithm: str = "sha1") -> str:
    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), algorithm).digest()).decode()
