"""What every request must pass before a handler sees it: a Host the server answers to, a JSON body on
anything that changes state, an API key when keys are configured, and a body no larger than the limit.
The key also says who the caller is: a job belongs to the tenant of the key that submitted it."""
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import HTTPException, status
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.adapters.settings import Settings
from shared.domain.events import LOCAL_TENANT
from shared.domain.projections import JobView

API_KEY_HEADER = "X-API-Key"
api_key = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                       description="required when the server sets KFORGE_API_KEYS")  # the scheme /docs shows


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the tenant whose jobs it may see, and whether it sees every tenant's."""

    tenant: str
    keyed: bool  # it sent a key: per-key limits apply (an open gateway has only its one local tenant)
    admin: bool = False

    def sees(self, job: JobView) -> bool:
        return self.admin or job.tenant == self.tenant


def tenant_of(key: str) -> str:
    """The tenant id recorded for a key: a hash, so the store never holds a key, and the same key always
    maps to the same tenant, in every gateway process and across restarts."""
    return "key-" + hashlib.sha256(b"kforge-tenant:" + key.encode()).hexdigest()[:16]


def identify(settings: Settings, key: str | None) -> Caller:
    """The Caller a request's key names; with keys configured, a missing or unknown key is refused with 401.
    Without keys the gateway is open and every caller is the local tenant, as the CLI is."""
    if not settings.api_keys and not settings.admin_api_keys:
        return Caller(tenant=LOCAL_TENANT, keyed=False)
    # compare_digest: how long the comparison takes says nothing about how much of a key matched
    if key is not None and _listed(key, settings.admin_api_keys):
        return Caller(tenant=tenant_of(key), keyed=True, admin=True)
    if key is not None and _listed(key, settings.api_keys):
        return Caller(tenant=tenant_of(key), keyed=True)
    raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                        f"{'an unknown' if key else 'no'} API key: send one of the server's keys "
                        f"in the {API_KEY_HEADER} header",
                        headers={"WWW-Authenticate": API_KEY_HEADER})


def _listed(key: str, keys: list[str]) -> bool:
    return any(hmac.compare_digest(key.encode(), k.encode()) for k in keys)


class HostCheck:
    """Answers only requests whose Host header names an allowed host (any port): a web page on another
    site whose name an attacker points at this server's address (DNS rebinding) gets 400, not the API."""

    def __init__(self, app: ASGIApp, allowed: Callable[[], list[str]]):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        allowed = self.allowed()
        host = _host_name(Headers(scope=scope).get("host", ""))
        if "*" in allowed or host in (a.lower() for a in allowed):
            return await self.app(scope, receive, send)
        await _problem(status.HTTP_400_BAD_REQUEST,
                       "this server does not answer to the host named in the Host header: the operator lists the "
                       "names it answers to in KFORGE_ALLOWED_HOSTS")(scope, receive, send)


def _host_name(header: str) -> str:
    """The Host header without its port: `[::1]:8000` is `[::1]`, `localhost:8000` is `localhost`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[:header.find("]") + 1]
    return header.partition(":")[0]


class JsonBodies:
    """Refuses a request that may change state (any method but GET, HEAD and OPTIONS) unless it says its
    body is JSON, with 415. A page on another site can send a form or text/plain without asking the
    browser's permission, but not JSON: so no such request, an empty cancel included, reaches a handler."""

    SAFE = frozenset({"GET", "HEAD", "OPTIONS"})

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in self.SAFE:
            return await self.app(scope, receive, send)
        media_type = Headers(scope=scope).get("content-type", "").partition(";")[0].strip().lower()
        if media_type == "application/json":
            return await self.app(scope, receive, send)
        await _problem(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                       f"{scope['method']} needs Content-Type: application/json (an empty body is fine), "
                       f"not {media_type or 'none'}")(scope, receive, send)


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
            return await _problem(status.HTTP_413_CONTENT_TOO_LARGE, _too_large_detail(limit))(scope, receive, send)
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


def _problem(status_code: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code)
