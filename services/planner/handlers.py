"""The planner follows the global event log from its tracked position, one event per transaction."""
import logging

from services.planner.policy import NOTHING, TRIGGERS, Reaction, react
from shared.adapters.bus import Bus
from shared.adapters.eventstore import EventStore
from shared.application.worker_task import FailedAt
from shared.domain.events import Event, TaskFailed
from shared.domain.projections import project_job
from shared.domain.steps import project_optimisation

CONSUMER = "planner"
log = logging.getLogger(__name__)


def catch_up(store: EventStore, bus: Bus, gpus: list[str]) -> int:
    """React to every event not yet processed; returns how many reactions were decided."""
    processed = 0
    while True:
        with store.consuming(CONSUMER) as consumption:
            event = consumption.next_event(TRIGGERS)
            if event is None:
                return processed
            if event.stream_id.startswith("job-"):
                # The job as it is now, not as of the event: a result queued behind another for a job
                # that has since finished must see that it finished.
                events = consumption.read_stream(event.stream_id)
                reaction = _reaction(event, events, gpus)
                # The consuming transaction holds the store's write lock, so no other writer can move the
                # stream between this read and this append; derived ids make a repeat a no-op.
                consumption.append(event.stream_id, reaction.events, expected_version=None)
                # Sent before the tracking position commits: a crash here means sending again (at least
                # once), never not at all. Receivers are idempotent.
                for message in reaction.messages:
                    bus.dispatch(message)
            consumption.advance(event.position)
            processed += 1


def _reaction(event: Event, events: list[Event], gpus: list[str]) -> Reaction:
    """The planner's reaction to one event of a job. Only deciding is tied to the event: a fault there is the
    job's (FailedAt names it, and the task's retries and TaskFailed follow), while a fault of the store is no
    job's and leaves the event to the next catch-up. An event whose reaction failed on every attempt is passed
    over: the TaskFailed recorded after it ends the job."""
    if any(isinstance(e, TaskFailed) and e.request_id == event.event_id for e in events):
        return NOTHING
    try:
        return react(event, project_job(events), gpus, project_optimisation(events))
    except Exception as exc:
        raise FailedAt(event.stream_id, event.event_id) from exc
