"""The bus: one Celery app; services address each other's tasks by name (shared.domain.contracts).

Two ways to carry a message:
- CeleryBus sends it to Redis, to the worker serving its queue (`planner`, `benchmark.0`, ...).
- InProcessBus (embedded mode, no REDIS_URL) runs the same Celery task in this process, on a background
  thread per queue, each in arrival order: one process then runs a whole job, and the CLI shows progress
  from the event store exactly as it does when real workers do the work.
Handlers are idempotent, which is what makes acks_late with reject-on-worker-loss safe: a message
redelivered after a crash appends nothing twice (the ids of the events it appends derive from what it answers,
and appending events the store holds already stores nothing: shared/application/requests.py).
"""
import logging
import queue
import threading
from typing import Protocol

from celery import Celery

from shared.adapters.settings import Settings
from shared.domain.contracts import GENERATOR_QUEUE, PLANNER_QUEUE, VERIFIER_QUEUE, WEBHOOKS_QUEUE, Message

log = logging.getLogger(__name__)

# Tasks register on this app when their service's tasks module is imported. shared/application/runtime.py configures it,
# with configure_celery below, and nothing else does; it opens no connection until used.
celery_app = Celery("kforge")


def configure_celery(app: Celery, settings: Settings) -> Celery:
    app.conf.update(
        broker_url=settings.redis_url or "memory://",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=PLANNER_QUEUE,
        task_routes={"planner.*": {"queue": PLANNER_QUEUE}, "generator.*": {"queue": GENERATOR_QUEUE},
                     "verifier.*": {"queue": VERIFIER_QUEUE}, "webhooks.*": {"queue": WEBHOOKS_QUEUE}},
        # Kombu hands back a dead worker's unacknowledged message once the visibility timeout has passed,
        # checking every unacked_restore_interval seconds (throttle 1: every check scans).
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_s,
                                  "unacked_restore_interval": min(10.0, settings.visibility_timeout_s / 2),
                                  "unacked_restore_throttle": 1},
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
    )
    return app


class Bus(Protocol):
    def dispatch(self, message: Message) -> None: ...

    def wait_idle(self) -> None:
        """Return once this process's own tasks have run (a CLI waits so its workers' last records land)."""

    def stalled(self) -> str | None:
        """Why the work this process runs can move no job on any more, or None while it may."""


class CeleryBus:
    def __init__(self, app: Celery):
        self.app = app

    def dispatch(self, message: Message) -> None:
        self.app.send_task(message.task, kwargs=message.kwargs, queue=message.queue, task_id=message.message_id,
                           countdown=message.delay_s or None)

    def wait_idle(self) -> None:
        """Tasks run in worker processes, which record on their own: nothing here to wait for."""

    def stalled(self) -> str | None:
        """The workers are other processes: whether they still work is not known here."""
        return None


class InProcessBus:
    """Celery's tasks run in this process: one thread per queue, as one worker per queue would, so the
    benchmark queues of two GPUs run side by side while each queue runs its tasks one at a time."""

    def __init__(self, app: Celery):
        self.app = app
        self._queues: dict[str, queue.Queue[Message]] = {}
        self._threads: list[threading.Thread] = []
        self._pending = 0
        self._idle = threading.Condition()

    def dispatch(self, message: Message) -> None:
        with self._idle:
            self._pending += 1
        if message.delay_s:
            timer = threading.Timer(message.delay_s, self._enqueue, args=(message,))
            timer.daemon = True
            timer.start()
        else:
            self._enqueue(message)

    def _enqueue(self, message: Message) -> None:
        with self._idle:
            if message.queue not in self._queues:
                self._queues[message.queue] = queue.Queue()
                self._threads.append(threading.Thread(target=self._work, args=(self._queues[message.queue],),
                                                      daemon=True, name=f"kforge-inprocess-{message.queue}"))
                self._threads[-1].start()
            self._queues[message.queue].put(message)

    def wait_idle(self) -> None:
        """Block until every dispatched message, and every message those dispatched, has run."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)

    def stalled(self) -> str | None:
        """A worker thread that died (a task that raised past every handler, even SystemExit) leaves its queue
        unserved; with nothing pending, nothing is left to run. Either way no event is coming from here."""
        with self._idle:
            dead = [t.name for t in self._threads if not t.is_alive()]
            if dead:
                return f"the in-process worker {dead[0]} stopped"
            if self._pending == 0:
                return "the in-process workers have nothing left to run"
        return None

    def _work(self, messages: "queue.Queue[Message]") -> None:
        while True:
            message = messages.get()
            try:
                result = self.app.tasks[message.task].apply(kwargs=message.kwargs, task_id=message.message_id)
                if result.failed():
                    log.error("task %s (%s) failed:\n%s", message.task, message.message_id, result.traceback)
            except Exception:  # a broken task must not stop the worker thread
                log.exception("task %s (%s) could not run", message.task, message.message_id)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
