"""Celery entry point of a benchmark worker. The worker serves queue benchmark.<gpu> and sees only
that GPU (CUDA_VISIBLE_DEVICES), so inside it the device is always index 0."""
from uuid import UUID

from services.benchmark import handlers
from services.benchmark.compile_cache import CompileCache
from shared import runtime
from shared.bus import celery_app
from shared.contracts import MeasureBaseline
from shared.eventstore import ConcurrencyConflict


@celery_app.task(name=MeasureBaseline.task, autoretry_for=(ConcurrencyConflict,), retry_backoff=0.5, max_retries=5)
def measure_baseline(job_id: str, request_id: str) -> None:
    rt = runtime.current()
    handlers.measure_baseline(rt.store, rt.bus, job_id, UUID(request_id), device_index=0,
                              default_arch=rt.settings.default_arch, cache=CompileCache(rt.settings.compile_cache))
