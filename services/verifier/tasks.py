"""Celery entry point of the verifier. Like a benchmark worker, a verifier worker owns one GPU through a
process it keeps warm between tasks (replaced when a candidate breaks it)."""
import atexit
from uuid import UUID

from services.verifier import handlers
from services.verifier.session import VerifierSession
from shared.adapters.bus import celery_app
from shared.adapters.device.process import GpuProcess, WarmProcess, device_index
from shared.adapters.eventstore import ConcurrencyConflict
from shared.application import runtime
from shared.application.task_profile import profiled
from shared.application.worker_task import AnsweringTask
from shared.domain.contracts import VerifyCandidate

_processes: dict[str, WarmProcess[GpuProcess]] = {}


def device(gpu: str) -> GpuProcess:
    """This GPU's process, started on first use; NoDevice is remembered, so it is not probed per task."""
    if gpu not in _processes:
        index = device_index(gpu)
        _processes[gpu] = WarmProcess(lambda: GpuProcess(index, VerifierSession))
        atexit.register(_processes[gpu].close)
    return _processes[gpu].get()


@celery_app.task(base=AnsweringTask, name=VerifyCandidate.task, autoretry_for=(ConcurrencyConflict,),
                 retry_backoff=0.5, max_retries=5)
def verify_candidate(job_id: str, request_id: str, gpu: str = "0") -> None:
    rt = runtime.current()
    with profiled(rt.store, job_id, UUID(request_id), VerifyCandidate.task):
        handlers.verify_candidate(rt.store, rt.bus, job_id, UUID(request_id), lambda: device(gpu),
                                  rt.settings.default_arch)
