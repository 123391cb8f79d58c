"""OpenAI's HTTP error envelope and the errors the stand-in raises.

Every failure leaves the server as `{"error": {"message", "type", "param", "code"}}`
with the status code OpenAI would use, so the SDK raises the same exception class.
"""

from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from delegate.openai_standin.refusals import Refusal, json_type

# Default (type, code, message) per status, matching the real API's common replies.
_DEFAULTS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
    ),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    404: ("invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."),
    409: ("invalid_request_error", None, "Conflict."),
    422: ("invalid_request_error", None, "Unprocessable entity."),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again shortly.",
    ),
    500: (
        "server_error",
        "server_error",
        "The server had an error while processing your request. Sorry about that!",
    ),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", "server_is_overloaded", "The server is overloaded or not ready yet."),
    504: ("server_error", None, "Gateway timeout."),
}


# A plain record; alike in shape to other small dataclasses (contracts.people.Commitment), nothing to share.
@dataclass
class ApiError(Exception):
    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def api_error(
    status: int,
    message: str | None = None,
    *,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ApiError:
    """An error with OpenAI's default type/code/message for `status` filled in."""
    default_type, default_code, default_message = _DEFAULTS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, "Error.")
    )
    return ApiError(
        status=status,
        message=message or default_message,
        type=type or default_type,
        param=param,
        code=code if code is not None else default_code,
        headers=dict(headers or {}),
    )


def invalid_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param=param, code=code)


def missing_parameter(param: str) -> ApiError:
    return invalid_request(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")


def invalid_type(param: str, expected: str, got: object) -> ApiError:
    return invalid_request(
        f"Invalid type for '{param}': expected {expected}, but got {json_type(got)} instead.",
        param=param,
        code="invalid_type",
    )


def refused(refusal: Refusal) -> ApiError:
    """The API's 400 for a request its schemas refuse (`strict.check_body`)."""
    return invalid_request(refusal.message, param=refusal.param, code=refusal.code)


def response_not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", "invalid_request_error")


def previous_response_not_found(response_id: str) -> ApiError:
    return invalid_request(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


def missing_api_key() -> ApiError:
    return ApiError(
        401,
        "You didn't provide an API key. You need to provide your API key in an Authorization header "
        "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank "
        "username) if you're accessing the API from your browser and are prompted for a username and "
        "password. You can obtain an API key from https://platform.openai.com/account/api-keys.",
        "invalid_request_error",
    )


def invalid_url(method: str, path: str) -> ApiError:
    return ApiError(404, f"Invalid URL ({method} {path})", "invalid_request_error")


def invalid_json() -> ApiError:
    return invalid_request(
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
        "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
        "valid JSON.)"
    )


def error_response(error: ApiError, request_id: str | None = None) -> JSONResponse:
    headers = dict(error.headers)
    if request_id:
        headers["x-request-id"] = request_id
    return JSONResponse(error.body(), status_code=error.status, headers=headers)
