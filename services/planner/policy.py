"""What the planner does in reaction to one event, given the job's current state: a pure function.

Every event the planner appends gets an id derived from the event it reacts to, so deciding twice
(a redelivered or restarted planner) yields the same ids and the store keeps only the first.
Work for other services is dispatched when the planner reaches the request *event* in the log, so a
crash between appending a request and sending it cannot lose the request.
"""
import zlib
from dataclasses import dataclass, field
from functools import singledispatch

from shared.contracts import MeasureBaseline, Message, benchmark_queue
from shared.events import (BaselineFailed, BaselineMeasured, BaselineRequested, Event, JobCompleted, JobFailed,
                           JobSubmitted, derived_id)
from shared.projections import JobView, job_id_of


@dataclass(frozen=True)
class Reaction:
    events: list[Event] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


NOTHING = Reaction()


def react(event: Event, job: JobView, gpus: list[str]) -> Reaction:
    if job.finished:
        return NOTHING  # a late result, or a request still in the log, changes nothing for a finished job
    return _react(event, job, gpus)


@singledispatch
def _react(event: Event, job: JobView, gpus: list[str]) -> Reaction:
    return NOTHING


@_react.register
def _(event: JobSubmitted, job: JobView, gpus: list[str]) -> Reaction:
    # Spread jobs over the GPU workers by a stable hash of the job id (Python's hash() is salted per process).
    gpu = gpus[zlib.crc32(event.stream_id.encode()) % len(gpus)]
    request = BaselineRequested(event_id=derived_id(event.event_id, "BaselineRequested"), stream_id=event.stream_id,
                                queue=benchmark_queue(gpu), params=event.spec.baseline_params())
    return Reaction(events=[request])


@_react.register
def _(event: BaselineRequested, job: JobView, gpus: list[str]) -> Reaction:
    return Reaction(messages=[MeasureBaseline.message(event.queue, job_id_of(event.stream_id), event.event_id)])


@_react.register
def _(event: BaselineMeasured, job: JobView, gpus: list[str]) -> Reaction:
    label = " (replayed measurement)" if event.replay else ""
    summary = f"baseline {event.median_ms:.4f} ms on {event.device}{label}, grid {event.grid}, block {event.block}"
    return Reaction(events=[JobCompleted(event_id=derived_id(event.event_id, "JobCompleted"),
                                         stream_id=event.stream_id, summary=summary)])


@_react.register
def _(event: BaselineFailed, job: JobView, gpus: list[str]) -> Reaction:
    return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id,
                                      stage=event.stage, reason=event.reason)])
