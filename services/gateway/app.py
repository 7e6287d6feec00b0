"""HTTP gateway: submit jobs, read them and their events. Submitting returns 202: the work is asynchronous.
A job belongs to the tenant of the API key that submitted it: other keys get 404 for it, as for a job that
does not exist, and never see it in lists or reports across jobs."""
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Annotated, Literal
from uuid import uuid4

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.gateway.access import BodyLimit, Caller, HostCheck, JsonBodies, caller_of
from services.gateway.metrics import mount_metrics
from services.gateway.pages import mount_pages
from services.gateway.reads import Reads
from services.gateway.schemas import (CancelRequest, EventPublic, FieldErrorPublic, JobAccepted, JobPublic, Problem,
                                      ValidationProblem)
from services.gateway.stream import StreamsFull, job_event_stream
from shared import report_queries as queries
from shared.array_files import named_file_errors
from shared.errors import field_errors
from shared.eventstore import UnreadableEvent
from shared.jobs import Admission, AdmissionRefused, JobFinished, QueueFull, cancel_job, job_events, submit_job
from shared.reports.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PERCENT, Comparison
from shared.reports.deliveries import WebhookDelivery
from shared.reports.plots import history_svg, landscape_svg
from shared.reports.profile import DEFAULT_BOTTLENECK_SHARE, PipelineProfile
from shared.reports.results import KernelResult
from shared.reports.suggestions import OptimizationSuggestion
from shared.reports.tracker import PerformanceTracker
from shared.runtime import Runtime
from shared.spec import KernelSpec

log = logging.getLogger(__name__)


def create_app(get_runtime: Callable[[], Runtime]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        get_runtime()  # settings that cannot be read (KFORGE_API_KEYS=",") stop the server before it listens
        yield

    # /docs serves Swagger UI from files installed with the package, not from a CDN: it works where the server
    # has no internet, and the browser asks nothing of anywhere else. ReDoc is left out: it fetches its logo.
    app = FastAPIOffline(
        title="kforge", version="0.1.0", lifespan=lifespan, redoc_url=None,
        description="Submit a CUDA kernel; get back a faster, proven-correct version with its history.")
    # The middleware added last runs first: a foreign Host is refused before anything else is looked at.
    app.add_middleware(BodyLimit, max_bytes=lambda: get_runtime().settings.max_request_bytes)
    app.add_middleware(JsonBodies)
    app.add_middleware(HostCheck, allowed=lambda: get_runtime().settings.allowed_hosts)
    reads = Reads(get_runtime)
    caller = caller_of(get_runtime)
    Who = Annotated[Caller, Depends(caller)]
    # Everything under /v1 needs an API key when the server has keys; the pages and metrics do not.
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(caller)],
                   responses={400: {"model": Problem, "description": "a body that cannot be read as JSON text, "
                                                                    "or a Host this server does not answer to"},
                              401: {"model": Problem, "description": "a missing or unknown API key"},
                              413: {"model": Problem, "description": "a request body over the size limit"},
                              415: {"model": Problem, "description": "a POST without Content-Type: application/json"},
                              422: {"model": ValidationProblem, "description": "invalid fields, each named"}})
    _error_handlers(app)

    @v1.post("/jobs", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, operation_id="submit_job",
             responses={429: {"model": Problem, "description": "too many unfinished jobs: retry after a while"}})
    def submit(spec: KernelSpec, who: Who, run: Annotated[str | None, Query(
            max_length=100, pattern=r"^[\w.:-]+$", description="a run name: jobs under one are compared as a set")]
            = None) -> JobAccepted | JSONResponse:
        rt = get_runtime()
        admission = Admission.of(rt.settings)
        if who.keyed:
            admission = replace(admission, max_open_jobs_of_tenant=rt.settings.max_open_jobs_per_key)
        if named := named_file_errors(spec):  # the workers would read whatever path a stranger named
            return _invalid_fields([FieldErrorPublic(field=e.field, message=e.message) for e in named])
        try:
            job_id = submit_job(rt.store, rt.bus, spec, submitted_by="http", run=run, admission=admission,
                                tenant=who.tenant, owner=rt.owner)
        except AdmissionRefused as exc:
            return _invalid_fields([FieldErrorPublic(field=e.field, message=e.message) for e in exc.errors])
        except QueueFull as exc:
            return _too_many(str(exc))
        return JobAccepted(job_id=job_id, status_url=f"/v1/jobs/{job_id}", events_url=f"/v1/jobs/{job_id}/events",
                           stream_url=f"/v1/jobs/{job_id}/stream")

    @v1.get("/jobs", response_model=list[JobPublic], operation_id="list_jobs")
    def jobs(who: Who) -> list[JobPublic]:
        """The caller's jobs (every tenant's for an admin key), oldest first."""
        return [JobPublic.of(v) for v in reads.jobs(who)]

    @v1.get("/jobs/{job_id}", response_model=JobPublic, operation_id="get_job", responses={404: {"model": Problem}})
    def job(job_id: JobId, who: Who) -> JobPublic:
        return JobPublic.of(reads.job(who, job_id))

    @v1.get("/jobs/{job_id}/events", response_model=list[EventPublic], operation_id="get_job_events",
            responses={404: {"model": Problem}, 500: {"model": Problem, "description": "an event that cannot be read"}})
    def events(job_id: JobId, who: Who) -> list[EventPublic]:
        reads.job(who, job_id)
        return [EventPublic.of(e) for e in job_events(get_runtime().store, job_id)]

    @v1.get("/jobs/{job_id}/stream", operation_id="stream_job_events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "each event as `event: <type>`, `id: <stream version>`, `data: <JSON as "
                                            "in /events>`; then `event: end` with the finished job"},
                       404: {"model": Problem},
                       429: {"model": Problem, "description": "as many live streams are open as allowed"}})
    async def stream(job_id: JobId, who: Who, last_event_id: Annotated[int, Header(
            ge=0, description="resume after this stream version, as an SSE client does")] = 0) -> Response:
        await run_in_threadpool(reads.job, who, job_id)
        try:
            subscription = reads.hub.open(job_id, key=who.tenant if who.keyed else None)
        except StreamsFull as exc:
            return _too_many(str(exc))
        try:  # read after subscribing: what is stored meanwhile comes live, and nothing falls between
            history = await run_in_threadpool(job_events, get_runtime().store, job_id)
        except BaseException:
            reads.hub.close(subscription)
            raise

        def final() -> dict:
            return JobPublic.of(reads.job(who, job_id)).model_dump(mode="json")

        events = job_event_stream(reads.hub, subscription, history, last_event_id,
                                  public=lambda e: EventPublic.of(e).model_dump(mode="json"), final=final)
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @v1.post("/jobs/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic,
             operation_id="cancel_job", responses={404: {"model": Problem},
                                                   409: {"model": Problem, "description": "the job has ended"}})
    def cancel(job_id: JobId, who: Who, body: CancelRequest | None = None) -> JobPublic:
        """Cancel an unfinished job: nothing new starts for it, and a running search stops at its next batch."""
        reads.job(who, job_id)
        rt = get_runtime()
        try:
            view = cancel_job(rt.store, rt.bus, job_id, reason=(body or CancelRequest()).reason, cancelled_by="http")
        except KeyError:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}") from None
        except JobFinished as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
        return JobPublic.of(view)

    _reports(v1, get_runtime, reads, Who)
    mount_pages(app)
    mount_metrics(app, get_runtime)
    app.include_router(v1)
    return app


def _error_handlers(app: FastAPI) -> None:
    """Every error is a JSON Problem, an unexpected one included: its details go to the log, not the client."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _invalid_fields([FieldErrorPublic(field=e.field, message=e.message)
                                for e in field_errors(_strip_body(exc.errors()))])

    @app.exception_handler(StarletteHTTPException)  # Starlette's own (an unknown path) as well as FastAPI's
    async def _problem(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Every 422 has one shape, ValidationProblem, whether a field failed validation or a report
        # refused an argument; other errors are a Problem.
        body = ValidationProblem(detail=exc.detail, errors=[]) if exc.status_code == 422 else Problem(detail=exc.detail)
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(UnreadableEvent)
    async def _unreadable(_: Request, exc: UnreadableEvent) -> JSONResponse:
        # A stored event this build cannot read: the job is there, its history cannot be shown whole.
        detail = f"{exc}; this kforge may be older than the one that recorded it"
        return JSONResponse(Problem(detail=detail).model_dump(), status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        incident = uuid4().hex[:12]
        log.error("incident %s: %s %s failed", incident, request.method, request.url.path,
                  exc_info=(type(exc), exc, exc.__traceback__))
        detail = f"the server failed to answer (incident {incident}, in its log); retry, or report the incident"
        return JSONResponse(Problem(detail=detail).model_dump(), status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)


def _reports(router: APIRouter, get_runtime: Callable[[], Runtime], reads: Reads, Who) -> None:
    """The reports, rebuilt from events on every request; a job the caller cannot see is 404, a bad argument
    422, and reports across jobs read only the caller's."""

    def reported(query, *args):
        try:
            return query(get_runtime().store, *args)
        except queries.ReportError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None

    @router.get("/jobs/{job_id}/tracker", response_model=PerformanceTracker, operation_id="get_job_tracker",
             responses={404: {"model": Problem}})
    def tracker(job_id: JobId, who: Who) -> PerformanceTracker:
        reads.job(who, job_id)
        return reported(queries.job_tracker, job_id)

    @router.get("/jobs/{job_id}/webhooks", response_model=list[WebhookDelivery], operation_id="get_job_webhooks",
                responses={404: {"model": Problem}})
    def webhooks(job_id: JobId, who: Who) -> list[WebhookDelivery]:
        """The job's webhook deliveries: every attempt, what the receiver answered, and the outcome."""
        reads.job(who, job_id)
        return reported(queries.job_webhooks, job_id)

    @router.get("/jobs/{job_id}/suggestions", response_model=list[OptimizationSuggestion],
             operation_id="get_job_suggestions", responses={404: {"model": Problem}})
    def suggestions(job_id: JobId, who: Who) -> list[OptimizationSuggestion]:
        reads.job(who, job_id)
        return reported(queries.job_suggestions, job_id)

    @router.get("/jobs/{job_id}/profile", response_model=PipelineProfile, operation_id="get_job_profile",
             responses={404: {"model": Problem}})
    def job_profile(job_id: JobId, who: Who, threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
        reads.job(who, job_id)
        return reported(queries.profile, [job_id], threshold)

    @router.get("/jobs/{job_id}/plots/{plot}.svg", operation_id="get_job_plot", responses={404: {"model": Problem}},
             response_class=Response)
    def plot(job_id: JobId, plot: Literal["history", "landscape"], who: Who) -> Response:
        reads.job(who, job_id)
        events = reported(queries.events_of, job_id)
        svg = history_svg(events) if plot == "history" else landscape_svg(events)
        return Response(svg, media_type="image/svg+xml")

    @router.get("/profile", response_model=PipelineProfile, operation_id="get_profile",
                responses={404: {"model": Problem}})
    def profile(who: Who, job: Annotated[list[str] | None, Query(description="jobs to profile; default: all")] = None,
                threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
        for job_id in job or []:
            reads.job(who, job_id)
        return reported(lambda store: queries.profile(store, job or [], threshold, among=reads.among(who)))

    @router.get("/compare", response_model=Comparison, operation_id="compare_runs", responses={404: {"model": Problem}})
    def compare(who: Who, baseline: Annotated[str, Query(description="job id or run name")],
                current: Annotated[str, Query(description="job id or run name")],
                metric: Literal["best", "baseline"] = "best",
                threshold: Annotated[float, Query(ge=0, le=1000)] = DEFAULT_THRESHOLD_PERCENT,
                alpha: Annotated[float, Query(gt=0, lt=1)] = DEFAULT_ALPHA) -> Comparison:
        return reported(lambda store: queries.compare(store, baseline, current, metric, files=False,
                                                      among=reads.among(who), threshold_percent=threshold, alpha=alpha))

    @router.get("/slow", response_model=list[KernelResult], operation_id="list_slow_kernels")
    def slow(who: Who, threshold: Annotated[float, Query(gt=0, le=1000)] = 0.8) -> list[KernelResult]:
        return reported(lambda store: queries.slow_kernels(store, threshold, among=reads.among(who)))


def _too_many(detail: str) -> JSONResponse:
    return JSONResponse(Problem(detail=detail).model_dump(), status_code=status.HTTP_429_TOO_MANY_REQUESTS,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


def _invalid_fields(errors: list[FieldErrorPublic]) -> JSONResponse:
    problem = ValidationProblem(detail=f"{len(errors)} invalid field(s)", errors=errors)
    return JSONResponse(problem.model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


RETRY_AFTER_S = 30  # what a refused submission or stream is told to wait: long enough for some to finish
JobId = Annotated[str, Path(max_length=64, description="the id submit_job returned")]
Share = Annotated[float, Query(gt=0, le=1, description="share of the total from which a stage is a bottleneck")]


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
