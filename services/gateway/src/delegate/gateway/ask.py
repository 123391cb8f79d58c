"""An HTTP route asking a service over the bus: its silence and its refusals as HTTP errors."""

from collections.abc import Mapping

from delegate.contracts.topics import Query, Rep, Req
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .errors import ApiError

# What a service's refusal codes mean at the HTTP edge; any other code is its failure (502).
REFUSALS: Mapping[str, int] = {"bad_request": 400, "not_found": 404, "conflict": 409, "unavailable": 503}


async def ask(
    bus: Bus, query: Query[Req, Rep], req: Req, *, silent: tuple[str, str], status: Mapping[str, int] = REFUSALS
) -> Rep:
    """``query``'s answer. No answer is a 503 with ``silent`` (its code and sentence); a refusal is
    the status ``status`` gives its code, else 502."""
    try:
        return await bus.request(query, req)
    except BusUnavailable as exc:
        raise ApiError(503, *silent) from exc
    except RemoteError as exc:
        raise ApiError(status.get(exc.code, 502), exc.code, exc.message) from exc
