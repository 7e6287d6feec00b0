"""Where a job's time went: queue wait, planning, generation, verification, compilation and benchmarking,
from the workers' TaskProfiled records and what the benchmark recorded, per job or summed over jobs.

Stage times are worker-seconds: shards on several GPUs add up, so the total can exceed the wall-clock
time from submission to completion, which is reported beside it."""
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from shared.domain.events import (BaselineRequested, Event, GenerationRequested, GeneratorCalled, JobCompleted,
                                  JobFailed, KernelCompiled, ShardTuned, TaskProfiled, TuningRequested,
                                  VerificationRequested)
from shared.domain.projections import job_id_of

STAGES = ("queue wait", "planning", "generation", "verification", "compile", "benchmark")
PLANNING_KINDS = ("plan", "replan", "validate", "breakdown")
DEFAULT_BOTTLENECK_SHARE = 0.2


class StageTime(BaseModel):
    model_config = ConfigDict(frozen=True)
    stage: str
    seconds: float
    percent: float
    tasks: int


class PipelineProfile(BaseModel):
    model_config = ConfigDict(frozen=True)
    jobs: list[str]
    wall_s: float = Field(description="submission to completion (or to the last event), summed over the jobs")
    total_s: float = Field(description="the stages' worker-seconds together")
    stages: list[StageTime]
    bottleneck_share: float
    bottlenecks: list[str] = Field(description="stages taking at least bottleneck_share of the total")
    compiles: int
    cache_hits: int
    cache_hit_rate: float | None
    llm_calls: int
    tokens: int
    cost_usd: float
    peak_worker_memory_mb: float | None
    tasks_unprofiled: int = Field(description="requests with no TaskProfiled record (still running, or recorded "
                                              "by a kforge before profiling): their time is missing")


@dataclass
class _Effort:
    """The raw sums of one or more jobs, before shares are taken."""

    jobs: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    tasks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STAGES, 0))
    compiles: int = 0
    cache_hits: int = 0
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    peak_mb: float | None = None
    unprofiled: int = 0

    def add(self, stage: str, seconds: float) -> None:
        self.seconds[stage] += max(seconds, 0.0)
        self.tasks[stage] += 1


def _job_effort(events: Sequence[Event], effort: _Effort) -> None:
    if not events:
        return
    effort.jobs.append(job_id_of(events[0].stream_id))
    end = next((e.occurred_at for e in events if isinstance(e, JobCompleted | JobFailed)), events[-1].occurred_at)
    effort.wall_s += (end - events[0].occurred_at).total_seconds()
    requests = {e.event_id: e for e in events
                if isinstance(e, BaselineRequested | TuningRequested | VerificationRequested | GenerationRequested)}
    profiled = {e.request_id: e for e in events if isinstance(e, TaskProfiled)}
    compiled = {e.request_id: e for e in events if isinstance(e, KernelCompiled)}
    shards = {e.request_id: e for e in events if isinstance(e, ShardTuned)}
    for request_id, request in requests.items():
        task = profiled.get(request_id)
        if task is None:
            effort.unprofiled += 1
            continue
        effort.add("queue wait", (task.started_at - request.occurred_at).total_seconds())
        match request:
            case GenerationRequested(kind=kind):
                effort.add("planning" if kind in PLANNING_KINDS else "generation", task.wall_s)
            case VerificationRequested():
                effort.add("verification", task.wall_s)
            case BaselineRequested():
                compile_s = compiled[request_id].compile_ms / 1e3 if request_id in compiled and \
                    not compiled[request_id].cache_hit else 0.0
                effort.add("compile", compile_s)
                effort.add("benchmark", task.wall_s - compile_s)
            case TuningRequested() if request_id in shards:
                # Compilation overlaps measurement in a sweep: what the GPU spent waiting counts as compile.
                shard = shards[request_id]
                effort.add("compile", task.wall_s - shard.gpu_busy_s)
                effort.add("benchmark", shard.gpu_busy_s)
        effort.peak_mb = max(effort.peak_mb or 0.0, task.peak_rss_mb)
    for e in events:
        if isinstance(e, KernelCompiled):
            effort.compiles, effort.cache_hits = effort.compiles + 1, effort.cache_hits + e.cache_hit
        elif isinstance(e, ShardTuned):
            effort.compiles, effort.cache_hits = effort.compiles + e.configs, effort.cache_hits + e.cache_hits
        elif isinstance(e, GeneratorCalled):
            effort.llm_calls += 1
            effort.tokens += e.input_tokens + e.output_tokens
            effort.cost_usd += e.cost_usd


def pipeline_profile(jobs: Iterable[Sequence[Event]],
                     bottleneck_share: float = DEFAULT_BOTTLENECK_SHARE) -> PipelineProfile:
    """The profile of one job's events, or of several jobs' summed."""
    if not 0 < bottleneck_share <= 1:
        raise ValueError(f"bottleneck_share {bottleneck_share}: give a fraction of the total in (0, 1], e.g. 0.2")
    effort = _Effort()
    for events in jobs:
        _job_effort(events, effort)
    total = sum(effort.seconds.values())
    stages = [StageTime(stage=s, seconds=effort.seconds[s], percent=100 * effort.seconds[s] / total if total else 0.0,
                        tasks=effort.tasks[s]) for s in STAGES]
    return PipelineProfile(
        jobs=effort.jobs, wall_s=effort.wall_s, total_s=total, stages=stages, bottleneck_share=bottleneck_share,
        bottlenecks=[s.stage for s in sorted(stages, key=lambda s: -s.seconds)
                     if total and s.seconds / total >= bottleneck_share],
        compiles=effort.compiles, cache_hits=effort.cache_hits,
        cache_hit_rate=effort.cache_hits / effort.compiles if effort.compiles else None, llm_calls=effort.llm_calls,
        tokens=effort.tokens, cost_usd=effort.cost_usd, peak_worker_memory_mb=effort.peak_mb,
        tasks_unprofiled=effort.unprofiled)
