"""Assembles the FastAPI app: the Responses API, the Realtime WebSocket
(`/v1/realtime`) and the control API, all sharing one state."""

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from delegate.openai_standin import control, http_responses, openapi, realtime_route
from delegate.openai_standin.errors import ApiError, invalid_request, invalid_url
from delegate.openai_standin.recorder import RecordingMiddleware
from delegate.openai_standin.settings import Settings
from delegate.openai_standin.state import StandinState

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> FastAPI:
    state = StandinState.build(settings)
    openapi.spec()  # read OpenAI's schemas with the app; each validator is compiled on its first use
    app = FastAPI(title="Delegate OpenAI stand-in", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.standin = state
    app.include_router(http_responses.router)
    app.include_router(realtime_route.router)
    app.include_router(control.router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(RecordingMiddleware, request_log=state.requests)
    return app


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    if exc.status >= 500:
        log.info("answering %s %s with scripted %d", request.method, request.url.path, exc.status)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    # Unknown routes and methods: OpenAI answers "Invalid URL (METHOD /path)" with 404.
    assert isinstance(exc, StarletteHTTPException)
    error = invalid_url(request.method, request.url.path)
    if exc.status_code not in (404, 405):
        error = ApiError(exc.status_code, str(exc.detail), "invalid_request_error")
    return JSONResponse(error.body(), status_code=error.status)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    param = str(first.get("loc", ["", ""])[-1])
    error = invalid_request(f"Invalid '{param}': {first.get('msg', 'invalid value')}.", param=param)
    return JSONResponse(error.body(), status_code=400)
