"""Web Push subscriptions (issue #31): ``GET /api/push/key``, ``POST /api/push/subscriptions``,
``DELETE /api/push/subscriptions/{id}``.

A subscription is one browser's (its id derives from the push endpoint, so subscribing again
is idempotent); it remembers the sign-in session that made it, and signing that session out
deletes it (``end_session``). The pollers send to what is stored here.
"""

import hashlib
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import ValidationError

from delegate.contracts.push import PushSubscription, SubscriptionIn, subscription_id
from delegate.runtime.webpush import (
    EndpointRefused,
    PushStore,
    SubscriptionsUnavailable,
    check_endpoint_url,
    load_vapid,
    public_key,
)

from .auth import SESSION_COOKIE
from .bodies import read_json
from .deps import ContextDep, SettingsDep, require_json_body, require_owner
from .errors import ApiError

router = APIRouter(prefix="/api/push", dependencies=[Depends(require_owner)])

MAX_BODY = 4096  # a real subscription's JSON is under 1 KB
MAX_SUBSCRIPTIONS = 50  # browsers of one owner; more is a script gone wrong


def session_tag(cookie: str) -> str:
    """Names a sign-in session without being its cookie (the bucket is readable by the pollers)."""
    return hashlib.sha256(b"delegate-push:" + cookie.encode()).hexdigest()


def _unavailable(exc: Exception) -> ApiError:
    return ApiError(503, "bus_unavailable", f"push subscriptions need NATS, which is not answering: {exc}")


@router.get("/key")
async def vapid_key(settings: SettingsDep) -> dict[str, str]:
    """The VAPID public key a browser subscribes with (``applicationServerKey``)."""
    configured = settings.push_vapid_private_key
    vapid = load_vapid(settings.runtime_data_dir, configured.get_secret_value() if configured else None)
    return {"key": public_key(vapid)}


@router.post("/subscriptions", status_code=201)
async def subscribe(request: Request, ctx: ContextDep) -> dict[str, Any]:
    """201 ``{"id"}``; the same browser subscribing again gets the same id (and 200 is not
    worth distinguishing: the record is replaced with the fresh keys)."""
    require_json_body(request.method, request.headers)
    data = await read_json(request, limit=MAX_BODY)
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", "the body must be a PushSubscription's JSON object")
    try:
        body = SubscriptionIn.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(422, "bad_subscription", f"{where}: {first['msg']}") from exc
    try:
        # its form only: names are resolved and checked by the sender before every push (a
        # name may be pointed elsewhere later, and this machine may be offline now)
        check_endpoint_url(body.endpoint, ctx.settings.push_allow_private_endpoints)
    except EndpointRefused as exc:
        raise ApiError(422, "endpoint_refused", f"not a push service endpoint: {exc}") from exc
    store = _store(ctx)
    sub_id = subscription_id(body.endpoint)
    cookie = request.cookies.get(SESSION_COOKIE)
    record = PushSubscription(
        id=sub_id, endpoint=body.endpoint, keys=body.keys, created_at=datetime.now(UTC),
        session=session_tag(cookie) if cookie else None,
    )
    try:
        known = await store.all()
        if len(known) >= MAX_SUBSCRIPTIONS and all(sub.id != sub_id for sub in known):
            raise ApiError(409, "too_many", f"at most {MAX_SUBSCRIPTIONS} push subscriptions; remove one first")
        await store.put(record)
    except SubscriptionsUnavailable as exc:
        raise _unavailable(exc) from exc
    return {"id": sub_id}


@router.delete("/subscriptions/{sub_id}", status_code=204)
async def unsubscribe(sub_id: str, ctx: ContextDep) -> Response:
    """204 whether or not it existed: revoking twice is not an error."""
    if len(sub_id) != 32 or not all(c in "0123456789abcdef" for c in sub_id):
        raise ApiError(404, "not_found", "no such push subscription")
    try:
        await _store(ctx).delete(sub_id)
    except SubscriptionsUnavailable as exc:
        raise _unavailable(exc) from exc
    return Response(status_code=204)


def _store(ctx: Any) -> PushStore:
    store: PushStore = ctx.push
    return store


async def end_session(store: PushStore, cookie: str | None, *, everywhere: bool = False) -> None:
    """Sign-out: this session's subscriptions die with it (all of them, signing out everywhere)."""
    if everywhere:
        await store.delete_all()
    elif cookie:
        await store.delete_session(session_tag(cookie))
