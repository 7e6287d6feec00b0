"""The base of every worker task: a task that raises what its handler did not expect is tried again, a
bounded number of times (KFORGE_TASK_RETRIES), then answers its request with TaskFailed and wakes the
planner, which ends the job. Without this a job whose task raised waited for an answer that never came.

Expected outcomes (a compile error, a wrong output, no device) are events the handlers record themselves;
what reaches here is a fault of kforge or of its worker (an import error, a GPU process that died)."""
import logging
import time
from uuid import UUID

from celery import Task
from celery.exceptions import Retry

from shared.application import runtime
from shared.domain.contracts import PlannerCatchUp
from shared.domain.events import TaskFailed, derived_id
from shared.domain.projections import job_stream

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = 0.5  # doubled on each retry: a fault that passes (a GPU process replaced) gets a moment


class FailedAt(Exception):
    """Raised, from the fault, by a task whose work is not one request (the planner's catch-up) to name the
    event of a job it failed on, so the failure is recorded in that job."""

    def __init__(self, stream_id: str, event_id: UUID):
        super().__init__(f"reacting to event {event_id} of {stream_id}")
        self.stream_id, self.event_id = stream_id, event_id


class AnsweringTask(Task):
    """Use as `celery_app.task(base=AnsweringTask, ...)`; the task's kwargs carry `job_id` and `request_id`, or
    its fault is a FailedAt."""

    def __call__(self, *args, **kwargs):
        retries = runtime.current().settings.task_retries
        for attempt in range(1, retries + 2):
            try:
                # run, not super().__call__: Celery's tracer has pushed the request (its id, its retries),
                # which Task.__call__ would replace with a bare one outside a worker (embedded mode's apply).
                return self.run(*args, **kwargs)
            except Retry:
                raise  # Celery retrying what the task declared retryable (autoretry_for): not a fault
            except Exception as exc:
                if attempt <= retries:
                    log.warning("task %s (%s) failed on attempt %d of %d; trying again", self.name,
                                self.request.id, attempt, retries + 1, exc_info=True)
                    time.sleep(RETRY_BACKOFF_S * 2 ** (attempt - 1))
                    continue
                log.error("task %s (%s) failed on attempt %d of %d; answering its request with TaskFailed",
                          self.name, self.request.id, attempt, retries + 1, exc_info=True)
                self._record(exc, kwargs, attempt)

    def _record(self, exc: Exception, kwargs: dict, attempts: int) -> None:
        fault = exc.__cause__ if isinstance(exc, FailedAt) and exc.__cause__ else exc
        if isinstance(exc, FailedAt):
            stream, request_id = exc.stream_id, exc.event_id
        elif "job_id" in kwargs and "request_id" in kwargs:
            stream, request_id = job_stream(kwargs["job_id"]), UUID(kwargs["request_id"])
        else:  # a fault of no job's (the database away): the next catch-up tries again
            return
        rt = runtime.current()
        failed = TaskFailed(event_id=derived_id(request_id, "TaskFailed", self.name), stream_id=stream,
                            request_id=request_id, task=self.name, error_type=type(fault).__name__,
                            error=str(fault), attempts=attempts)
        try:
            rt.store.append(stream, [failed], expected_version=None)
        except Exception:  # the store is away too: the request stays owed, and recovery sends it again
            log.exception("could not record the failure of task %s (%s)", self.name, self.request.id)
            return
        rt.bus.dispatch(PlannerCatchUp.message(reason=f"{stream} task {self.name} failed"))
