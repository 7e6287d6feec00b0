"""What services send each other over the bus: task names, queues and message arguments.

A task is addressed by name, so a service can send work to another without importing it. Messages
carry ids and positions, never arrays or objects: the receiver reads what it needs from the store.
"""
from typing import Any
from uuid import UUID, uuid4

from pydantic import BaseModel, ConfigDict

PLANNER_QUEUE = "planner"
GENERATOR_QUEUE = "generator"
VERIFIER_QUEUE = "verifier"
WEBHOOKS_QUEUE = "webhooks"


def benchmark_queue(gpu: str) -> str:
    """Each GPU has its own queue, served by one worker pinned to that GPU."""
    return f"benchmark.{gpu}"


def verifier_queue(gpu: str) -> str:
    """The verifier runs kernels too: one queue per GPU, like the benchmark's."""
    return f"{VERIFIER_QUEUE}.{gpu}"


def gpu_of(queue: str) -> str:
    """The GPU id of a per-GPU queue (benchmark.<gpu>, verifier.<gpu>)."""
    return queue.split(".", 1)[1]


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)
    task: str
    queue: str
    kwargs: dict[str, Any]
    message_id: str  # becomes the Celery task id, so a duplicate dispatch is recognisable
    delay_s: float = 0.0  # run no sooner than this (a retry's backoff)


class PlannerCatchUp:
    """Ask the planner to react to every event it has not processed yet."""

    task = "planner.catch_up"

    @classmethod
    def message(cls, reason: str) -> Message:
        return Message(task=cls.task, queue=PLANNER_QUEUE, kwargs={"reason": reason}, message_id=str(uuid4()))


class GpuRequest:
    """A request event of a job answered by a worker of one GPU; the message carries ids only."""

    task: str

    @classmethod
    def message(cls, queue: str, job_id: str, request_id: UUID) -> Message:
        return Message(task=cls.task, queue=queue, kwargs={"job_id": job_id, "request_id": str(request_id),
                                                          "gpu": gpu_of(queue)}, message_id=str(request_id))


class Generate:
    """Answer a job's generator request (a plan, a verdict on a step, a breakdown, a rewrite)."""

    task = "generator.generate"

    @classmethod
    def message(cls, job_id: str, request_id: UUID) -> Message:
        return Message(task=cls.task, queue=GENERATOR_QUEUE, kwargs={"job_id": job_id, "request_id": str(request_id)},
                       message_id=str(request_id))


class MeasureBaseline(GpuRequest):
    """Compile and time the submitted kernel of a job."""

    task = "benchmark.measure_baseline"


class TuneShard(GpuRequest):
    """Search this GPU's shard of a job's tuning space."""

    task = "benchmark.tune_shard"


class CompareKernels(GpuRequest):
    """Time a job's best kernel so far and a tuned candidate interleaved on this GPU."""

    task = "benchmark.compare_kernels"


class VerifyCandidate(GpuRequest):
    """Prove a job's candidate computes what its submitted kernel computes, or reject it saying why."""

    task = "verifier.verify_candidate"


class DeliverWebhook:
    """Make one delivery attempt of a job's webhook; a failed attempt sends the next with a delay."""

    task = "webhooks.deliver"

    @classmethod
    def message(cls, job_id: str, request_id: UUID, attempt: int = 1, delay_s: float = 0.0) -> Message:
        # The first attempt's message id is the request id, like every request's; a retry's extends it,
        # so the broker tells which attempt it holds and recovery still finds the request's messages.
        message_id = str(request_id) if attempt == 1 else f"{request_id}:{attempt}"
        return Message(task=cls.task, queue=WEBHOOKS_QUEUE, kwargs={"job_id": job_id, "request_id": str(request_id),
                                                                    "attempt": attempt},
                       message_id=message_id, delay_s=delay_s)
