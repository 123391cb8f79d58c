"""Response headers every answer carries, and the checks a cookie-authenticated write must pass.

Headers are set here, as HTTP headers, because a ``<meta>`` policy cannot forbid framing
(``frame-ancestors`` is ignored there) and does not cover JSON or error responses.
"""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The client is plain ES modules and one stylesheet from this origin; /chat is same-origin
# ('self' covers ws: and wss: to this host). Nothing may frame the app (clickjacking).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),  # for browsers that predate frame-ancestors
)
NO_STORE = (b"cache-control", b"no-store")
# An SVG opened on its own is a document that could run script: whatever serves one (a run's
# thoughtflow picture) gets a policy that lets it draw with its inline styles and embedded
# fonts and images, and do nothing else: no script, no fetch, no navigation.
SVG_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"
SVG_TYPE = b"image/svg+xml"


def header_pairs(path: str, content_type: bytes | None = None) -> list[tuple[bytes, bytes]]:
    """The headers for a response to ``path``: API answers are never cached (they are private)."""
    pairs = list(SECURITY_HEADERS)
    if content_type is not None and content_type.split(b";", 1)[0].strip().lower() == SVG_TYPE:
        pairs = [(n, SVG_POLICY.encode() if n == b"content-security-policy" else v) for n, v in pairs]
    if path == "/api" or path.startswith("/api/"):
        pairs.append(NO_STORE)
    return pairs


class SecurityHeaders:
    """ASGI middleware: adds the headers to every HTTP response, replacing any of the same name
    (the policy by what the response is: an SVG gets SVG_POLICY, whoever made it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                content_type = next((v for n, v in headers if n.lower() == b"content-type"), None)
                extra = header_pairs(path, content_type)
                names = {name for name, _ in extra}
                kept = [(n, v) for n, v in headers if n.lower() not in names]
                message = {**message, "headers": kept + extra}
            await send(message)

        await self.app(scope, receive, send_with_headers)
