"""Celery entry point of the planner: a thin wrapper around the handler."""
from services.planner import handlers
from shared.adapters.bus import celery_app
from shared.adapters.eventstore import ConcurrencyConflict
from shared.application import runtime
from shared.application.worker_task import AnsweringTask
from shared.domain.contracts import PlannerCatchUp


@celery_app.task(base=AnsweringTask, name=PlannerCatchUp.task, bind=True, autoretry_for=(ConcurrencyConflict,),
                 retry_backoff=0.2, max_retries=20)
def catch_up(self, reason: str) -> int:
    rt = runtime.current()
    return handlers.catch_up(rt.store, rt.bus, rt.settings.gpus)
