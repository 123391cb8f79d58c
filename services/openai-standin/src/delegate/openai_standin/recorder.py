"""The request log behind `GET /_standin/requests`, and the outermost ASGI
middleware: it buffers and records every `/v1/*` request, stamps `x-request-id`
on every reply, and turns unexpected crashes into OpenAI's 500 envelope."""

import json
import logging
import time
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from delegate.openai_standin.errors import api_error
from delegate.openai_standin.ids import new_request_id

log = logging.getLogger(__name__)

Entry = dict[str, Any]


class RequestLog:
    def __init__(self) -> None:
        self._entries: list[Entry] = []

    def add(self, scope: Scope, body: bytes, request_id: str) -> Entry:
        entry: Entry = {
            "seq": len(self._entries),
            "request_id": request_id,
            "received_at": time.time(),
            "method": scope["method"],
            "path": scope["path"],
            "query": scope.get("query_string", b"").decode("latin-1"),
            "headers": _headers(scope),
            "body": _decode_body(body),
            "status": None,
        }
        self._entries.append(entry)
        return entry

    def entries(self) -> list[Entry]:
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()


class RecordingMiddleware:
    def __init__(self, app: ASGIApp, request_log: RequestLog) -> None:
        self.app = app
        self.request_log = request_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        body = await _read_body(receive)
        entry = self.request_log.add(scope, body, request_id) if scope["path"].startswith("/v1/") else None
        state["record"] = entry
        started = False
        unread = [body]

        async def replay() -> Message:
            if unread:
                return {"type": "http.request", "body": unread.pop(), "more_body": False}
            return await receive()  # later reads are disconnect checks

        async def stamped(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                MutableHeaders(scope=message).setdefault("x-request-id", request_id)
                if entry is not None:
                    entry["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, replay, stamped)
        except Exception:
            if started:
                raise  # mid-body: all we can do is drop the connection
            log.exception("unhandled error answering %s %s", scope["method"], scope["path"])
            error = api_error(500)
            await stamped({"type": "http.response.start", "status": 500, "headers": _json_headers()})
            await send({"type": "http.response.body", "body": json.dumps(error.body()).encode()})


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _decode_body(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body.decode("utf-8", errors="replace")


def _json_headers() -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json")]
