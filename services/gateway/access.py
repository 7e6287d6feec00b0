"""What every request must pass before a handler sees it: an API key when keys are configured, and a body
no larger than the configured limit."""
import hmac
from collections.abc import Callable

from fastapi import HTTPException, Security, status
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.runtime import Runtime

API_KEY_HEADER = "X-API-Key"
_api_key = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                        description="required when the server sets KFORGE_API_KEYS")


def api_key_check(get_runtime: Callable[[], Runtime]):
    """A dependency refusing a missing or unknown key with 401, when the server has keys configured."""

    def check(key: str | None = Security(_api_key)) -> None:
        keys = get_runtime().settings.api_keys
        if not keys:
            return
        # compare_digest: how long the comparison takes says nothing about how much of a key matched
        if key is None or not any(hmac.compare_digest(key.encode(), k.encode()) for k in keys):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                                f"{'an unknown' if key else 'no'} API key: send one of the server's keys "
                                f"in the {API_KEY_HEADER} header",
                                headers={"WWW-Authenticate": API_KEY_HEADER})

    return check


class BodyLimit:
    """Refuses request bodies over `max_bytes` with 413: at once when Content-Length says so, otherwise
    as soon as the bytes received pass it (a chunked upload), so no handler ever buffers more."""

    def __init__(self, app: ASGIApp, max_bytes: Callable[[], int]):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.max_bytes()
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _too_large(limit)(scope, receive, send)
        received = 0

        async def limited() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, _too_large_detail(limit))
            return message

        await self.app(scope, limited, send)


def _too_large_detail(limit: int) -> str:
    return f"the request body is over {limit} bytes, this server's limit (KFORGE_MAX_REQUEST_BYTES)"


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse({"detail": _too_large_detail(limit)}, status_code=status.HTTP_413_CONTENT_TOO_LARGE)
