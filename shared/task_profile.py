"""Workers record the effort behind each request: when the task started, how long it ran, how much memory
the worker process has needed. The pipeline profile reads queue wait and stage times from these records."""
import os
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from uuid import UUID

from shared.events import TaskProfiled, derived_id
from shared.eventstore import EventStore
from shared.projections import job_stream


def peak_rss_mb() -> float:
    """This process's peak resident memory, and its GPU and compile child processes' (Linux: ru_maxrss in KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


@contextmanager
def profiled(store: EventStore, job_id: str, request_id: UUID, task: str) -> Iterator[None]:
    """Record the task once it has answered; a task that raised is retried or redelivered, and the attempt
    that answers is the one recorded (the derived id keeps a redelivered task from recording twice)."""
    started_at, start = datetime.now(UTC), time.perf_counter()
    yield
    stream = job_stream(job_id)
    record = TaskProfiled(event_id=derived_id(request_id, "TaskProfiled"), stream_id=stream, request_id=request_id,
                          task=task, worker=f"{socket.gethostname()}:{os.getpid()}", started_at=started_at,
                          wall_s=time.perf_counter() - start, peak_rss_mb=peak_rss_mb())
    store.append(stream, [record], expected_version=None)
