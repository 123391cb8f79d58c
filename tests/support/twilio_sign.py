"""Sign a webhook the way Twilio does (twilio-email-wire.md §3.1), with the stdlib only, so the
tests check the gateway's RequestValidator against an independent implementation."""

import base64
import hashlib
import hmac
from collections.abc import Mapping


def twilio_signature(token: str, url: str, params: Mapping[str, str]) -> str:
    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()
