"""A job's webhook deliveries, folded from its events: each request with every attempt and its outcome."""
from datetime import datetime

from pydantic import BaseModel

from shared.domain.events import Event, WebhookAbandoned, WebhookAttempted, WebhookDelivered, WebhookRequested


class DeliveryAttempt(BaseModel):
    attempt: int
    at: datetime
    status_code: int | None
    error: str | None
    duration_ms: float
    retry_in_s: float | None


class WebhookDelivery(BaseModel):
    webhook_id: str  # the webhook-id header: the same on every attempt, so receivers can drop repeats
    kind: str  # job.completed | job.failed | job.cancelled
    url: str
    requested_at: datetime
    status: str  # pending | delivered | abandoned
    reason: str | None = None  # why it was abandoned
    attempts: list[DeliveryAttempt] = []


def webhook_deliveries(events: list[Event]) -> list[WebhookDelivery]:
    deliveries: dict[str, WebhookDelivery] = {}
    for event in events:
        if isinstance(event, WebhookRequested):
            deliveries[str(event.event_id)] = WebhookDelivery(
                webhook_id=str(event.event_id), kind=event.kind, url=event.url, requested_at=event.occurred_at,
                status="pending")
        elif isinstance(event, WebhookAttempted | WebhookDelivered | WebhookAbandoned):
            delivery = deliveries[str(event.request_id)]
            if isinstance(event, WebhookAttempted):
                delivery.attempts.append(DeliveryAttempt(
                    attempt=event.attempt, at=event.occurred_at, status_code=event.status_code, error=event.error,
                    duration_ms=event.duration_ms, retry_in_s=event.retry_in_s))
            elif isinstance(event, WebhookDelivered):
                delivery.status = "delivered"
            else:
                delivery.status, delivery.reason = "abandoned", event.reason
    return list(deliveries.values())
