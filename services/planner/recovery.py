"""Recovery from a broker that lost messages (Redis restarted without persistence, a publish that failed
while it was down): the event store is the record of what is owed, so nothing is lost for good.

Every few seconds a planner worker catches up with the log (a lost PlannerCatchUp costs only this wait),
then sends again each request still owed an answer for which the broker holds no message, queued or
delivered. Only requests the planner has passed count: one it has not reached yet is sent when it does.
A worker holding a request's message keeps it in the broker's unacknowledged set until it has answered,
so a running task is never sent twice; should a message be sent twice anyway, handlers are idempotent.
"""
import logging
import threading
import time
from collections.abc import Callable

from services.planner.handlers import CONSUMER, catch_up
from services.planner.policy import request_message
from shared.adapters.broker import Broker, known_queues
from shared.adapters.bus import Bus
from shared.adapters.eventstore import EventStore
from shared.application.requests import ALL_ANSWERS, ANSWERS, outstanding_requests
from shared.domain.events import JOB_ENDS, Event
from shared.domain.projections import by_stream

log = logging.getLogger(__name__)
LOCK_KEY = "kforge:recovery"
# What deciding which requests are owed needs, and no more: never a job's measurements.
_RECORD_TYPES = sorted({t.__name__ for t in (*ANSWERS, *ALL_ANSWERS, *JOB_ENDS)})


def resend_lost(store: EventStore, bus: Bus, broker: Broker, gpus: list[str]) -> list[Event]:
    """Send again the messages of owed requests the broker no longer holds; returns those requests."""
    passed = store.tracked_position(CONSUMER)
    streams = by_stream(store.read_types(_RECORD_TYPES, "job-"))
    owed = [r for history in streams.values() for r in outstanding_requests(history) if r.position <= passed]
    if not owed:
        return []
    held = {task_id.split(":")[0] for task_id in broker.task_ids(known_queues(gpus))}  # a retry is <request>:<n>
    lost = [r for r in owed if str(r.event_id) not in held]
    for request in lost:
        bus.dispatch(request_message(request))
    return lost


def recover_once(store: EventStore, bus: Bus, broker: Broker, gpus: list[str], interval_s: float) -> list[Event]:
    catch_up(store, bus, gpus)
    # One planner replica at a time scans the broker: two at once could both see a message missing.
    if not broker.claim(LOCK_KEY, interval_s):
        return []
    lost = resend_lost(store, bus, broker, gpus)
    if lost:
        log.warning("sent %d request(s) again that the broker had lost: %s", len(lost),
                    ", ".join(f"{r.type} of {r.stream_id}" for r in lost))
    return lost


def start_recovery(get_runtime: Callable, interval_s: float) -> threading.Thread:
    """Recover every `interval_s` seconds in a daemon thread of this (planner) worker process."""

    def loop() -> None:
        broker = None
        while True:
            time.sleep(interval_s)
            try:
                rt = get_runtime()
                broker = broker or Broker(rt.settings.redis_url)
                recover_once(rt.store, rt.bus, broker, rt.settings.gpus, interval_s)
            except Exception as exc:  # the broker or the database is away: try again next round
                log.warning("recovery round skipped: %s", exc)

    thread = threading.Thread(target=loop, name="kforge-recovery", daemon=True)
    thread.start()
    return thread
