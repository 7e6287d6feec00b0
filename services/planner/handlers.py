"""The planner follows the global event log from its tracked position, one event per transaction."""
import logging

from services.planner.policy import TRIGGERS, react
from shared.bus import Bus
from shared.eventstore import EventStore
from shared.projections import project_job
from shared.steps import project_optimisation

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
                reaction = react(event, project_job(events), gpus, project_optimisation(events))
                # The consuming transaction holds the store's write lock, so no other writer can move the
                # stream between this read and this append; derived ids make a repeat a no-op.
                consumption.append(event.stream_id, reaction.events, expected_version=None)
                # Sent before the tracking position commits: a crash here means sending again (at least
                # once), never not at all. Receivers are idempotent.
                for message in reaction.messages:
                    bus.dispatch(message)
            consumption.advance(event.position)
            processed += 1
