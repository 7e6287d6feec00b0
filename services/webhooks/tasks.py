"""Celery entry point of the webhooks service: a thin wrapper around the handler."""
from uuid import UUID

from services.webhooks import handlers
from services.webhooks.sender import HttpSender
from shared.adapters.bus import celery_app
from shared.application import runtime
from shared.application.worker_task import AnsweringTask
from shared.domain.contracts import DeliverWebhook


@celery_app.task(base=AnsweringTask, name=DeliverWebhook.task)
def deliver(job_id: str, request_id: str, attempt: int = 1) -> None:
    rt = runtime.current()
    handlers.deliver(rt.store, rt.bus, job_id, UUID(request_id), attempt, rt.settings, HttpSender())
