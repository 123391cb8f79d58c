"""A Twilio webhook's body, read within a size limit and accepted only with a valid signature.

The signed URL is PUBLIC_BASE_URL + the path + the query string exactly as received: behind a
TLS-terminating proxy the gateway sees http://127.0.0.1:8081/..., but Twilio signed the public
https URL, and the Host header or the request's scheme would rebuild the wrong one.

Twilio signs with the account's Auth Token (HMAC-SHA1) unless a Webhook Rule matches the URL:
then it signs with that rule's SharedKey and algorithm (HMAC-SHA256) and says so in
``X-Twilio-Webhooks-Signature-Settings: key=<id>,algorithm=HMAC_SHA256``. The signed string is
the same either way; twilio-python's RequestValidator computes both.
"""

import logging
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from twilio.request_validator import HMAC_SHA1, RequestValidator, get_signature_algorithm

from .bodies import read_body
from .errors import ApiError
from .settings import Settings

log = logging.getLogger(__name__)

MAX_WEBHOOK_BYTES = 64 * 1024  # Twilio's SMS webhooks are ~1-2 KB (Body is at most 1,600 chars)
MAX_FIELDS = 200  # ~25 standard fields, plus two per media item (at most 10)
FORM_TYPE = "application/x-www-form-urlencoded"
SIGNATURE_HEADER = "x-twilio-signature"
SIGNATURE_SETTINGS_HEADER = "x-twilio-webhooks-signature-settings"


def signed_url(settings: Settings, request: Request) -> str:
    """The URL Twilio requested, as it was configured there (public scheme, host and prefix)."""
    raw_path = request.scope.get("raw_path")
    path = raw_path.decode("latin-1") if isinstance(raw_path, bytes) else request.url.path
    query = request.scope.get("query_string", b"").decode("latin-1")
    return settings.public_base_url.rstrip("/") + path + (f"?{query}" if query else "")


def parse_form(body: bytes) -> FormData:
    """Every field, blank ones included: Twilio signs ``ToCity=`` like any other."""
    try:
        # latin-1 maps bytes 1:1, so the percent-decoding below is where bad UTF-8 is caught
        pairs = parse_qsl(
            body.decode("latin-1"), keep_blank_values=True, encoding="utf-8", errors="strict",
            max_num_fields=MAX_FIELDS,
        )
    except UnicodeDecodeError as exc:
        raise ApiError(400, "bad_request", "the form is not valid UTF-8") from exc
    except ValueError as exc:  # over max_num_fields
        raise ApiError(400, "bad_request", f"the form has more than {MAX_FIELDS} fields") from exc
    fields: list[tuple[str, str | UploadFile]] = list(pairs)
    return FormData(fields)


async def signed_form(request: Request, settings: Settings) -> FormData:
    """The webhook's form fields, or an ``ApiError``: 413 too big, 415 not a form, 403 not from Twilio."""
    token = settings.twilio_auth_token
    if token is None:
        raise ApiError(503, "sms_disabled", "SMS is off: TWILIO_AUTH_TOKEN is not set")
    content_type = request.headers.get("content-type", "")
    body = await read_body(request, MAX_WEBHOOK_BYTES)
    if body and content_type.split(";", 1)[0].strip().lower() != FORM_TYPE:
        raise ApiError(415, "unsupported_media_type", f"send the body as {FORM_TYPE}")
    form = parse_form(body)
    signature = request.headers.get(SIGNATURE_HEADER)
    if not signature:
        raise ApiError(403, "bad_signature", "the X-Twilio-Signature header is missing")
    url = signed_url(settings, request)
    if not signature_valid(settings, request.headers, [url], form):
        # The URL is what a misconfigured PUBLIC_BASE_URL gets wrong: the log says which one was checked.
        log.warning("refused a Twilio webhook with a bad signature for %s", url)
        raise ApiError(403, "bad_signature", "the X-Twilio-Signature does not match this request")
    return form


def signature_valid(
    settings: Settings, headers: Mapping[str, str], urls: Iterable[str], params: Mapping[str, object]
) -> bool:
    """Whether ``X-Twilio-Signature`` signs one of ``urls`` with ``params``: with the Auth Token
    (HMAC-SHA1), or, when the request names signature settings, with one of the SharedKey
    secrets in TWILIO_WEBHOOK_SHARED_KEYS and the algorithm named (HMAC-SHA256)."""
    signature = headers.get(SIGNATURE_HEADER)
    if not signature:
        return False
    named = headers.get(SIGNATURE_SETTINGS_HEADER)
    if named:
        secrets, algorithm = settings.twilio_webhook_shared_key_secrets, get_signature_algorithm(named)
        if not secrets:
            log.warning("a Twilio webhook signed with a SharedKey (%s), but TWILIO_WEBHOOK_SHARED_KEYS is unset", named)
    else:
        token = settings.twilio_auth_token
        secrets, algorithm = ([token.get_secret_value()] if token else []), HMAC_SHA1
    # An unsupported algorithm fails validation (the validator logs which).
    return any(
        RequestValidator(secret).validate(url, params, signature, algorithm) for secret in secrets for url in urls
    )
