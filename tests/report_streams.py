"""Event streams of whole jobs, built event by event with known times, for the report projections' tests."""
import itertools
import random
import statistics
from datetime import UTC, datetime, timedelta

from shared.domain.contracts import Generate, MeasureBaseline, TuneShard, VerifyCandidate
from shared.domain.events import (BaselineMeasured, BaselineRequested, CandidateGenerated, CandidateVerified,
                                  ConfigFailed, ConfigMeasured, DeviceFacts, Event, GenerationRequested,
                                  GeneratorCalled, JobCompleted, JobSubmitted, KernelCompiled, ShardTuned, StepAccepted,
                                  StepDiscarded, TaskProfiled, TuningCompleted, TuningRequested, VerificationRequested)
from shared.domain.projections import job_stream
from shared.domain.spec import CandidateSpec, KernelSpec, TuningStep

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
H100 = DeviceFacts(sm_count=132, dram_gbps=3352.0, fp32_tflops=66.9, l2_mb=50.0)


class JobStream:
    """Appends events to one job's stream as the store would number them, one clock tick apart."""

    def __init__(self, job_id: str, spec: KernelSpec, run: str | None = None, start: datetime = T0):
        self.job_id, self.spec, self.clock = job_id, spec, start
        self.events: list[Event] = []
        self.add(JobSubmitted, spec=spec, run=run)

    def add(self, cls: type[Event], after_s: float = 1.0, **fields) -> Event:
        self.clock += timedelta(seconds=after_s)
        event = cls(stream_id=job_stream(self.job_id), occurred_at=self.clock, stream_version=len(self.events) + 1,
                    position=len(self.events) + 1, **fields)
        self.events.append(event)
        return event

    def profiled(self, request: Event, task: str, queue_s: float, wall_s: float, peak_mb: float = 512.0) -> None:
        self.add(TaskProfiled, after_s=0.0, request_id=request.event_id, task=task, worker="gpu-1:42",
                 started_at=request.occurred_at + timedelta(seconds=queue_s), wall_s=wall_s, peak_rss_mb=peak_mb)

    def baseline(self, samples: list[float], compile_ms: float = 800.0, cache_hit: bool = False,
                 facts: DeviceFacts | None = H100, queue_s: float = 0.5, wall_s: float = 2.0) -> BaselineMeasured:
        params = self.spec.baseline_params()
        request = self.add(BaselineRequested, queue="benchmark.0", params=params)
        self.add(KernelCompiled, request_id=request.event_id, arch="sm_90", compile_ms=compile_ms, cache_key="k",
                 cache_hit=cache_hit)
        grid, block = self.spec.launch_geometry(params)
        measured = self.add(BaselineMeasured, request_id=request.event_id, device="NVIDIA H100 80GB HBM3",
                            params=params, grid=grid, block=block, samples_ms=samples,
                            median_ms=statistics.median(samples), facts=facts)
        self.profiled(request, MeasureBaseline.task, queue_s, wall_s)
        return measured

    def tune(self, candidate_id: str, timings: dict[int, list[float]], spec: KernelSpec | None = None,
             failed: dict[int, str] | None = None, baseline_ms: float | None = None, gpu_busy_s: float = 3.0,
             wall_s: float = 4.0, queue_s: float = 1.0, param: str = "block_size_x", extra: dict | None = None):
        """Tune a candidate over one parameter: `timings` maps its values to samples, `failed` to reasons."""
        spec = spec or self.spec
        request = self.add(TuningRequested, queue="benchmark.0", candidate_id=candidate_id)
        best = None
        for value, samples in timings.items():
            params = {**(extra or {}), param: value}
            grid, block = spec.launch_geometry({**spec.params, **params})
            median = statistics.median(samples)
            gbps = spec.bytes_per_launch() / (median / 1e3) / 1e9
            self.add(ConfigMeasured, after_s=0.1, request_id=request.event_id, params=params, grid=grid, block=block,
                     samples_ms=samples, median_ms=median, min_ms=min(samples), mean_ms=statistics.fmean(samples),
                     stddev_ms=statistics.pstdev(samples), ci95_ms=None, gbps=gbps,
                     pct_of_peak=100 * gbps / H100.dram_gbps, compile_ms=300.0, cache_hit=value % 2 == 1)
            if best is None or median < best[1]:
                best = (params, median)
        for value, reason in (failed or {}).items():
            self.add(ConfigFailed, after_s=0.1, request_id=request.event_id, params={**(extra or {}), param: value},
                     stage="launch", reason=reason)
        configs = len(timings) + len(failed or {})
        self.add(ShardTuned, request_id=request.event_id, device="NVIDIA H100 80GB HBM3", strategy="brute_force",
                 configs=configs, measured=len(timings), failed=len(failed or {}), best_params=best[0],
                 best_ms=best[1], wall_s=wall_s, compile_s=2.0, gpu_busy_s=gpu_busy_s, first_result_s=0.5,
                 cache_hits=sum(1 for v in timings if v % 2 == 1))
        self.profiled(request, TuneShard.task, queue_s, wall_s)
        return self.add(TuningCompleted, candidate_id=candidate_id, best_params=best[0], best_time_ms=best[1],
                        configs_evaluated=configs, configs_failed=len(failed or {}),
                        speedup=baseline_ms / best[1] if baseline_ms else None)

    def rewrite(self, step: TuningStep, candidate: CandidateSpec, tokens: tuple[int, int] = (0, 0),
                cost_usd: float = 0.0, gen_wall_s: float = 0.2, verify_wall_s: float = 5.0) -> None:
        request = self.add(GenerationRequested, queue="generator", kind="rewrite", step=step, candidate_id=step.id)
        self.add(GeneratorCalled, request_id=request.event_id, kind="rewrite", step_id=step.id, provider="rules",
                 model="kforge-rules", system="You rewrite CUDA kernels.", prompt=f"apply {step.id}",
                 response=candidate.source, input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=cost_usd)
        self.add(CandidateGenerated, request_id=request.event_id, step_id=step.id, candidate_id=step.id,
                 candidate=candidate, provider="rules")
        self.profiled(request, Generate.task, 0.1, gen_wall_s, peak_mb=300.0)
        verify = self.add(VerificationRequested, queue="verifier.0", candidate_id=step.id, candidate=candidate)
        self.add(CandidateVerified, request_id=verify.event_id, candidate_id=step.id, device="NVIDIA H100 80GB HBM3",
                 trials=[], max_abs_error=0.0, max_rel_error=0.0)
        self.profiled(verify, VerifyCandidate.task, 0.2, verify_wall_s, peak_mb=2048.0)

    def accept(self, step_id: str, old_ms: float, new_ms: float, params: dict,
               speedup_ci: tuple[float, float] | None = None) -> None:
        self.add(StepAccepted, step_id=step_id, candidate_id=step_id, old_time_ms=old_ms, new_time_ms=new_ms,
                 best_params=params, speedup=old_ms / new_ms, speedup_ci=speedup_ci)

    def discard(self, step_id: str, reason: str, new_ms: float | None = None) -> None:
        self.add(StepDiscarded, step_id=step_id, candidate_id=step_id, stage="compare", reason=reason,
                 new_time_ms=new_ms)

    def complete(self, summary: str = "done") -> list[Event]:
        self.add(JobCompleted, summary=summary)
        return self.events


def spec_with(spec: KernelSpec, **changes) -> KernelSpec:
    return spec.model_validate({**spec.model_dump(), **changes})


def tune_job(spec: KernelSpec, job_id: str = "tune1", run: str | None = None, scale: float = 1.0,
             start: datetime = T0) -> list[Event]:
    """vector_add tuned over block_size_x: 256 is the baseline, 512 the best, 1024 ran out of resources."""
    spec = spec_with(spec, strategy={"name": "tune"}, tune_params={"block_size_x": [128, 256, 512, 1024]})
    job = JobStream(job_id, spec, run=run, start=start)
    base = [1.00 * scale, 1.02 * scale, 0.99 * scale, 1.01 * scale, 1.00 * scale]
    job.baseline(base)
    job.tune("submitted", {128: [x * 1.2 for x in base], 256: base, 512: [x * 0.8 for x in base]},
             failed={1024: "cuLaunchKernel: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested"},
             baseline_ms=1.0 * scale)
    return job.complete()


EPT_SOURCE = ("__global__ void vector_add(float *c, const float *a, const float *b, int n) {\n"
              "  int i = (blockIdx.x * blockDim.x + threadIdx.x) * elements_per_thread;\n"
              "  for (int k = 0; k < elements_per_thread && i + k < n; k++) c[i + k] = a[i + k] + b[i + k];\n}\n")


def rewrite_job(spec: KernelSpec, job_id: str = "rewrite1") -> list[Event]:
    """An explicit job: elements_per_thread is kept (1.0 -> 0.5 ms), restrict is discarded as no faster."""
    spec = spec_with(spec, strategy={"name": "explicit"}, tune_params={"block_size_x": [128, 256]})
    job = JobStream(job_id, spec)
    job.baseline([1.0, 1.0, 1.0, 1.0])
    ept = CandidateSpec(source=EPT_SOURCE, tune_params={"block_size_x": [128, 256], "elements_per_thread": [2, 4]},
                        grid_div_x=["block_size_x", "elements_per_thread"], params={"elements_per_thread": 2})
    step = TuningStep(id="elements_per_thread", description="several elements per thread")
    job.rewrite(step, ept, tokens=(1200, 800), cost_usd=0.0156)
    job.tune("elements_per_thread", {2: [0.7] * 5, 4: [0.5, 0.5, 0.51, 0.49, 0.5]}, spec=spec.for_candidate(ept),
             param="elements_per_thread", extra={"block_size_x": 256}, baseline_ms=1.0)
    job.accept("elements_per_thread", 1.0, 0.5, {"block_size_x": 256, "elements_per_thread": 4},
               speedup_ci=(1.96, 2.04))
    restrict = CandidateSpec(source=EPT_SOURCE.replace("const float *a", "const float *__restrict__ a"),
                             tune_params=ept.tune_params, grid_div_x=ept.grid_div_x, params=ept.params)
    job.rewrite(TuningStep(id="restrict", description="__restrict__ pointers"), restrict)
    job.tune("restrict", {4: [0.52] * 5}, spec=spec.for_candidate(restrict), param="elements_per_thread",
             extra={"block_size_x": 256}, baseline_ms=1.0)
    job.discard("restrict", "slower than the best so far (step elements_per_thread): 0.962x [0.955, 0.969]",
                new_ms=0.52)
    return job.complete()


GRID_SPACE = {"block_size_x": [64, 128, 256, 512], "elements_per_thread": [1, 2, 4], "unroll": [1, 2]}


def grid_time_ms(params: dict) -> float:
    """The made-up time of a grid_tune_job configuration: the block size and elements per thread decide it,
    unrolling barely matters."""
    return ({64: 1.6, 128: 1.1, 256: 1.0, 512: 1.2}[params["block_size_x"]]
            * {1: 1.0, 2: 0.7, 4: 0.8}[params["elements_per_thread"]] * {1: 1.0, 2: 0.98}[params["unroll"]])


def grid_tune_job(spec: KernelSpec, job_id: str = "grid1", start: datetime = T0) -> list[Event]:
    """vector_add searched over three parameters in a fixed shuffled order, as random_sample would: every
    configuration with block_size_x 512 and 4 elements per thread fails to launch, and one 64-thread one is
    abandoned after two samples. The best, 256 x 2 x 2, is 0.686 ms against a 1.0 ms baseline, found by the 13th
    configuration evaluated."""
    spec = spec_with(spec, strategy={"name": "tune"}, tune_params=GRID_SPACE)
    job = JobStream(job_id, spec, start=start)
    job.baseline([1.0, 1.0, 1.0])
    request = job.add(TuningRequested, queue="benchmark.0")
    configs = [dict(zip(GRID_SPACE, values)) for values in itertools.product(*GRID_SPACE.values())]
    random.Random(24).shuffle(configs)
    failed = 0
    for params in configs:
        if params["block_size_x"] == 512 and params["elements_per_thread"] == 4:
            failed += 1
            job.add(ConfigFailed, after_s=0.1, request_id=request.event_id, params=params, stage="launch",
                    reason="cuLaunchKernel: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
            continue
        time = grid_time_ms(params)
        abandoned = params == {"block_size_x": 64, "elements_per_thread": 1, "unroll": 1}
        samples = [time] * (2 if abandoned else 3)
        grid, block = spec.launch_geometry({**spec.params, **params})
        job.add(ConfigMeasured, after_s=0.1, request_id=request.event_id, params=params, grid=grid, block=block,
                samples_ms=samples, median_ms=time, min_ms=time, mean_ms=time, stddev_ms=0.0, ci95_ms=None,
                abandoned=abandoned)
    best = min((c for c in configs if not (c["block_size_x"] == 512 and c["elements_per_thread"] == 4)),
               key=grid_time_ms)
    job.add(ShardTuned, request_id=request.event_id, device="NVIDIA H100 80GB HBM3", strategy="random_sample",
            configs=len(configs), measured=len(configs) - failed, failed=failed, best_params=best,
            best_ms=grid_time_ms(best), wall_s=4.0, compile_s=2.0, gpu_busy_s=3.0, first_result_s=0.5)
    job.add(TuningCompleted, candidate_id="submitted", best_params=best, best_time_ms=grid_time_ms(best),
            configs_evaluated=len(configs), configs_failed=failed, speedup=1.0 / grid_time_ms(best))
    return job.complete(f"{best} is {1.0 / grid_time_ms(best):.2f}x faster")
