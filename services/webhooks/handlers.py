"""One delivery attempt of a job's webhook. Every attempt is recorded (WebhookAttempted); success ends the
delivery (WebhookDelivered); a failure schedules the next attempt after the configured backoff until the
attempts run out, or ends it at once when retrying cannot help (410 Gone, a refused address):
WebhookAbandoned. Event ids derive from the request and the attempt, so a redelivered task records nothing
twice."""
import json
import time
from uuid import UUID

from services.webhooks.sender import Sender, Unreachable
from services.webhooks.signing import signed_headers
from shared.adapters.bus import Bus
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.adapters.webhook_addresses import WebhookUrlRefused, allowed_addresses
from shared.application.jobs import JobPublic
from shared.application.requests import needs_answer
from shared.domain.contracts import DeliverWebhook
from shared.domain.events import (Event, WebhookAbandoned, WebhookAttempted, WebhookDelivered, WebhookRequested,
                                  derived_id)
from shared.domain.projections import JobView, job_stream, project_job

GONE = 410  # Standard Webhooks: the receiver asks never to be called again


def deliver(store: EventStore, bus: Bus, job_id: str, request_id: UUID, attempt: int, settings: Settings,
            sender: Sender) -> None:
    stream = job_stream(job_id)
    history = store.read_stream(stream)
    if not needs_answer(history, request_id):
        return
    request = next(e for e in history if e.event_id == request_id)
    done = next((e for e in history if isinstance(e, WebhookAttempted) and e.request_id == request_id
                 and e.attempt == attempt), None)
    if done is None:
        # The job as it was when it ended, not with the delivery's own records: every attempt sends one body.
        ended = project_job(history[:request.stream_version], job_id)
        done, *ending = _attempt(stream, request, attempt, ended, settings, sender)
        store.append(stream, [done, *ending], expected_version=None)
    if done.retry_in_s is not None:  # sent again when this task was redelivered: the next attempt is a no-op twice
        bus.dispatch(DeliverWebhook.message(job_id, request_id, attempt + 1, delay_s=done.retry_in_s))


def _attempt(stream: str, request: WebhookRequested, attempt: int, job: JobView, settings: Settings,
             sender: Sender) -> list[Event]:
    rid = request.event_id
    common = dict(stream_id=stream, request_id=rid)
    started = time.perf_counter()
    status_code, error, retry = None, None, True
    try:
        # Checked again at every attempt: what the name resolves to may have changed since submission.
        addresses = allowed_addresses(request.url, settings.webhook_allowed_networks)
        body = json.dumps(payload(request, job)).encode()
        headers = signed_headers(settings.webhook_secret, str(rid), int(time.time()), body)
        answer = sender.post(request.url, addresses, headers, body, settings.webhook_timeout_s)
        status_code = answer.status_code
        if not 200 <= status_code < 300:
            error = f"HTTP {status_code}: {answer.text}".strip()
            retry = status_code != GONE
    except WebhookUrlRefused as exc:
        error, retry = str(exc), False
    except Unreachable as exc:
        error = str(exc)
    delays = settings.webhook_retry_delays_s
    retry_in = delays[attempt - 1] if error and retry and attempt <= len(delays) else None
    attempted = WebhookAttempted(event_id=derived_id(rid, "WebhookAttempted", attempt), **common, attempt=attempt,
                                 url=request.url, status_code=status_code, error=error,
                                 duration_ms=(time.perf_counter() - started) * 1e3, retry_in_s=retry_in)
    if error is None:
        return [attempted, WebhookDelivered(event_id=derived_id(rid, "WebhookDelivered"), **common, attempts=attempt,
                                            status_code=status_code)]
    if retry_in is None:
        why = error if not retry else f"{attempt} attempts failed, the last: {error}"
        return [attempted, WebhookAbandoned(event_id=derived_id(rid, "WebhookAbandoned"), **common, attempts=attempt,
                                            reason=why)]
    return [attempted]


def payload(request: WebhookRequested, job: JobView) -> dict:
    """The Standard Webhooks envelope (type, timestamp, data) around the job as GET /v1/jobs/{id} shows it."""
    return {"type": request.kind, "timestamp": request.occurred_at.isoformat(),
            "data": JobPublic.of(job).model_dump(mode="json")}
