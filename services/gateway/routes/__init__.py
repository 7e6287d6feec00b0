"""The gateway's routes, a router per resource. `api_router` gathers those under /v1, each of which needs the
caller's API key when the server has keys; the pages and the metrics need none."""
from fastapi import APIRouter, Depends

from services.gateway.deps import get_caller
from services.gateway.problems import V1_RESPONSES
from services.gateway.routes import jobs, reports, stream

api_router = APIRouter(prefix="/v1", dependencies=[Depends(get_caller)], responses=V1_RESPONSES)
api_router.include_router(jobs.router)
api_router.include_router(stream.router)
api_router.include_router(reports.router)
