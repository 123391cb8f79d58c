"""``POST /api/signals``: the owner's own scripts (cron, Home Assistant, a CI job) raise a signal.

The body is a typed signal without its envelope's server-side fields: the gateway sets
``source`` ("api"), the id and the time, validates the whole signal with the contracts' models
(``SIGNAL_ADAPTER``) and publishes it durably on the INNER stream with ``Nats-Msg-Id`` = the
signal id. The attention broker then weighs it like any other signal.

An ``Idempotency-Key`` header makes the id a function of the key, so a script that retries a
POST (a timeout, a lost answer) raises its signal once: JetStream drops the repeat inside the
stream's duplicate window, and the ledger stores one ``inner.signal`` event per id after that.
"""

import hashlib
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError

from delegate.contracts import topics
from delegate.contracts.ids import utcnow
from delegate.contracts.signals import OWNER_SIGNAL_KINDS, SIGNAL_ADAPTER, AnySignal
from delegate.runtime.bus import BusUnavailable

from .bodies import read_json
from .deps import ContextDep, require_owner
from .errors import ApiError
from .inputs import PUBLISH_DEADLINE_S

log = logging.getLogger(__name__)

SOURCE = "api"
# The envelope fields only the gateway sets: who raised it, under which id, and when.
SERVER_FIELDS = ("id", "ts", "source")
MAX_IDEMPOTENCY_KEY = 200

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])


def signal_id(idempotency_key: str | None) -> str | None:
    """The id a retried POST shares with its first attempt; None: a fresh id per request."""
    if idempotency_key is None:
        return None
    key = idempotency_key.strip()
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise ApiError(400, "bad_request", f"Idempotency-Key: must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    # Hashed: the key may be anything a script likes; the id must fit the signal's 64 characters.
    return "api-" + hashlib.sha256(key.encode()).hexdigest()[:40]


def _where(loc: tuple[int | str, ...], kind: str) -> str:
    # A discriminated union puts the tag first ("script.payload.text"); the caller wrote "payload.text".
    parts = list(loc[1:] if loc and loc[0] == kind else loc)
    return ".".join(str(p) for p in parts) or "body"


def parse_signal(data: Any, *, id_: str | None) -> AnySignal:
    """The body as a typed signal, or the first thing wrong with it (400 shape, 422 content)."""
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    forbidden = [name for name in SERVER_FIELDS if name in data]
    if forbidden:
        leave_out = ", ".join(SERVER_FIELDS)
        message = f"{forbidden[0]}: set by Delegate, not by the caller (leave out {leave_out})"
        raise ApiError(422, "forbidden_field", message)
    kind = data.get("kind")
    if kind not in OWNER_SIGNAL_KINDS:
        allowed = ", ".join(OWNER_SIGNAL_KINDS)
        what = "kind: required" if kind is None else f"kind: {str(kind)[:100]!r} is not a signal you may raise"
        raise ApiError(422, "unknown_kind", f"{what}; allowed: {allowed}", allowed=list(OWNER_SIGNAL_KINDS))
    fields: dict[str, Any] = {**data, "source": SOURCE}
    if id_ is not None:
        fields["id"] = id_
    try:
        signal = SIGNAL_ADAPTER.validate_python(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = _where(tuple(first.get("loc", ())), kind)
        raise ApiError(422, "bad_signal", f"{where}: {first.get('msg', 'invalid')}") from exc
    if signal.expires_at is not None and signal.expires_at <= utcnow():
        raise ApiError(422, "expired", "expires_at: already in the past")
    return signal


@router.post("/signals", status_code=202)
async def post_signal(request: Request, ctx: ContextDep) -> dict[str, Any]:
    signal = parse_signal(await read_json(request), id_=signal_id(request.headers.get("idempotency-key")))
    bus = ctx.require_bus()
    try:
        ack = await bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id, deadline=PUBLISH_DEADLINE_S)
    except BusUnavailable as exc:
        # A publish is stored whole or not at all; retrying with the same Idempotency-Key is safe.
        raise ApiError(503, "bus_unavailable", "the signal could not be stored; send it again") from exc
    duplicate = bool(ack.duplicate)  # None on a first publish
    log.info("signal %s (%s) raised over the API%s", signal.id, signal.kind, " (a repeat)" if duplicate else "")
    return {"id": signal.id, "duplicate": duplicate}
