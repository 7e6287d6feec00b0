"""Submitting and reading jobs: the operations the CLI, the Python API and the gateway share."""
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from uuid import uuid4

from pydantic import BaseModel, Field

from shared.adapters.bus import Bus
from shared.adapters.eventstore import ConcurrencyConflict, EventStore, OpenLimit, TooManyOpen
from shared.adapters.job_owners import JobOwner, dead_owners
from shared.adapters.settings import Settings
from shared.adapters.webhook_addresses import WebhookUrlRefused, allowed_addresses
from shared.application.kernel_admission import CompilesBusy, kernel_errors
from shared.application.limits import Limits, limit_errors
from shared.domain.contracts import PlannerCatchUp
from shared.domain.errors import FieldError
from shared.domain.events import JOB_ENDS, LOCAL_TENANT, Event, JobCancelled, JobSubmitted, Undecodable
from shared.domain.projections import JobView, by_stream, job_id_of, job_stream, project_job
from shared.domain.spec import KernelSpec, ParamValue
from shared.domain.strategy_names import unknown_strategy


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
    speedup_ci: tuple[float, float] | None = Field(None, description="the speedup's 95% interval where the best "
                                                                     "kernel was timed in turn with the submitted one")
    device: str | None
    replay: bool
    summary: str | None
    failed_stage: str | None
    failure: str | None
    unreadable: str | None = Field(description="set, with status `unreadable`, when one of the job's stored "
                                               "events cannot be read by this kforge: which one and why")
    events: int

    @classmethod
    def of(cls, view: JobView) -> "JobPublic":
        return cls(job_id=view.job_id, kernel_name=view.spec.kernel_name if view.spec else None,
                   strategy=view.spec.strategy.name if view.spec else None, run=view.run,
                   status="unreadable" if view.unreadable else view.status, unreadable=view.unreadable,
                   submitted_at=view.submitted_at, updated_at=view.updated_at, baseline_ms=view.baseline_ms,
                   best_ms=view.best_ms, best_params=view.best_params, speedup=view.speedup,
                   speedup_ci=view.speedup_ci, device=view.device, replay=view.replay, summary=view.summary,
                   failed_stage=view.failed_stage, failure=view.failure, events=len(view.event_types))


@dataclass(frozen=True)
class Admission:
    """What a submission must pass beyond its spec's own validation."""

    max_open_jobs: int | None = None  # unfinished jobs beyond which a submission is refused (QueueFull)
    max_open_jobs_of_tenant: int | None = None  # the same, counting only the submitting tenant's jobs
    webhook_networks: list[str] = field(default_factory=list)  # non-public networks webhooks may reach
    limits: Limits = Limits()  # sizes, spaces, timeouts and arrays beyond which a spec is refused (AdmissionRefused)
    default_arch: str = "sm_90"  # the submitted kernel is compiled for this arch unless its spec names one
    compiles: int | None = None  # submitted kernels compiled at once in this process (None: no bound)

    @classmethod
    def of(cls, settings: Settings) -> "Admission":
        return cls(max_open_jobs=settings.max_open_jobs, webhook_networks=settings.webhook_allowed_networks,
                   limits=Limits.of(settings), default_arch=settings.default_arch,
                   compiles=settings.admission_compiles)


class AdmissionRefused(ValueError):
    """The spec cannot run as it is; nothing was recorded. `errors` name every field at fault and its fix."""

    def __init__(self, errors: list[FieldError]):
        super().__init__("; ".join(map(str, errors)))
        self.errors = errors


class QueueFull(RuntimeError):
    """No room for the submission now, nothing recorded: the same submission may be sent again later."""

    @classmethod
    def of_open_jobs(cls, open_jobs: int, of_tenant: bool) -> "QueueFull":
        return cls(f"{open_jobs} of your jobs are unfinished, as many as one API key may have open; "
                   "submit again once some have finished" if of_tenant else
                   f"{open_jobs} jobs are unfinished, as many as this kforge accepts; "
                   "submit again once some have finished")


class JobFinished(RuntimeError):
    """The job has ended already: there is nothing left to cancel."""


def submit_job(store: EventStore, bus: Bus, spec: KernelSpec, submitted_by: str = "cli", run: str | None = None,
               admission: Admission = Admission(), tenant: str = LOCAL_TENANT, owner: JobOwner | None = None) -> str:
    """Record a job of `tenant` and wake the planner; `owner`, in embedded mode, is this process, which runs
    the job. Refused, with nothing recorded: a spec that cannot run as it is (AdmissionRefused, naming every
    field at fault at once) and, past `admission.max_open_jobs` unfinished jobs (or `max_open_jobs_of_tenant`
    of the tenant's) or while every admission compile is taken (`admission.compiles`), any job (QueueFull)."""
    errors = [*limit_errors(spec, admission.limits), *_webhook_errors(spec, admission.webhook_networks),
              *_strategy_errors(spec), *_kernel_errors(spec, admission)]
    if errors:
        raise AdmissionRefused(errors)
    job_id = uuid4().hex[:12]
    stream = job_stream(job_id)
    ends = tuple(t.__name__ for t in JOB_ENDS)
    limits = []
    if admission.max_open_jobs is not None:
        limits.append(OpenLimit(JobSubmitted.__name__, ends, admission.max_open_jobs))
    if admission.max_open_jobs_of_tenant is not None:
        limits.append(OpenLimit(JobSubmitted.__name__, ends, admission.max_open_jobs_of_tenant,
                                where=("tenant", tenant)))
    if owner is not None:
        owner.claim(job_id)
    try:
        store.append(stream, [JobSubmitted(stream_id=stream, spec=spec, submitted_by=submitted_by, run=run,
                                           tenant=tenant)],
                     expected_version=0, open_limits=limits)
    except TooManyOpen as exc:
        raise QueueFull.of_open_jobs(exc.open_streams, of_tenant=exc.limit.where is not None) from None
    bus.dispatch(PlannerCatchUp.message(reason=f"{stream} submitted"))
    return job_id


def _kernel_errors(spec: KernelSpec, admission: Admission) -> list[FieldError]:
    try:
        return kernel_errors(spec, admission.default_arch, slots=admission.compiles)
    except CompilesBusy as exc:
        raise QueueFull(str(exc)) from None


def _strategy_errors(spec: KernelSpec) -> list[FieldError]:
    unknown = unknown_strategy(spec.strategy.name)
    return [FieldError("strategy.name", unknown)] if unknown else []


def _webhook_errors(spec: KernelSpec, networks: list[str]) -> list[FieldError]:
    if spec.webhook_url is None:
        return []
    try:
        allowed_addresses(str(spec.webhook_url), networks)
    except WebhookUrlRefused as exc:
        return [FieldError("webhook_url", str(exc))]
    return []


def cancel_job(store: EventStore, bus: Bus, job_id: str, reason: str, cancelled_by: str) -> JobView:
    """End an unfinished job; JobFinished if it has ended."""
    _record_cancel(store, job_id, reason, cancelled_by)
    bus.dispatch(PlannerCatchUp.message(reason=f"{job_stream(job_id)} cancelled"))  # its webhook goes out
    return get_job(store, job_id)


def _record_cancel(store: EventStore, job_id: str, reason: str, cancelled_by: str) -> None:
    """Racing the planner's last word is safe: the append expects the version read, so whichever end is
    recorded first stands."""
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
            return
        except ConcurrencyConflict:
            continue  # the job moved on meanwhile: look again


def cancel_orphaned_jobs(store: EventStore, home: Path, database_url: str) -> list[str]:
    """Cancel the unfinished jobs of the embedded processes that ran jobs of `store` (at `database_url`) from
    `home` and have ended (shared/adapters/job_owners.py); returns their ids.

    Cancelled rather than resumed: the process that finds them may be a `kforge jobs` that exits at once, its
    in-process workers with it, which would orphan them again, and a job resumed unasked would spend GPU time
    that nobody follows. For the same reason the planner is not woken here: the next process that runs one
    catches up with the cancellations (and sends their webhooks) from its tracked position."""
    cancelled = []
    for owner in dead_owners(home, database_url):
        reason = (f"`{owner.command}` (pid {owner.pid}), which ran this job in its own process, was killed or "
                  "ended before the job did; submit the job again to rerun it (for kforge tune: run that command "
                  "again)")
        for job_id in owner.job_ids:
            try:
                _record_cancel(store, job_id, reason, cancelled_by="kforge")
            except (JobFinished, KeyError):  # it had ended, or was never recorded
                continue
            cancelled.append(job_id)
        owner.release()
    return cancelled


def get_job(store: EventStore, job_id: str) -> JobView | None:
    events = store.read_stream(job_stream(job_id))
    return project_job(events, job_id) if events else None


def list_jobs(store: EventStore) -> list[JobView]:
    """Every job, oldest first: a one-off read (the CLI's); a long-running process keeps a JobIndex."""
    index = JobIndex(store)
    index.catch_up()
    return index.jobs()


class JobIndex:
    """Every job's JobView, kept in memory and carried on from the store's global order: each catch_up
    reads only the events after the position it reached, so listing jobs costs one indexed query, however
    large their events are, instead of reading every event of every job per request.

    In memory rather than a projection table: the store stays the one truth and the one schema, nothing
    needs migrating, and each gateway process catching up from the store agrees with the others. An event
    that cannot be decoded marks its own job (JobView.unreadable) and the index goes on past it."""

    def __init__(self, store: EventStore, batch: int = 500):
        self.store, self.batch = store, batch
        self._views: dict[str, JobView] = {}  # in order of each job's first event: oldest first
        self._position = 0
        self._lock = threading.Lock()  # request threads and the stream poller catch up alike
        self._listeners: list[Callable[[list[Event | Undecodable]], None]] = []

    def on_events(self, listener: Callable[[list[Event | Undecodable]], None]) -> None:
        """Have `listener` called with every batch of events read from now on, once each, in order."""
        with self._lock:
            self._listeners.append(listener)

    def catch_up(self) -> int:
        """Read and fold what was stored since the last catch-up; returns the position reached."""
        with self._lock:
            while batch := self.store.read_log(self._position, self.batch):
                for stream, events in by_stream(e for e in batch if e.stream_id.startswith("job-")).items():
                    job_id = job_id_of(stream)
                    self._views[job_id] = project_job(events, job_id, since=self._views.get(job_id))
                self._position = batch[-1].position
                for listener in self._listeners:
                    listener(batch)
            return self._position

    def get(self, job_id: str) -> JobView | None:
        with self._lock:
            return self._views.get(job_id)

    def jobs(self) -> list[JobView]:
        with self._lock:
            return list(self._views.values())


def job_events(store: EventStore, job_id: str) -> list[Event]:
    return store.read_stream(job_stream(job_id))


class UnknownJob(LookupError):
    """No job, or more than one, has an id starting with what was given (`matches`: how many do)."""

    def __init__(self, prefix: str, matches: int):
        super().__init__(f"no job starts with {prefix!r}" if not matches else
                         f"{matches} jobs start with {prefix!r}: give more of the id")
        self.prefix, self.matches = prefix, matches


def find_job_ids(store: EventStore, prefix: str = "", among: Collection[str] | None = None) -> list[str]:
    """Jobs whose id starts with `prefix`, oldest first; only those `among` when it is given (a caller's own)."""
    ids = [job_id_of(s) for s in store.stream_ids(job_stream(prefix))]
    return ids if among is None else [j for j in ids if j in among]


def resolve_job_id(store: EventStore, prefix: str, among: Collection[str] | None = None) -> str:
    """The one job whose id starts with `prefix` (a whole id is its own prefix), as git takes a unique prefix
    of a commit; of the jobs `among` only, when given, so that a caller learns nothing of others' jobs.
    UnknownJob when none or several do. The one resolver of the CLI, the Python API and the gateway."""
    matches = find_job_ids(store, prefix, among) if prefix else []
    if len(matches) != 1:
        raise UnknownJob(prefix, len(matches))
    return matches[0]


class NoProgress(RuntimeError):
    """Following a job stopped before its end: nothing is left that could move it on (`reason` says why)."""

    def __init__(self, view: JobView, reason: str):
        super().__init__(f"job {view.job_id} is still {view.status}, but {reason}")
        self.view, self.reason = view, reason


class JobFollower:
    """One job followed event by event, the one way kforge follows a job: each event after the last one taken
    is folded onto the view so far, once, and one taken already (read, then delivered live as well) is skipped.
    `follow_job` feeds it by reading the store; the gateway's live stream by reading the store once, then from
    the events its poller hands on (services/gateway/stream.py)."""

    def __init__(self, job_id: str):
        self.view = JobView(job_id=job_id)

    def take(self, events: Iterable[Event | Undecodable]) -> list[Event | Undecodable]:
        """The events of `events` (the job's, in stream order) not taken before, folded onto the view."""
        new, version = [], self.view.version
        for event in events:
            if event.stream_version > version:
                new.append(event)
                version = event.stream_version
        if new:
            self.view = project_job(new, since=self.view)
        return new

    def read(self, store: EventStore) -> list[Event]:
        """What the store holds of the job after the events taken so far, taken: a long tune is read once, not
        once per poll."""
        return self.take(store.read_stream(job_stream(self.view.job_id), after_version=self.view.version))


def follow_job(store: EventStore, job_id: str, on_event: Callable[[Event], None], timeout_s: float,
               poll_s: float = 0.1, stalled: Callable[[], str | None] = lambda: None,
               stall_s: float | None = None) -> JobView:
    """Report each new event of a job until it finishes or `timeout_s` passes; returns the last view.
    NoProgress when `stalled` (Bus.stalled) says no work is left to move the job on, or no event came for
    `stall_s` seconds."""
    follower = JobFollower(job_id)
    deadline = time.monotonic() + timeout_s
    progressed = time.monotonic()
    while True:
        why = stalled()  # asked before reading: what the work did before it stopped is then read, not missed
        new = follower.read(store)
        for event in new:
            on_event(event)
        if new:
            progressed = time.monotonic()
        if follower.view.finished:
            return follower.view
        if (why := _no_progress(why, stall_s, progressed, "it recorded no event for {} s")) is not None:
            raise NoProgress(follower.view, why)
        if time.monotonic() > deadline:
            return follower.view
        time.sleep(poll_s)


@dataclass
class Followed:
    """Where following several jobs left them: each one's last view, in the order given, and, when following
    stopped before they all ended because nothing could move them on, why (as NoProgress says); when it did not,
    those unfinished ran past the deadline."""

    views: list[JobView]
    stalled: str | None = None

    @property
    def unfinished(self) -> list[JobView]:
        return [view for view in self.views if not view.finished]


def follow_jobs(store: EventStore, job_ids: list[str], on_end: Callable[[JobView], None], timeout_s: float,
                poll_s: float = 0.1, stalled: Callable[[], str | None] = lambda: None,
                stall_s: float | None = None) -> Followed:
    """Follow several jobs at once until they all finish or `timeout_s` passes, one deadline for them all;
    `on_end(view)` as each finishes, in the order they do. Stops early by follow_job's rule: `stalled` says no
    work is left to move them on, or none of them recorded an event for `stall_s` seconds (jobs run in turn, so
    one waiting for its turn records nothing while another runs: the bound is on them together)."""
    followers = [JobFollower(job_id) for job_id in job_ids]
    deadline = time.monotonic() + timeout_s
    progressed = time.monotonic()
    while True:
        why = stalled()  # asked before reading, as follow_job does
        for follower in followers:
            if follower.view.finished:
                continue
            if follower.read(store):
                progressed = time.monotonic()
            if follower.view.finished:
                on_end(follower.view)
        followed = Followed([follower.view for follower in followers])
        if not followed.unfinished:
            return followed
        if (why := _no_progress(why, stall_s, progressed, "none of them recorded an event for {} s")) is not None:
            return Followed(followed.views, why)
        if time.monotonic() > deadline:
            return followed
        time.sleep(poll_s)


def _no_progress(why: str | None, stall_s: float | None, progressed: float, saying: str) -> str | None:
    """Why following must stop, or None: `why` (from Bus.stalled) first, else, when no event came since `progressed`
    (time.monotonic()) for `stall_s` seconds, `saying` with those seconds."""
    if why is None and stall_s is not None and time.monotonic() - progressed > stall_s:
        return saying.format(f"{stall_s:.0f}")
    return why
