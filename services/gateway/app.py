"""HTTP gateway: submit jobs, read them and their events. Submitting returns 202: the work is asynchronous."""
from collections.abc import Callable

from typing import Annotated, Literal

from fastapi import FastAPI, HTTPException, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.gateway.schemas import EventPublic, FieldErrorPublic, JobAccepted, JobPublic, ValidationProblem
from shared.errors import field_errors
from shared.jobs import get_job, job_events, list_jobs, submit_job
from shared.reports import queries
from shared.reports.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PERCENT, Comparison
from shared.reports.plots import history_svg, landscape_svg
from shared.reports.profile import DEFAULT_BOTTLENECK_SHARE, PipelineProfile
from shared.reports.results import KernelResult
from shared.reports.suggestions import OptimizationSuggestion
from shared.reports.tracker import PerformanceTracker, performance_tracker
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
    def submit(spec: KernelSpec, run: Annotated[str | None, Query(
            max_length=100, pattern=r"^[\w.:-]+$", description="a run name: jobs under one are compared as a set")]
            = None) -> JobAccepted:
        rt = get_runtime()
        job_id = submit_job(rt.store, rt.bus, spec, submitted_by="http", run=run)
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

    _reports(app, get_runtime)
    return app


def _reports(app: FastAPI, get_runtime: Callable[[], Runtime]) -> None:
    """The reports, rebuilt from events on every request; a missing job is 404, a bad argument 422."""

    def reported(query, *args):
        try:
            return query(get_runtime().store, *args)
        except queries.ReportError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None

    @app.get("/v1/jobs/{job_id}/tracker", response_model=PerformanceTracker, operation_id="get_job_tracker",
             responses={404: {}})
    def tracker(job_id: str) -> PerformanceTracker:
        return reported(queries.job_tracker, job_id)

    @app.get("/v1/jobs/{job_id}/suggestions", response_model=list[OptimizationSuggestion],
             operation_id="get_job_suggestions", responses={404: {}})
    def suggestions(job_id: str) -> list[OptimizationSuggestion]:
        return reported(queries.job_suggestions, job_id)

    @app.get("/v1/jobs/{job_id}/profile", response_model=PipelineProfile, operation_id="get_job_profile",
             responses={404: {}, 422: {}})
    def job_profile(job_id: str, threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
        return reported(queries.profile, [job_id], threshold)

    @app.get("/v1/jobs/{job_id}/plots/{plot}.svg", operation_id="get_job_plot", responses={404: {}},
             response_class=Response)
    def plot(job_id: str, plot: Literal["history", "landscape"]) -> Response:
        events = reported(queries.events_of, job_id)
        svg = history_svg(performance_tracker(events)) if plot == "history" else landscape_svg(events)
        return Response(svg, media_type="image/svg+xml")

    @app.get("/v1/profile", response_model=PipelineProfile, operation_id="get_profile", responses={404: {}, 422: {}})
    def profile(job: Annotated[list[str] | None, Query(description="jobs to profile; default: all")] = None,
                threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
        return reported(queries.profile, job or [], threshold)

    @app.get("/v1/compare", response_model=Comparison, operation_id="compare_runs", responses={404: {}, 422: {}})
    def compare(baseline: Annotated[str, Query(description="job id or run name")],
                current: Annotated[str, Query(description="job id or run name")],
                metric: Literal["best", "baseline"] = "best",
                threshold: Annotated[float, Query(ge=0, le=1000)] = DEFAULT_THRESHOLD_PERCENT,
                alpha: Annotated[float, Query(gt=0, lt=1)] = DEFAULT_ALPHA) -> Comparison:
        return reported(lambda store: queries.compare(store, baseline, current, metric, files=False,
                                                      threshold_percent=threshold, alpha=alpha))

    @app.get("/v1/slow", response_model=list[KernelResult], operation_id="list_slow_kernels", responses={422: {}})
    def slow(threshold: Annotated[float, Query(gt=0, le=1000)] = 0.8) -> list[KernelResult]:
        return reported(queries.slow_kernels, threshold)


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
