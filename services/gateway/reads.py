"""What a caller may read: its tenant's jobs (every tenant's for an admin key), from this gateway process's
JobIndex, caught up from the store before each answer so that a job submitted a moment ago is there."""
import threading
from collections.abc import Callable

from fastapi import HTTPException, status

from services.gateway.access import Caller
from services.gateway.stream import StreamHub
from shared.application.jobs import JobIndex
from shared.application.runtime import Runtime
from shared.domain.projections import JobView


class Reads:
    def __init__(self, get_runtime: Callable[[], Runtime]):
        self.get_runtime = get_runtime
        self._lock = threading.Lock()
        self._made: tuple[JobIndex, StreamHub] | None = None

    def _make(self) -> tuple[JobIndex, StreamHub]:
        # On first use, not at app creation: the runtime is built lazily.
        with self._lock:
            if self._made is None:
                rt = self.get_runtime()
                index = JobIndex(rt.store)
                self._made = index, StreamHub(index, lambda: (rt.settings.sse_max_streams,
                                                               rt.settings.sse_max_streams_per_key))
            return self._made

    @property
    def hub(self) -> StreamHub:
        return self._make()[1]

    def jobs(self, caller: Caller) -> list[JobView]:
        """The caller's jobs, oldest first."""
        index = self._make()[0]
        index.catch_up()
        return [job for job in index.jobs() if caller.sees(job)]

    def job(self, caller: Caller, job_id: str) -> JobView:
        """The job, or 404 whether it is missing or another tenant's: the answer says nothing of which."""
        index = self._make()[0]
        index.catch_up()
        job = index.get(job_id)
        if job is None or not caller.sees(job):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
        return job

    def among(self, caller: Caller) -> set[str] | None:
        """The job ids a report across jobs may read for the caller; None: every job."""
        return None if caller.admin else {job.job_id for job in self.jobs(caller)}
