"""The request/answer protocol between the planner and the workers, in one place.

The planner asks by appending a request event to a job's stream (BaselineRequested, TuningRequested, ...;
the keys of ANSWERS) and sending a message that carries the job's and the request's ids. A worker answers
by appending one of that request's ANSWERS, after whatever it records on the way (KernelCompiled,
SanitizerChecked, GeneratorCalled), and by waking the planner (PlannerCatchUp). `answer_request` is that
sequence, for every handler that answers a request with one task: read the stream, check the request is
still owed an answer (`needs_answer`), find the submission and the request, compute, append, wake the planner.
Webhook deliveries, whose one request is answered over several tasks (one per attempt), use `needs_answer`
under the same rule. `outstanding_requests` is what recovery sends again when the broker lost a message.

One concurrency rule, for every answer: its events carry ids derived from the request (`derived_id(request_id,
...)`), and they are appended with `expected_version=None`, after whatever the stream gained meanwhile.
- While a worker computes, its job's stream gains events that have nothing to do with its answer: another
  task's TaskProfiled, another shard's ConfigMeasured, the planner's next request, a cancel. None of them makes
  the answer wrong, so none of them may refuse it. An expected version would refuse it, and the task retried
  would measure on the GPU again for nothing. (An answer that lands after a cancel is recorded, and the planner
  does nothing with it: a late result changes nothing for a finished job.)
- The same answer twice is stored once. The event store appends under one database-wide lock (BEGIN IMMEDIATE
  on SQLite, an advisory transaction lock on PostgreSQL, both taken before it reads) and, when every id appended
  is stored already, returns the stored events and stores nothing; `event_id` is unique in its table besides.
  So a redelivered task, or a second worker holding the same message, appends nothing twice, on either database.
- A different answer to the same request (a second worker's, whose launch failed where the first's ran) shares
  some of its derived ids with the first: the store refuses it whole (ConcurrencyConflict: "k of n events were
  already stored"), `answer_request` reads the stream again, finds the request answered, and the first answer
  stands. Only a request still owed after such a conflict raises it (the task is tried again).
What the rule does not catch: two answers with no id in common (a compile error where the other worker
compiled) computed at once, both stored. `needs_answer`, checked before computing, leaves that to two workers
holding one request at the same time, which the broker's acknowledgements and recovery avoid.
"""
from collections.abc import Callable, Sequence
from typing import TypeVar
from uuid import UUID

from shared.adapters.bus import Bus
from shared.adapters.eventstore import ConcurrencyConflict, EventStore
from shared.domain.contracts import PlannerCatchUp
from shared.domain.events import (JOB_ENDS, BaselineFailed, BaselineMeasured, BaselineRequested, CandidateGenerated,
                                  CandidateRejected, CandidateVerified, ComparisonRequested, Event, GenerationFailed,
                                  GenerationRequested, JobCancelled, JobSubmitted, KernelsCompared, PlanProposed,
                                  ShardTuned, StepBrokenDown, StepValidated, TaskFailed, TuningRequested,
                                  VerificationIncomplete, VerificationRequested, WebhookAbandoned, WebhookDelivered,
                                  WebhookRequested)
from shared.domain.projections import job_stream

RequestT = TypeVar("RequestT", bound=Event)

# What answers each request: a request with none of these is still owed its answer. TaskFailed answers
# every request, so recovery does not send again the work of a task that failed on every attempt.
ANSWERS: dict[type[Event], tuple[type[Event], ...]] = {
    BaselineRequested: (BaselineMeasured, BaselineFailed, TaskFailed),
    TuningRequested: (ShardTuned, TaskFailed),
    VerificationRequested: (CandidateVerified, CandidateRejected, VerificationIncomplete, TaskFailed),
    ComparisonRequested: (KernelsCompared, TaskFailed),
    GenerationRequested: (PlanProposed, StepValidated, StepBrokenDown, CandidateGenerated, GenerationFailed,
                          TaskFailed),
    WebhookRequested: (WebhookDelivered, WebhookAbandoned, TaskFailed),
}
ALL_ANSWERS = tuple(answer for answers in ANSWERS.values() for answer in answers)


def needs_answer(history: list[Event], request_id: UUID) -> bool:
    """Whether a worker should work on a request: not when its answer is recorded already (a redelivered
    task then appends nothing again), nor work for a cancelled job (its webhook still goes out)."""
    request = next(e for e in history if e.event_id == request_id)
    if any(isinstance(e, ANSWERS[type(request)]) and e.request_id == request_id for e in history):
        return False
    return isinstance(request, WebhookRequested) or not any(isinstance(e, JobCancelled) for e in history)


def outstanding_requests(history: list[Event]) -> list[Event]:
    """Requests still owed an answer, oldest first: a finished job's webhook, an unfinished job's work.
    `history` may hold only a job's requests, answers and terminal events: that is all this reads."""
    answered = {e.request_id for e in history if isinstance(e, ALL_ANSWERS)}
    finished = any(isinstance(e, JOB_ENDS) for e in history)
    return [e for e in history if type(e) in ANSWERS and e.event_id not in answered
            and (isinstance(e, WebhookRequested) or not finished)]


def submission_and_request(history: list[Event], request_id: UUID,
                           request_type: type[RequestT]) -> tuple[JobSubmitted, RequestT]:
    """What a worker task needs first: the job as submitted, and the request it was sent to answer."""
    submitted = next(e for e in history if isinstance(e, JobSubmitted))
    request = next(e for e in history if isinstance(e, request_type) and e.event_id == request_id)
    return submitted, request


def answer_request(store: EventStore, bus: Bus, job_id: str, request_id: UUID, request_type: type[RequestT],
                   compute: Callable[[list[Event], JobSubmitted, RequestT], Sequence[Event]]) -> None:
    """Answer a request of a job once, under the rule above: `compute(history, submitted, request)` returns the
    answer's events (ids derived from the request), called only while the request is owed an answer. The
    planner is woken either way (the task that answered may have died before it woke the planner); an
    exception from `compute` propagates and wakes nobody."""
    stream = job_stream(job_id)
    history = store.read_stream(stream)
    if needs_answer(history, request_id):
        submitted, request = submission_and_request(history, request_id, request_type)
        answer = compute(history, submitted, request)
        try:
            store.append(stream, answer, expected_version=None)
        except ConcurrencyConflict:
            # Another worker's answer shares some of these derived ids: it was stored first and stands.
            if needs_answer(store.read_stream(stream), request_id):
                raise
    bus.dispatch(PlannerCatchUp.message(reason=f"{stream} {request_type.__name__} answered"))
