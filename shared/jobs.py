"""Submitting and reading jobs: the operations the CLI, the Python API and the gateway share."""
import time
from collections.abc import Callable
from uuid import uuid4

from shared.bus import Bus
from shared.contracts import PlannerCatchUp
from shared.events import Event, JobSubmitted
from shared.eventstore import EventStore
from shared.projections import JobView, job_id_of, job_stream, project_job
from shared.spec import KernelSpec


def submit_job(store: EventStore, bus: Bus, spec: KernelSpec, submitted_by: str = "cli", run: str | None = None) -> str:
    job_id = uuid4().hex[:12]
    stream = job_stream(job_id)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec, submitted_by=submitted_by, run=run)],
                 expected_version=0)
    bus.dispatch(PlannerCatchUp.message(reason=f"{stream} submitted"))
    return job_id


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
