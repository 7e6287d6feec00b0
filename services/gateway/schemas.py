"""API schemas, kept apart from events so the wire format can evolve on its own."""
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.application.jobs import JobPublic
from shared.domain.events import Event

__all__ = ["JobPublic"]  # the gateway's job, shared with the webhook payload


class JobAccepted(BaseModel):
    job_id: str
    status_url: str
    events_url: str
    stream_url: str  # the events as Server-Sent Events, live


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("cancelled on request", max_length=500)


class Problem(BaseModel):
    """An error: what went wrong and what to do instead."""

    detail: str


class EventPublic(BaseModel):
    type: str
    version: int
    event_id: str
    stream_id: str
    stream_version: int
    position: int
    occurred_at: datetime
    payload: dict[str, Any]

    @classmethod
    def of(cls, e: Event) -> "EventPublic":
        return cls(type=e.type, version=e.version, event_id=str(e.event_id), stream_id=e.stream_id,
                   stream_version=e.stream_version, position=e.position, occurred_at=e.occurred_at,
                   payload=e.payload())


class FieldErrorPublic(BaseModel):
    field: str
    message: str


class ValidationProblem(BaseModel):
    detail: str
    errors: list[FieldErrorPublic]
