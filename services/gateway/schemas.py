"""API schemas, kept apart from events so the wire format can evolve on its own."""
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.events import Event
from shared.projections import JobView


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


class JobPublic(BaseModel):
    job_id: str
    kernel_name: str | None
    strategy: str | None
    run: str | None
    status: str
    submitted_at: datetime | None
    updated_at: datetime | None
    baseline_ms: float | None
    best_ms: float | None
    speedup: float | None
    device: str | None
    replay: bool
    summary: str | None
    failed_stage: str | None
    failure: str | None
    events: int

    @classmethod
    def of(cls, view: JobView) -> "JobPublic":
        return cls(job_id=view.job_id, kernel_name=view.spec.kernel_name if view.spec else None,
                   strategy=view.spec.strategy.name if view.spec else None, run=view.run, status=view.status,
                   submitted_at=view.submitted_at, updated_at=view.updated_at, baseline_ms=view.baseline_ms,
                   best_ms=view.best_ms, speedup=view.speedup,
                   device=view.device, replay=view.replay, summary=view.summary, failed_stage=view.failed_stage,
                   failure=view.failure, events=len(view.event_types))


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
