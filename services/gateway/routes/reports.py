"""The reports, rebuilt from events on every request: a job's (tracker, webhook deliveries, suggestions,
profile, plots) and those across jobs (profile, compare, slow). A job the caller cannot see is 404, a bad
argument 422, and reports across jobs read only the caller's jobs."""
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Response, status

from services.gateway.deps import CallerDep, ReadsDep, RuntimeDep, VisibleJob
from services.gateway.schemas import Problem
from shared.application import report_queries as queries
from shared.application.runtime import Runtime
from shared.domain.reports.comparison import DEFAULT_ALPHA, DEFAULT_THRESHOLD_PERCENT, Comparison
from shared.domain.reports.deliveries import WebhookDelivery
from shared.domain.reports.plots import history_svg, landscape_svg
from shared.domain.reports.profile import DEFAULT_BOTTLENECK_SHARE, PipelineProfile
from shared.domain.reports.results import KernelResult
from shared.domain.reports.suggestions import OptimizationSuggestion
from shared.domain.reports.tracker import PerformanceTracker

router = APIRouter()

Share = Annotated[float, Query(gt=0, le=1, description="share of the total from which a stage is a bottleneck")]


def _reported(rt: Runtime, query: Callable, *args):
    try:
        return query(rt.store, *args)
    except queries.ReportError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


@router.get("/jobs/{job_id}/tracker", response_model=PerformanceTracker, operation_id="get_job_tracker",
            responses={404: {"model": Problem}})
def tracker(job: VisibleJob, rt: RuntimeDep) -> PerformanceTracker:
    return _reported(rt, queries.job_tracker, job.job_id)


@router.get("/jobs/{job_id}/webhooks", response_model=list[WebhookDelivery], operation_id="get_job_webhooks",
            responses={404: {"model": Problem}})
def webhooks(job: VisibleJob, rt: RuntimeDep) -> list[WebhookDelivery]:
    """The job's webhook deliveries: every attempt, what the receiver answered, and the outcome."""
    return _reported(rt, queries.job_webhooks, job.job_id)


@router.get("/jobs/{job_id}/suggestions", response_model=list[OptimizationSuggestion],
            operation_id="get_job_suggestions", responses={404: {"model": Problem}})
def suggestions(job: VisibleJob, rt: RuntimeDep) -> list[OptimizationSuggestion]:
    return _reported(rt, queries.job_suggestions, job.job_id)


@router.get("/jobs/{job_id}/profile", response_model=PipelineProfile, operation_id="get_job_profile",
            responses={404: {"model": Problem}})
def job_profile(job: VisibleJob, rt: RuntimeDep, threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
    return _reported(rt, queries.profile, [job.job_id], threshold)


@router.get("/jobs/{job_id}/plots/{plot}.svg", operation_id="get_job_plot", responses={404: {"model": Problem}},
            response_class=Response)
def plot(job: VisibleJob, plot: Literal["history", "landscape"], rt: RuntimeDep) -> Response:
    events = _reported(rt, queries.events_of, job.job_id)
    svg = history_svg(events) if plot == "history" else landscape_svg(events)
    return Response(svg, media_type="image/svg+xml")


@router.get("/profile", response_model=PipelineProfile, operation_id="get_profile",
            responses={404: {"model": Problem}})
def profile(caller: CallerDep, reads: ReadsDep, rt: RuntimeDep,
            job: Annotated[list[str] | None, Query(description="jobs to profile; default: all")] = None,
            threshold: Share = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
    for job_id in job or []:
        reads.job(caller, job_id)
    return _reported(rt, lambda store: queries.profile(store, job or [], threshold, among=reads.among(caller)))


@router.get("/compare", response_model=Comparison, operation_id="compare_runs", responses={404: {"model": Problem}})
def compare(caller: CallerDep, reads: ReadsDep, rt: RuntimeDep,
            baseline: Annotated[str, Query(description="job id or run name")],
            current: Annotated[str, Query(description="job id or run name")],
            metric: Literal["best", "baseline"] = "best",
            threshold: Annotated[float, Query(ge=0, le=1000)] = DEFAULT_THRESHOLD_PERCENT,
            alpha: Annotated[float, Query(gt=0, lt=1)] = DEFAULT_ALPHA) -> Comparison:
    return _reported(rt, lambda store: queries.compare(store, baseline, current, metric, files=False,
                                                       among=reads.among(caller), threshold_percent=threshold,
                                                       alpha=alpha))


@router.get("/slow", response_model=list[KernelResult], operation_id="list_slow_kernels")
def slow(caller: CallerDep, reads: ReadsDep, rt: RuntimeDep,
         threshold: Annotated[float, Query(gt=0, le=1000)] = 0.8) -> list[KernelResult]:
    return _reported(rt, lambda store: queries.slow_kernels(store, threshold, among=reads.among(caller)))
