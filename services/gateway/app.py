"""HTTP gateway: submit jobs, read them and their events. Submitting returns 202: the work is asynchronous."""
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.gateway.access import BodyLimit, api_key_check
from services.gateway.metrics import mount_metrics
from services.gateway.pages import mount_pages
from services.gateway.schemas import (CancelRequest, EventPublic, FieldErrorPublic, JobAccepted, JobPublic, Problem,
                                      ValidationProblem)
from services.gateway.stream import job_event_stream
from shared.errors import field_errors
from shared.jobs import Admission, JobFinished, QueueFull, cancel_job, get_job, job_events, list_jobs, submit_job
from shared.projections import JobView, job_stream
from shared.reports import queries
from shared.reports.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PERCENT, Comparison
from shared.reports.deliveries import WebhookDelivery
from shared.reports.plots import history_svg, landscape_svg
from shared.reports.profile import DEFAULT_BOTTLENECK_SHARE, PipelineProfile
from shared.reports.results import KernelResult
from shared.reports.suggestions import OptimizationSuggestion
from shared.reports.tracker import PerformanceTracker, performance_tracker
from shared.runtime import Runtime
from shared.spec import KernelSpec
from shared.webhook_addresses import WebhookUrlRefused


def create_app(get_runtime: Callable[[], Runtime]) -> FastAPI:
    app = FastAPI(title="kforge", version="0.1.0",
                  description="Submit a CUDA kernel; get back a faster, proven-correct version with its history.")
    app.add_middleware(BodyLimit, max_bytes=lambda: get_runtime().settings.max_request_bytes)
    # Everything under /v1 needs an API key when the server has keys; the pages and metrics do not.
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(api_key_check(get_runtime))],
                   responses={400: {"model": Problem, "description": "a body that cannot be read as JSON text"},
                              401: {"model": Problem, "description": "a missing or unknown API key"},
                              413: {"model": Problem, "description": "a request body over the size limit"},
                              422: {"model": ValidationProblem, "description": "invalid fields, each named"}})

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

    @v1.post("/jobs", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, operation_id="submit_job",
             responses={429: {"model": Problem, "description": "too many unfinished jobs: retry after a while"}})
    def submit(spec: KernelSpec, run: Annotated[str | None, Query(
            max_length=100, pattern=r"^[\w.:-]+$", description="a run name: jobs under one are compared as a set")]
            = None) -> JobAccepted | JSONResponse:
        rt = get_runtime()
        try:
            job_id = submit_job(rt.store, rt.bus, spec, submitted_by="http", run=run, admission=Admission.of(rt.settings))
        except WebhookUrlRefused as exc:
            return _invalid_fields([FieldErrorPublic(field="webhook_url", message=str(exc))])
        except QueueFull as exc:
            return JSONResponse(Problem(detail=str(exc)).model_dump(), status_code=status.HTTP_429_TOO_MANY_REQUESTS,
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        return JobAccepted(job_id=job_id, status_url=f"/v1/jobs/{job_id}", events_url=f"/v1/jobs/{job_id}/events",
                           stream_url=f"/v1/jobs/{job_id}/stream")

    @v1.get("/jobs", response_model=list[JobPublic], operation_id="list_jobs")
    def jobs() -> list[JobPublic]:
        return [JobPublic.of(v) for v in list_jobs(get_runtime().store)]

    @v1.get("/jobs/{job_id}", response_model=JobPublic, operation_id="get_job", responses={404: {"model": Problem}})
    def job(job_id: JobId) -> JobPublic:
        return JobPublic.of(_job_or_404(get_runtime(), job_id))

    @v1.get("/jobs/{job_id}/events", response_model=list[EventPublic], operation_id="get_job_events",
            responses={404: {"model": Problem}})
    def events(job_id: JobId) -> list[EventPublic]:
        stored = job_events(get_runtime().store, job_id)
        if not stored:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        return [EventPublic.of(e) for e in stored]

    @v1.get("/jobs/{job_id}/stream", operation_id="stream_job_events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "each event as `event: <type>`, `id: <stream version>`, `data: <JSON as "
                                            "in /events>`; then `event: end` with the finished job"},
                       404: {"model": Problem}})
    def stream(job_id: JobId, last_event_id: Annotated[int, Header(ge=0, description="resume after this stream "
                                                                   "version, as an SSE client does")] = 0
               ) -> StreamingResponse:
        rt = get_runtime()
        if not rt.store.stream_version(job_stream(job_id)):  # the stream reads the events itself
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        events = job_event_stream(rt.store, job_id, last_event_id,
                                  public=lambda e: EventPublic.of(e).model_dump(mode="json"),
                                  final=lambda: JobPublic.of(get_job(rt.store, job_id)).model_dump(mode="json"))
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @v1.post("/jobs/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic,
             operation_id="cancel_job", responses={404: {"model": Problem},
                                                   409: {"model": Problem, "description": "the job has ended"}})
    def cancel(job_id: JobId, body: CancelRequest | None = None) -> JobPublic:
        """Cancel an unfinished job: nothing new starts for it, and a running search stops at its next batch."""
        rt = get_runtime()
        try:
            view = cancel_job(rt.store, rt.bus, job_id, reason=(body or CancelRequest()).reason, cancelled_by="http")
        except KeyError:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}") from None
        except JobFinished as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
        return JobPublic.of(view)

    _reports(v1, get_runtime)
    mount_pages(app)
    mount_metrics(app, get_runtime)
    app.include_router(v1)
    return app


def _reports(router: APIRouter, get_runtime: Callable[[], Runtime]) -> None:
    """The reports, rebuilt from events on every request; a missing job is 404, a bad argument 422."""

    def reported(query, *args):
        try:
            return query(get_runtime().store, *args)
        except queries.ReportError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None

    @router.get("/jobs/{job_id}/tracker", response_model=PerformanceTracker, operation_id="get_job_tracker",
             responses={404: {"model": Problem}})
    def tracker(job_id: JobId) -> PerformanceTracker:
        return reported(queries.job_tracker, job_id)

    @router.get("/jobs/{job_id}/webhooks", response_model=list[WebhookDelivery], operation_id="get_job_webhooks",
                responses={404: {"model": Problem}})
    def webhooks(job_id: JobId) -> list[WebhookDelivery]:
        """The job's webhook deliveries: every attempt, what the receiver answered, and the outcome."""
        return reported(queries.job_webhooks, job_id)

    @router.get("/jobs/{job_id}/suggestions", response_model=list[OptimizationSuggestion],
             operation_id="get_job_suggestions", responses={404: {"model": Problem}})
    def suggestions(job_id: JobId) -> list[OptimizationSuggestion]:
        return reported(queries.job_suggestions, job_id)

    @router.get("/jobs/{job_id}/profile", response_model=PipelineProfile, operation_id="get_job_profile",
             responses={404: {"model": Problem}})
    def job_profile(job_id: JobId, threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
        return reported(queries.profile, [job_id], threshold)

    @router.get("/jobs/{job_id}/plots/{plot}.svg", operation_id="get_job_plot", responses={404: {"model": Problem}},
             response_class=Response)
    def plot(job_id: JobId, plot: Literal["history", "landscape"]) -> Response:
        events = reported(queries.events_of, job_id)
        svg = history_svg(performance_tracker(events)) if plot == "history" else landscape_svg(events)
        return Response(svg, media_type="image/svg+xml")

    @router.get("/profile", response_model=PipelineProfile, operation_id="get_profile", responses={404: {"model": Problem}})
    def profile(job: Annotated[list[str] | None, Query(description="jobs to profile; default: all")] = None,
                threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
        return reported(queries.profile, job or [], threshold)

    @router.get("/compare", response_model=Comparison, operation_id="compare_runs", responses={404: {"model": Problem}})
    def compare(baseline: Annotated[str, Query(description="job id or run name")],
                current: Annotated[str, Query(description="job id or run name")],
                metric: Literal["best", "baseline"] = "best",
                threshold: Annotated[float, Query(ge=0, le=1000)] = DEFAULT_THRESHOLD_PERCENT,
                alpha: Annotated[float, Query(gt=0, lt=1)] = DEFAULT_ALPHA) -> Comparison:
        return reported(lambda store: queries.compare(store, baseline, current, metric, files=False,
                                                      threshold_percent=threshold, alpha=alpha))

    @router.get("/slow", response_model=list[KernelResult], operation_id="list_slow_kernels")
    def slow(threshold: Annotated[float, Query(gt=0, le=1000)] = 0.8) -> list[KernelResult]:
        return reported(queries.slow_kernels, threshold)


def _invalid_fields(errors: list[FieldErrorPublic]) -> JSONResponse:
    problem = ValidationProblem(detail=f"{len(errors)} invalid field(s)", errors=errors)
    return JSONResponse(problem.model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _job_or_404(rt: Runtime, job_id: str) -> JobView:
    view = get_job(rt.store, job_id)
    if view is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return view


RETRY_AFTER_S = 30  # what a refused submission is told to wait: long enough for some jobs to finish
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
