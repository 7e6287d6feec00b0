"""The gateway's dependencies, each declared once as an `Annotated` type that a route names in its signature:
the runtime, the Reads of this gateway, the caller (who the API key says it is) and a job the caller may see.

What they hand out is kept on the app by create_app: `app.state.get_runtime`, called on every request (the
runtime is built lazily, on first use), and `app.state.reads`, this app's job index and live streams."""
from typing import Annotated

from fastapi import Depends, Path, Request, Security

from services.gateway.access import Caller, api_key, identify
from services.gateway.reads import Reads
from shared.application.runtime import Runtime
from shared.domain.projections import JobView


def get_runtime(request: Request) -> Runtime:
    return request.app.state.get_runtime()


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_reads(request: Request) -> Reads:
    return request.app.state.reads


ReadsDep = Annotated[Reads, Depends(get_reads)]


def get_caller(rt: RuntimeDep, key: Annotated[str | None, Security(api_key)]) -> Caller:
    """Who sent the request; 401 for a missing or unknown key when the server has keys (services/gateway/access.py).
    Everything under /v1 depends on it, so no route there answers without it."""
    return identify(rt.settings, key)


CallerDep = Annotated[Caller, Depends(get_caller)]

JobId = Annotated[str, Path(max_length=64, description="the id submit_job returned")]


def get_visible_job(job_id: JobId, caller: CallerDep, reads: ReadsDep) -> JobView:
    """The job the path names, or 404 whether it is missing or another tenant's: the answer says nothing of which."""
    return reads.job(caller, job_id)


VisibleJob = Annotated[JobView, Depends(get_visible_job)]
