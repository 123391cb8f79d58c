"""Request bodies read with a size limit, before and while reading (never buffered past it)."""

from fastapi import Request

from .errors import ApiError


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
