"""Celery entry point of the generator: a thin wrapper around the handler."""
from uuid import UUID

from services.generator import handlers
from shared.adapters.bus import celery_app
from shared.application import runtime
from shared.application.task_profile import profiled
from shared.application.worker_task import AnsweringTask
from shared.domain.contracts import Generate


@celery_app.task(base=AnsweringTask, name=Generate.task)
def generate(job_id: str, request_id: str) -> None:
    rt = runtime.current()
    with profiled(rt.store, job_id, UUID(request_id), Generate.task):
        handlers.generate(rt.store, rt.bus, job_id, UUID(request_id), rt.settings)
