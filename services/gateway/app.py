"""HTTP gateway: submit jobs, read them and their events. Submitting returns 202: the work is asynchronous."""
from collections.abc import Callable

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.gateway.schemas import EventPublic, FieldErrorPublic, JobAccepted, JobPublic, ValidationProblem
from shared.errors import field_errors
from shared.jobs import get_job, job_events, list_jobs, submit_job
from shared.runtime import Runtime
from shared.spec import KernelSpec


def create_app(get_runtime: Callable[[], Runtime]) -> FastAPI:
    app = FastAPI(title="kforge", version="0.1.0",
                  description="Submit a CUDA kernel; get back a faster, proven-correct version with its history.")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = field_errors(_strip_body(exc.errors()))
        problem = ValidationProblem(detail=f"{len(errors)} invalid field(s)",
                                    errors=[FieldErrorPublic(field=e.field, message=e.message) for e in errors])
        return JSONResponse(problem.model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.post("/v1/jobs", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, operation_id="submit_job",
              responses={422: {"model": ValidationProblem}})
    def submit(spec: KernelSpec) -> JobAccepted:
        rt = get_runtime()
        job_id = submit_job(rt.store, rt.bus, spec, submitted_by="http")
        return JobAccepted(job_id=job_id, status_url=f"/v1/jobs/{job_id}", events_url=f"/v1/jobs/{job_id}/events")

    @app.get("/v1/jobs", response_model=list[JobPublic], operation_id="list_jobs")
    def jobs() -> list[JobPublic]:
        return [JobPublic.of(v) for v in list_jobs(get_runtime().store)]

    @app.get("/v1/jobs/{job_id}", response_model=JobPublic, operation_id="get_job", responses={404: {}})
    def job(job_id: str) -> JobPublic:
        view = get_job(get_runtime().store, job_id)
        if view is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        return JobPublic.of(view)

    @app.get("/v1/jobs/{job_id}/events", response_model=list[EventPublic], operation_id="get_job_events",
             responses={404: {}})
    def events(job_id: str) -> list[EventPublic]:
        stored = job_events(get_runtime().store, job_id)
        if not stored:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        return [EventPublic(type=e.type, version=e.version, event_id=str(e.event_id), stream_id=e.stream_id,
                            stream_version=e.stream_version, position=e.position, occurred_at=e.occurred_at,
                            payload=e.payload()) for e in stored]

    return app


def _strip_body(errors) -> list:
    """FastAPI prefixes body fields with 'body'; users know their fields without it. A JSON syntax error's
    location is a character offset, which belongs in the message, not the field."""
    out = []
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "json_invalid":
            offset = f" at character {loc[1]}" if len(loc) > 1 else ""
            error = {**error, "msg": f"the request body is not valid JSON{offset}: send the spec as a JSON object"}
            loc = ()
        out.append({**error, "loc": loc[1:] if loc[:1] == ("body",) else loc})
    return out
