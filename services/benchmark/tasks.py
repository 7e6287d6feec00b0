"""Celery entry points of a benchmark worker. The compile pool and the GPU process are started on the
first task and kept warm for the next.

A `kforge worker -Q benchmark.<gpu>` process sees only its GPU (it sets CUDA_VISIBLE_DEVICES and
KFORGE_PINNED_GPU), so there the device is index 0; in embedded mode one process serves every
benchmark queue, and queue benchmark.<gpu> uses device <gpu>."""
import atexit
from uuid import UUID

from services.benchmark import handlers
from services.benchmark.compile_cache import CompileCache
from services.benchmark.resources import BenchmarkResources, compile_workers_per_gpu
from shared.adapters.bus import celery_app
from shared.adapters.device.process import device_index
from shared.adapters.eventstore import ConcurrencyConflict
from shared.application import runtime
from shared.application.task_profile import profiled
from shared.application.worker_task import AnsweringTask
from shared.domain.contracts import CompareKernels, MeasureBaseline, TuneShard

_resources: dict[str, BenchmarkResources] = {}


def resources(gpu: str) -> BenchmarkResources:
    if gpu not in _resources:
        settings = runtime.current().settings
        index = device_index(gpu)
        _resources[gpu] = BenchmarkResources(device_index=index, default_arch=settings.default_arch,
                                             cache=CompileCache(settings.compile_cache),
                                             compile_workers=compile_workers_per_gpu(len(settings.gpus)))
        atexit.register(_resources[gpu].close)
    return _resources[gpu]


@celery_app.task(base=AnsweringTask, name=MeasureBaseline.task, autoretry_for=(ConcurrencyConflict,),
                 retry_backoff=0.5, max_retries=5)
def measure_baseline(job_id: str, request_id: str, gpu: str = "0") -> None:
    rt = runtime.current()
    with profiled(rt.store, job_id, UUID(request_id), MeasureBaseline.task):
        handlers.measure_baseline(rt.store, rt.bus, job_id, UUID(request_id), resources(gpu))


@celery_app.task(base=AnsweringTask, name=TuneShard.task)
def tune_shard(job_id: str, request_id: str, gpu: str = "0") -> None:
    rt = runtime.current()
    with profiled(rt.store, job_id, UUID(request_id), TuneShard.task):
        handlers.tune_shard(rt.store, rt.bus, job_id, UUID(request_id), resources(gpu))


@celery_app.task(base=AnsweringTask, name=CompareKernels.task)
def compare_kernels(job_id: str, request_id: str, gpu: str = "0") -> None:
    rt = runtime.current()
    with profiled(rt.store, job_id, UUID(request_id), CompareKernels.task):
        handlers.compare_kernels(rt.store, rt.bus, job_id, UUID(request_id), resources(gpu))
