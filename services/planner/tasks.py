"""Celery entry point of the planner: a thin wrapper around the handler."""
from services.planner import handlers
from shared import runtime
from shared.bus import celery_app
from shared.contracts import PlannerCatchUp
from shared.eventstore import ConcurrencyConflict
from shared.worker_task import AnsweringTask


@celery_app.task(base=AnsweringTask, name=PlannerCatchUp.task, bind=True, autoretry_for=(ConcurrencyConflict,),
                 retry_backoff=0.2, max_retries=20)
def catch_up(self, reason: str) -> int:
    rt = runtime.current()
    return handlers.catch_up(rt.store, rt.bus, rt.settings.gpus)
