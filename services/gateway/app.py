"""HTTP gateway: submit jobs, read them and their events. Submitting returns 202: the work is asynchronous.
A job belongs to the tenant of the API key that submitted it: other keys get 404 for it, as for a job that
does not exist, and never see it in lists or reports across jobs.

create_app builds the app from its parts: the checks every request passes (access.py), the error handlers
(problems.py) and a router per resource (routes/), whose dependencies are declared once in deps.py."""
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from services.gateway.access import BodyLimit, HostCheck, JsonBodies
from services.gateway.problems import install_error_handlers
from services.gateway.reads import Reads
from services.gateway.routes import api_router, metrics, pages
from shared.application.runtime import Runtime


@asynccontextmanager
async def _lifespan(app: FastAPI):
    app.state.get_runtime()  # settings that cannot be read (KFORGE_API_KEYS=",") stop the server before it listens
    yield


def create_app(get_runtime: Callable[[], Runtime]) -> FastAPI:
    """The gateway on the runtime `get_runtime` gives, asked on every request (never here: the runtime is built
    lazily, and a test installs its own)."""
    # /docs serves Swagger UI from files installed with the package, not from a CDN: it works where the server
    # has no internet, and the browser asks nothing of anywhere else. ReDoc is left out: it fetches its logo.
    app = FastAPIOffline(
        title="kforge", version="0.1.0", lifespan=_lifespan, redoc_url=None,
        description="Submit a CUDA kernel; get back a faster, proven-correct version with its history.")
    app.state.get_runtime = get_runtime  # what deps.get_runtime hands the routes
    app.state.reads = Reads(get_runtime)  # this app's job index and live streams (deps.get_reads)
    # The middleware added last runs first: a foreign Host is refused before anything else is looked at.
    app.add_middleware(BodyLimit, max_bytes=lambda: get_runtime().settings.max_request_bytes)
    app.add_middleware(JsonBodies)
    app.add_middleware(HostCheck, allowed=lambda: get_runtime().settings.allowed_hosts)
    install_error_handlers(app)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=pages.WEB), name="static")
    app.include_router(metrics.router)
    app.include_router(api_router)
    return app
