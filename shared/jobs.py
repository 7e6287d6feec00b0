"""Submitting and reading jobs: the operations the CLI, the Python API and the gateway share."""
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import uuid4

from pydantic import BaseModel

from shared.bus import Bus
from shared.contracts import PlannerCatchUp
from shared.events import JOB_ENDS, Event, JobCancelled, JobSubmitted
from shared.eventstore import ConcurrencyConflict, EventStore, OpenLimit, TooManyOpen
from shared.projections import JobView, job_id_of, job_stream, project_job
from shared.settings import Settings
from shared.spec import KernelSpec, ParamValue
from shared.webhook_addresses import allowed_addresses


class JobPublic(BaseModel):
    """A job as kforge shows it outside: over HTTP and as the `data` of its webhook."""

    job_id: str
    kernel_name: str | None
    strategy: str | None
    run: str | None
    status: str
    submitted_at: datetime | None
    updated_at: datetime | None
    baseline_ms: float | None
    best_ms: float | None
    best_params: dict[str, ParamValue] | None
    speedup: float | None
    device: str | None
    replay: bool
    summary: str | None
    failed_stage: str | None
    failure: str | None
    events: int

    @classmethod
    def of(cls, view: JobView) -> "JobPublic":
        return cls(job_id=view.job_id, kernel_name=view.spec.kernel_name if view.spec else None,
                   strategy=view.spec.strategy.name if view.spec else None, run=view.run, status=view.status,
                   submitted_at=view.submitted_at, updated_at=view.updated_at, baseline_ms=view.baseline_ms,
                   best_ms=view.best_ms, best_params=view.best_params, speedup=view.speedup,
                   device=view.device, replay=view.replay, summary=view.summary, failed_stage=view.failed_stage,
                   failure=view.failure, events=len(view.event_types))


@dataclass(frozen=True)
class Admission:
    """What a submission must pass beyond its spec's own validation."""

    max_open_jobs: int | None = None  # unfinished jobs beyond which a submission is refused (QueueFull)
    webhook_networks: list[str] = field(default_factory=list)  # non-public networks webhooks may reach

    @classmethod
    def of(cls, settings: Settings) -> "Admission":
        return cls(max_open_jobs=settings.max_open_jobs, webhook_networks=settings.webhook_allowed_networks)


class QueueFull(RuntimeError):
    def __init__(self, open_jobs: int):
        super().__init__(f"{open_jobs} jobs are unfinished, as many as this kforge accepts; "
                         "submit again once some have finished")
        self.open_jobs = open_jobs


class JobFinished(RuntimeError):
    """The job has ended already: there is nothing left to cancel."""


def submit_job(store: EventStore, bus: Bus, spec: KernelSpec, submitted_by: str = "cli", run: str | None = None,
               admission: Admission = Admission()) -> str:
    """Record a job and wake the planner. Refused, with nothing recorded: a webhook URL that may not be
    called (WebhookUrlRefused) and, past `admission.max_open_jobs` unfinished jobs, any job (QueueFull)."""
    if spec.webhook_url is not None:
        allowed_addresses(str(spec.webhook_url), admission.webhook_networks)
    job_id = uuid4().hex[:12]
    stream = job_stream(job_id)
    limit = None if admission.max_open_jobs is None else \
        OpenLimit(JobSubmitted.__name__, tuple(t.__name__ for t in JOB_ENDS), admission.max_open_jobs)
    try:
        store.append(stream, [JobSubmitted(stream_id=stream, spec=spec, submitted_by=submitted_by, run=run)],
                     expected_version=0, open_limit=limit)
    except TooManyOpen as exc:
        raise QueueFull(exc.open_streams) from None
    bus.dispatch(PlannerCatchUp.message(reason=f"{stream} submitted"))
    return job_id


def cancel_job(store: EventStore, bus: Bus, job_id: str, reason: str, cancelled_by: str) -> JobView:
    """End an unfinished job; JobFinished if it has ended. Racing the planner's last word is safe: the
    append expects the version read, so whichever end is recorded first stands."""
    stream = job_stream(job_id)
    while True:
        view = get_job(store, job_id)
        if view is None:
            raise KeyError(job_id)
        if view.finished:
            raise JobFinished(f"job {job_id} has {view.status} already")
        try:
            store.append(stream, [JobCancelled(stream_id=stream, reason=reason, cancelled_by=cancelled_by)],
                         expected_version=view.version)
        except ConcurrencyConflict:
            continue  # the job moved on meanwhile: look again
        bus.dispatch(PlannerCatchUp.message(reason=f"{stream} cancelled"))  # its webhook goes out
        return get_job(store, job_id)


def get_job(store: EventStore, job_id: str) -> JobView | None:
    events = store.read_stream(job_stream(job_id))
    return project_job(events, job_id) if events else None


def list_jobs(store: EventStore) -> list[JobView]:
    return [project_job(store.read_stream(s), job_id_of(s)) for s in store.stream_ids("job-")]


def job_events(store: EventStore, job_id: str) -> list[Event]:
    return store.read_stream(job_stream(job_id))


def follow_job(store: EventStore, job_id: str, on_event: Callable[[Event], None], timeout_s: float,
               poll_s: float = 0.1) -> JobView:
    """Report each new event of a job until it finishes or `timeout_s` passes; returns the last view."""
    seen: list[Event] = []
    deadline = time.monotonic() + timeout_s
    while True:
        events = store.read_stream(job_stream(job_id))
        for event in events[len(seen):]:
            on_event(event)
        seen = events
        view = project_job(events, job_id)
        if view.finished or time.monotonic() > deadline:
            return view
        time.sleep(poll_s)
