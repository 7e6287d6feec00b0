"""Read models rebuilt from events by pure folds: `project(events)` = fold of `evolve` over them."""
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import singledispatch
from uuid import UUID

from shared.domain.events import (BaselineFailed, BaselineMeasured, BaselineRequested, ConfigFailed, ConfigMeasured,
                                  Event, KernelsCompared, JobCancelled, JobCompleted, JobFailed, JobSubmitted,
                                  KernelCompiled, ShardTuned, StepAccepted, TuningCompleted, TuningRequested,
                                  Undecodable)
from shared.domain.spec import KernelSpec
from shared.domain.steps import OVERALL, timed_in_turn

TERMINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class JobView:
    job_id: str
    spec: KernelSpec | None = None
    run: str | None = None
    tenant: str | None = None  # whose the job is; None until its submission is read
    status: str = "unknown"  # submitted | benchmarking | tuning | completed | failed | cancelled
    submitted_at: datetime | None = None
    updated_at: datetime | None = None
    version: int = 0
    baseline_request: UUID | None = None
    compile_ms: float | None = None
    baseline_ms: float | None = None
    baseline_samples_ms: tuple[float, ...] = ()
    device: str | None = None
    replay: bool = False
    tuning_requests: tuple[tuple[str, UUID], ...] = ()  # (candidate id, request id) of every shard requested
    shards_tuned: tuple[ShardTuned, ...] = ()
    configs_measured: int = 0
    configs_failed: int = 0
    best_ms: float | None = None  # fastest correct configuration so far
    best_params: dict | None = None
    speedup: float | None = None  # best over baseline; timed in turn once the OVERALL comparison answered
    speedup_ci: tuple[float, float] | None = None  # its 95% interval, from that comparison
    summary: str | None = None
    failed_stage: str | None = None
    failure: str | None = None
    event_types: tuple[str, ...] = field(default=())
    unreadable: str | None = None  # the first of its events this build cannot read, described

    def shards_of(self, candidate_id: str) -> tuple[int, tuple[ShardTuned, ...]]:
        """How many shards of a candidate's space were requested, and those tuned so far."""
        requests = {rid for cid, rid in self.tuning_requests if cid == candidate_id}
        return len(requests), tuple(s for s in self.shards_tuned if s.request_id in requests)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL


def job_stream(job_id: str) -> str:
    return f"job-{job_id}"


def job_id_of(stream_id: str) -> str:
    return stream_id.removeprefix("job-")


def by_stream(events: Iterable[Event]) -> dict[str, list[Event]]:
    """Events of many streams (as `read_types` gives them, in global order), each stream's in order."""
    streams: dict[str, list[Event]] = {}
    for event in events:
        streams.setdefault(event.stream_id, []).append(event)
    return streams


def project_job(events: Iterable[Event | Undecodable], job_id: str | None = None,
                since: JobView | None = None) -> JobView:
    """A job's view from its events, or with `since` that view carried on by the events that followed it."""
    events = list(events)
    view = since or JobView(job_id=job_id or "")
    for event in events:
        view = evolve(event, view)
    if not events:
        return view
    # Set once at the end, not per event: growing a tuple per event made long streams quadratic.
    return replace(view, version=events[-1].stream_version or view.version + len(events),
                   updated_at=events[-1].occurred_at, event_types=(*view.event_types, *(e.type for e in events)))


@singledispatch
def evolve(event: Event, view: JobView) -> JobView:
    return view  # events that do not change the job summary


@evolve.register
def _(event: JobSubmitted, view: JobView) -> JobView:
    return replace(view, job_id=job_id_of(event.stream_id), spec=event.spec, run=event.run, tenant=event.tenant,
                   status="submitted", submitted_at=event.occurred_at)


@evolve.register
def _(event: Undecodable, view: JobView) -> JobView:
    return replace(view, job_id=job_id_of(event.stream_id), unreadable=view.unreadable or event.describe())


@evolve.register
def _(event: BaselineRequested, view: JobView) -> JobView:
    return replace(view, status="benchmarking", baseline_request=event.event_id)


@evolve.register
def _(event: KernelCompiled, view: JobView) -> JobView:
    return replace(view, compile_ms=event.compile_ms)


@evolve.register
def _(event: BaselineMeasured, view: JobView) -> JobView:
    return replace(view, baseline_ms=event.median_ms, baseline_samples_ms=tuple(event.samples_ms),
                   device=event.device, replay=event.replay)


@evolve.register
def _(event: BaselineFailed, view: JobView) -> JobView:
    return replace(view, failed_stage=event.stage, failure=event.reason)


@evolve.register
def _(event: TuningRequested, view: JobView) -> JobView:
    return replace(view, status="tuning", tuning_requests=(*view.tuning_requests, (event.candidate_id, event.event_id)))


@evolve.register
def _(event: ConfigMeasured, view: JobView) -> JobView:
    # Only the submitted kernel's configurations are its best so far; a rewrite's count once accepted.
    submitted = ("submitted", event.request_id) in view.tuning_requests
    better = submitted and not event.abandoned and (view.best_ms is None or event.median_ms < view.best_ms)
    return replace(view, configs_measured=view.configs_measured + 1,
                   best_ms=event.median_ms if better else view.best_ms,
                   best_params=event.params if better else view.best_params)


@evolve.register
def _(event: ConfigFailed, view: JobView) -> JobView:
    return replace(view, configs_failed=view.configs_failed + 1)


@evolve.register
def _(event: ShardTuned, view: JobView) -> JobView:
    return replace(view, shards_tuned=(*view.shards_tuned, event))


@evolve.register
def _(event: TuningCompleted, view: JobView) -> JobView:
    if event.candidate_id != "submitted":
        return view  # a rewrite's tuning: it becomes the best only if its step is accepted
    return replace(view, speedup=event.speedup, best_ms=event.best_time_ms, best_params=event.best_params)


@evolve.register
def _(event: StepAccepted, view: JobView) -> JobView:
    return replace(view, best_ms=event.new_time_ms, best_params=event.best_params,
                   speedup=view.baseline_ms / event.new_time_ms if view.baseline_ms else None)


@evolve.register
def _(event: KernelsCompared, view: JobView) -> JobView:
    if event.candidate_id != OVERALL or not timed_in_turn(event):
        return view
    return replace(view, speedup=event.speedup, speedup_ci=event.speedup_ci)


@evolve.register
def _(event: JobCompleted, view: JobView) -> JobView:
    return replace(view, status="completed", summary=event.summary)


@evolve.register
def _(event: JobFailed, view: JobView) -> JobView:
    return replace(view, status="failed", failed_stage=event.stage, failure=event.reason)


@evolve.register
def _(event: JobCancelled, view: JobView) -> JobView:
    return replace(view, status="cancelled", failure=event.reason)
