"""A job's baseline measured on GPU 0 by the benchmark's own handler, asked for as the planner asks for it."""
from pathlib import Path
from uuid import uuid4

from services.benchmark import handlers
from services.benchmark.resources import BenchmarkResources
from services.planner.policy import react
from shared.adapters.eventstore import EventStore
from shared.domain.events import Event, JobSubmitted
from shared.domain.projections import project_job
from shared.domain.spec import KernelSpec
from tests.fakes import RecordingBus


def baseline_events(folder: Path, spec: KernelSpec) -> list[Event]:
    """The job's events once the benchmark has answered its baseline request (the store lives in `folder`)."""
    store = EventStore(f"sqlite:///{folder / 'e.db'}")
    stream = f"job-{uuid4().hex[:12]}"
    submitted = store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)[0]
    request = react(submitted, project_job([submitted]), ["0"]).events
    store.append(stream, request, expected_version=1)
    resources = BenchmarkResources(0)
    try:
        handlers.measure_baseline(store, RecordingBus(), stream.removeprefix("job-"), request[0].event_id, resources)
    finally:
        resources.close()
    return store.read_stream(stream)
