"""Workers record the effort behind each request: when the task started, how long it ran, how much memory
the worker process has needed. The pipeline profile reads queue wait and stage times from these records."""
import os
import resource
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from shared.adapters.eventstore import EventStore
from shared.domain.events import TaskProfiled, derived_id
from shared.domain.projections import job_stream


def peak_rss_mb() -> float:
    """The worker's peak resident memory with its live child processes' (the GPU process, the compile pool),
    each at its own peak: an upper bound of their peak together. ru_maxrss (KiB on Linux) alone would miss
    children still running, which is what a warm worker's are."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (own + sum(_peak_kib(pid) for pid in _children())) / 1024


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path("/proc/self/task").glob("*/children"):
        try:
            pids += [int(pid) for pid in task.read_text().split()]
        except OSError:  # the thread ended between the listing and the read
            continue
    return pids


def _peak_kib(pid: int) -> int:
    """VmHWM, a process's high-water resident set; 0 when it has exited meanwhile."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next((line for line in status.splitlines() if line.startswith("VmHWM:")), "VmHWM: 0 kB")
    return int(line.split()[1])


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
