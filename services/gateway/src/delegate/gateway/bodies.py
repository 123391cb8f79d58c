"""Request bodies read with a size limit, before and while reading (never buffered past it), and
parsed as JSON within the contracts' bounds (depth, finite numbers)."""

import logging
from typing import Any

from fastapi import Request

from delegate.contracts.limits import MAX_JSON_BYTES, MAX_JSON_DEPTH, JsonRefused, JsonTooDeep, loads_bounded

from .errors import ApiError

log = logging.getLogger(__name__)

TOO_DEEP = f"the body is nested too deeply (at most {MAX_JSON_DEPTH} levels)"


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_big = int(declared) > limit
        except ValueError as exc:
            raise ApiError(400, "bad_request", "Content-Length is not a number") from exc
        if too_big:
            raise ApiError(413, "too_large", f"the body is over {limit} bytes")
    size = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "too_large", f"the body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(request: Request, limit: int = MAX_JSON_BYTES) -> Any:
    """The body as JSON, refusing anything over ``limit`` bytes before and while reading it, and
    what not every consumer behind the gateway could decode (``contracts.limits``): 400."""
    raw = await read_body(request, limit)
    try:
        return loads_bounded(raw)
    except JsonTooDeep as exc:
        # ~1,000 nested arrays fit in 2 KB: a client error, worth one line, not a traceback.
        log.info("refused a %s %s body nested too deeply", request.method, request.url.path)
        raise ApiError(400, "bad_json", TOO_DEEP) from exc
    except JsonRefused as exc:
        raise ApiError(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
    except ValueError as exc:  # also UnicodeDecodeError
        raise ApiError(400, "bad_json", "the body is not valid JSON") from exc
