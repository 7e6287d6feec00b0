"""Reports read from the store: the operations the CLI, the Python API and the gateway share. The I/O
around the pure folds of `shared.domain.reports`: reading jobs' events, a run file exported earlier, and
submitting a batch of jobs again."""
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from pydantic import ValidationError

from shared.adapters.bus import Bus
from shared.adapters.eventstore import EventStore, UnreadableEvent
from shared.adapters.job_owners import JobOwner
from shared.application.jobs import UnknownJob, find_job_ids, job_events, resolve_job_id, submit_job
from shared.domain.errors import field_errors
from shared.domain.events import JobSubmitted
from shared.domain.projections import job_stream
from shared.domain.reports.comparison import Comparison, Run, compare_runs, run_of
from shared.domain.reports.deliveries import WebhookDelivery, webhook_deliveries
from shared.domain.reports.profile import DEFAULT_BOTTLENECK_SHARE, PipelineProfile, pipeline_profile
from shared.domain.reports.results import KernelResult, kernel_result
from shared.domain.reports.suggestions import OptimizationSuggestion, suggest
from shared.domain.reports.tracker import PerformanceTracker, performance_tracker


class ReportError(LookupError):
    """A report asked of something that is not there; the message says what to give instead."""


def events_of(store: EventStore, job_id: str) -> list:
    """A job's events, or ReportError naming the job that is not there."""
    events = job_events(store, job_id)
    if not events:
        raise ReportError(f"no job {job_id}: `kforge jobs` lists them")
    return events


def job_tracker(store: EventStore, job_id: str) -> PerformanceTracker:
    return performance_tracker(events_of(store, job_id))


def job_webhooks(store: EventStore, job_id: str) -> list[WebhookDelivery]:
    return webhook_deliveries(events_of(store, job_id))


def job_suggestions(store: EventStore, job_id: str) -> list[OptimizationSuggestion]:
    return suggest(events_of(store, job_id))


def profile(store: EventStore, job_ids: list[str] | None = None,
            bottleneck_share: float = DEFAULT_BOTTLENECK_SHARE,
            among: Collection[str] | None = None) -> PipelineProfile:
    """One job's profile, several jobs' summed, or every job's (of those `among`, when given) when none is named."""
    events = ((events_of(store, j) for j in job_ids) if job_ids
              else _readable_jobs(store, find_job_ids(store, among=among)))
    return pipeline_profile(events, bottleneck_share)


def results(store: EventStore, run: str | None = None, among: Collection[str] | None = None) -> list[KernelResult]:
    """Every job's result (of the jobs `among`, when given), oldest first; only those submitted under `run`
    when it is given."""
    found = (kernel_result(events) for events in _readable_jobs(store, find_job_ids(store, among=among)))
    return [r for r in found if r is not None and (run is None or r.run == run)]


def _readable_jobs(store: EventStore, job_ids: list[str]) -> Iterator[list]:
    """Each job's events, leaving out a job with an event this build cannot decode: a report over many jobs
    goes on without it (the job's own reads name the event)."""
    for job_id in job_ids:
        try:
            yield store.read_stream(job_stream(job_id))
        except UnreadableEvent:
            continue


def load_run(store: EventStore, reference: str, metric: str = "best", files: bool = True,
             among: Collection[str] | None = None) -> Run:
    """A run named by a file exported earlier (unless `files` is off, as over HTTP), a run name given at
    submission, or a job id (or prefix); of the jobs `among` only, when given."""
    path = Path(reference)
    if files and path.suffix == ".json" and not path.is_file():
        raise ReportError(f"{reference}: no such file; `kforge export-run RUN FILE` writes one")
    if files and path.suffix == ".json":
        try:
            return Run.model_validate_json(path.read_text())
        except ValidationError as exc:
            raise ReportError(f"{reference} is not a run exported by kforge ({exc.error_count()} problems): export "
                              "one with `kforge export-run RUN FILE`") from None
    named = results(store, run=reference, among=among)
    if named:
        return run_of(reference, named, metric)
    try:
        job_id = resolve_job_id(store, reference, among)
    except UnknownJob as exc:
        if exc.matches:
            raise ReportError(str(exc)) from None
        raise ReportError(f"{reference!r} is neither a run file (.json), a run name nor a job id: `kforge jobs` "
                          "lists jobs and their runs") from None
    return run_of(job_id, [kernel_result(events_of(store, job_id))], metric)


def compare(store: EventStore, baseline: str, current: str, metric: str = "best", files: bool = True,
            among: Collection[str] | None = None, **options) -> Comparison:
    return compare_runs(load_run(store, baseline, metric, files, among), load_run(store, current, metric, files, among),
                        **options)


def slow_kernels(store: EventStore, threshold: float, among: Collection[str] | None = None) -> list[KernelResult]:
    """Kernels whose best speedup so far, over all their jobs, is below `threshold` (against the spec's
    reference time when it has one, else against the submitted kernel); the slowest first."""
    if threshold <= 0:
        raise ValueError(f"threshold {threshold}: give a speedup ratio above 0, e.g. 0.8")
    best: dict[str, KernelResult] = {}
    for result in results(store, among=among):
        speedup = result.speedup_vs_reference
        if speedup is None:
            continue
        held = best.get(result.kernel)
        if held is None or speedup > held.speedup_vs_reference:
            best[result.kernel] = result
    slow = [r for r in best.values() if r.speedup_vs_reference < threshold]
    return sorted(slow, key=lambda r: r.speedup_vs_reference)


def optimise_batch(store: EventStore, bus: Bus, kernels: list[KernelResult], strategy: str, run: str,
                   on_submitted: Callable[[KernelResult, str], None] = lambda r, j: None,
                   owner: JobOwner | None = None) -> list[str]:
    """Submit each kernel again, as its latest job submitted it, under `strategy` and one run name; `owner` as
    submit_job takes it. A strategy the spec cannot take is a ReportError naming the field and the fix."""
    job_ids = []
    for result in kernels:
        submitted = next(e for e in events_of(store, result.job_id) if isinstance(e, JobSubmitted))
        try:
            spec = submitted.spec.model_validate({**submitted.spec.model_dump(), "strategy": {
                **submitted.spec.strategy.model_dump(), "name": strategy}})
        except ValidationError as exc:
            raise ReportError(f"--strategy {strategy}: " + "; ".join(
                f"{e.field}: {e.message}" for e in field_errors(exc.errors()))) from None
        job_id = submit_job(store, bus, spec, submitted_by="batch", run=run, owner=owner)
        on_submitted(result, job_id)
        job_ids.append(job_id)
    return job_ids
