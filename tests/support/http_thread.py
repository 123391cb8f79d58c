"""A stand-in's HTTP server: ``http.server``'s threading server on 127.0.0.1, a free port,
served from a daemon thread until ``stop``."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HttpThread:
    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self._server: ThreadingHTTPServer | None = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, name=name, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
