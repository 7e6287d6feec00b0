"""Benchmark requests of a job: measure the submitted kernel, search part of its tuning space, or time a
tuned candidate and the best kernel so far in turn.

Every outcome is an event with an id derived from the request, so a redelivered task appends nothing
twice, and a tuning task that died half-way resumes after the configurations it already recorded.
"""
import statistics
from uuid import UUID

from services.benchmark.compile_cache import compile_through
from services.benchmark.measurement import INPUT_SETS, Duel, Order, Setup
from services.benchmark.resources import BenchmarkResources
from services.benchmark.sampling import look_confidence, speedup_interval
from services.benchmark.tuning import ConfigOutcome, SetupFailed, SpaceEvaluator, reference_setup, search
from shared.adapters.bus import Bus
from shared.adapters.device.nvrtc import CompileError
from shared.adapters.device.probe import Peaks
from shared.adapters.device.process import Failed, NoDevice
from shared.adapters.eventstore import EventStore
from shared.application.limits import memory_refusal
from shared.application.requests import answer_request
from shared.domain.events import (BaselineFailed, BaselineMeasured, BaselineRequested, CandidateGenerated,
                                  ComparisonRequested, ConfigFailed, ConfigMeasured, DeviceFacts, Event, JobCancelled,
                                  JobSubmitted, KernelCompiled, KernelsCompared, ShardTuned, TuningRequested,
                                  derived_id)
from shared.domain.spec import KernelSpec

DUEL_SHARE_OF_TIMEOUT = 0.6  # of benchmark.timeout_s, which bounds the whole comparison call


def measure_baseline(store: EventStore, bus: Bus, job_id: str, request_id: UUID, resources: BenchmarkResources) -> None:
    answer_request(store, bus, job_id, request_id, BaselineRequested,
                   lambda history, submitted, request: _measure_baseline(request.stream_id, submitted, request,
                                                                         resources))


def _measure_baseline(stream: str, submitted: JobSubmitted, request: BaselineRequested,
                      resources: BenchmarkResources) -> list[Event]:
    spec, rid = submitted.spec, request.event_id

    def failed(stage: str, reason: str, log: str = "") -> BaselineFailed:
        return BaselineFailed(event_id=derived_id(rid, "BaselineFailed"), stream_id=stream, request_id=rid,
                              stage=stage, reason=reason, log=log)

    try:
        host, no_device = resources.process(spec), ""
    except NoDevice as exc:
        host, no_device = None, str(exc)
    if host is not None and spec.strategy.name == "tune":
        resources.pool()  # its processes start while the baseline is measured, ready for the tuning next
    # Compile even without a device: a compile error is the more useful message, and NVRTC needs no GPU.
    arch = spec.benchmark.arch or (host.device.arch if host else resources.default_arch)
    try:
        kernel, cache_hit = compile_through(resources.cache, spec.source, spec.kernel_name, request.params,
                                            spec.compiler_options, arch)
    except CompileError as exc:
        return [failed("compile", str(exc), exc.log)]
    compiled = KernelCompiled(event_id=derived_id(rid, "KernelCompiled"), stream_id=stream, request_id=rid,
                              arch=arch, compile_ms=kernel.compile_ms, cache_key=kernel.cache_key,
                              cache_hit=cache_hit, log=kernel.log)
    if host is None:
        return [compiled, failed("device", no_device)]
    if too_big := memory_refusal(spec, host.device.memory_bytes, INPUT_SETS):
        return [compiled, failed("device", too_big)]
    geometry = spec.launch_geometry(request.params)
    # The submitted kernel is its own reference here, within what its own runs disagree by (a float atomic
    # sum differs from itself): the check catches NaN/Inf, and a later tuning compares every configuration
    # with the output recorded this way.
    shared_bytes = spec.shared_memory_bytes(request.params)
    prepared = host.prepare(Setup(spec=spec, seed=spec.benchmark.seed, reference=kernel, reference_geometry=geometry,
                                  reference_params=request.params, reference_shared_bytes=shared_bytes))
    outcome = prepared or host.measure(Order(params=request.params, kernel=kernel, grid=geometry[0],
                                             block=geometry[1], best_ms=None, shared_bytes=shared_bytes))
    if isinstance(outcome, Failed):  # its stage names the check: launch, output (with the figures), timeout...
        return [compiled, failed(outcome.stage, outcome.reason)]
    measured = BaselineMeasured(event_id=derived_id(rid, "BaselineMeasured"), stream_id=stream, request_id=rid,
                                device=host.device.name, params=request.params, grid=geometry[0], block=geometry[1],
                                samples_ms=outcome.samples_ms, median_ms=statistics.median(outcome.samples_ms),
                                replay=spec.benchmark.replay, facts=_facts(host.device.peaks),
                                tolerances=list(outcome.tolerances))
    return [compiled, measured]


def _facts(peaks: Peaks | None) -> DeviceFacts | None:
    if peaks is None:
        return None
    return DeviceFacts(sm_count=peaks.sm_count, dram_gbps=peaks.dram_bytes_per_s / 1e9,
                       fp32_tflops=peaks.fp32_flops_per_s / 1e12, l2_mb=peaks.l2_bytes / 2**20)


def tune_shard(store: EventStore, bus: Bus, job_id: str, request_id: UUID, resources: BenchmarkResources) -> None:
    def compute(history: list[Event], submission: JobSubmitted, request: TuningRequested) -> list[Event]:
        stream, submitted = request.stream_id, submission.spec
        spec = _space_of(history, submitted, request.candidate_id)
        recorded = [e for e in history if isinstance(e, ConfigMeasured | ConfigFailed) and e.request_id == request_id]

        def append(batch: list[Event]) -> None:
            # Outcomes carry derived ids and are appended without a version check, as the answer is
            # (shared/application/requests.py): shards on other GPUs append to the same stream at the same time.
            store.append(stream, batch, expected_version=None)
            if store.stream_has(stream, JobCancelled.__name__):
                raise Cancelled(stream)

        return [_tune(stream, spec, submitted, request, recorded, resources, append)]

    try:
        answer_request(store, bus, job_id, request_id, TuningRequested, compute)
    except Cancelled:
        return  # the search stops at its next batch; a cancelled job is owed no answer


class Cancelled(Exception):
    """The job was cancelled while its space was searched."""


def _space_of(history: list[Event], submitted: KernelSpec, candidate_id: str) -> KernelSpec:
    """The kernel whose space is searched: the submitted one, or a generated candidate in its place."""
    if candidate_id == "submitted":
        return submitted
    generated = next(e for e in history if isinstance(e, CandidateGenerated) and e.candidate_id == candidate_id)
    return submitted.for_candidate(generated.candidate)


def _tune(stream: str, spec: KernelSpec, submitted: KernelSpec, request: TuningRequested,
          recorded: list[ConfigOutcome], resources: BenchmarkResources, append) -> ShardTuned:
    """Search `spec`'s space; every configuration's output is checked against the submitted kernel's."""
    rid = request.event_id
    common = dict(event_id=derived_id(rid, "ShardTuned"), stream_id=stream, request_id=rid,
                  strategy=spec.benchmark.search.strategy, replay=spec.benchmark.replay)
    try:
        host = resources.process(spec)
    except NoDevice as exc:
        return ShardTuned(**common, device="none", configs=0, measured=0, failed=0, best_params=None, best_ms=None,
                          wall_s=0, compile_s=0, gpu_busy_s=0, first_result_s=0, error=str(exc))
    if too_big := memory_refusal(spec, host.device.memory_bytes, INPUT_SETS):
        return ShardTuned(**common, device=host.device.name, configs=0, measured=0, failed=0, best_params=None,
                          best_ms=None, wall_s=0, compile_s=0, gpu_busy_s=0, first_result_s=0, error=too_big)
    evaluator = SpaceEvaluator(spec, host, resources.pool(), spec.benchmark.arch or host.device.arch, stream, rid,
                               append, recorded=recorded, replay=spec.benchmark.replay, reference=submitted)
    replaced_before = host.replacements
    error = None
    try:
        search(spec, evaluator, request.shard, request.shards)
    except SetupFailed as exc:
        error = str(exc)
    tally = evaluator.tally
    best = tally.best
    return ShardTuned(**common, device=host.device.name, configs=tally.measured + tally.failed, measured=tally.measured,
                      failed=tally.failed, best_params=best.params if best else None,
                      best_ms=best.median_ms if best else None, wall_s=tally.wall_s, compile_s=tally.compile_s,
                      gpu_busy_s=tally.gpu_busy_s, first_result_s=tally.first_result_s or 0.0,
                      cache_hits=tally.cache_hits, host_replacements=host.replacements - replaced_before, error=error)


def compare_kernels(store: EventStore, bus: Bus, job_id: str, request_id: UUID, resources: BenchmarkResources) -> None:
    answer_request(store, bus, job_id, request_id, ComparisonRequested,
                   lambda history, submitted, request: [_compare(request.stream_id, submitted.spec, request,
                                                                 resources)])


def _compare(stream: str, spec: KernelSpec, request: ComparisonRequested, resources: BenchmarkResources) -> KernelsCompared:
    """Time the best kernel so far and the candidate in turn: on the GPU, from the recordings in replay, and
    where there is no device, the tuning's medians stand, without an interval."""
    rid = request.event_id
    specs = [spec.for_candidate(c) for c in (request.incumbent, request.candidate)]

    def answer(incumbent_ms: list[float], candidate_ms: list[float], device: str, note: str = "",
               confidence: float = 0.95) -> KernelsCompared:
        speedup, interval = speedup_interval(incumbent_ms, candidate_ms, confidence)
        return KernelsCompared(event_id=derived_id(rid, "KernelsCompared"), stream_id=stream, request_id=rid,
                               candidate_id=request.candidate_id, device=device, incumbent_samples_ms=incumbent_ms,
                               candidate_samples_ms=candidate_ms, incumbent_ms=statistics.median(incumbent_ms),
                               candidate_ms=statistics.median(candidate_ms), speedup=speedup, speedup_ci=interval,
                               note=note, replay=spec.benchmark.replay)

    def not_compared(device: str, error: str) -> KernelsCompared:
        return KernelsCompared(event_id=derived_id(rid, "KernelsCompared"), stream_id=stream, request_id=rid,
                               candidate_id=request.candidate_id, device=device, incumbent_samples_ms=[],
                               candidate_samples_ms=[], incumbent_ms=request.incumbent_ms,
                               candidate_ms=request.candidate_ms, speedup=None, speedup_ci=None,
                               replay=spec.benchmark.replay, error=error)

    tuning_medians = ([request.incumbent_ms], [request.candidate_ms])
    if spec.benchmark.replay:
        recorded = [resources.replay_book().find(s, s.baseline_params()) for s in specs]
        if any(r is None or not r.samples_ms for r in recorded):
            return answer(*tuning_medians, "replay", "no recorded samples of both: the tuning's medians, no interval")
        pairs = min(len(r.samples_ms) for r in recorded)
        return answer(recorded[0].samples_ms[:pairs], recorded[1].samples_ms[:pairs], f"{recorded[1].device} (recorded)",
                      "recorded samples, paired in recording order rather than timed in turn")
    try:
        host = resources.process(spec)
    except NoDevice as exc:
        return answer(*tuning_medians, "none", f"no device to time them in turn ({exc}): the tuning's medians, "
                                               "no interval")
    if too_big := memory_refusal(spec, host.device.memory_bytes, INPUT_SETS + 1):  # the fresh inputs' set too
        return not_compared(host.device.name, f"device: {too_big}")
    arch = spec.benchmark.arch or host.device.arch
    try:
        orders = [_order(s, resources, arch) for s in specs]
        setup = reference_setup(spec, resources.cache, arch)
    except (CompileError, SetupFailed) as exc:
        return not_compared(host.device.name, f"compile: {exc}")
    failed = host.prepare(setup)
    bench = spec.benchmark
    # The interval holds at 95% over every look the duel may stop at; what is timed keeps within the call's
    # timeout (benchmark.timeout_s), with room for the checks and the answer.
    confidence = look_confidence(bench.comparison_pairs, bench.comparison_max_pairs)
    outcome = failed or host.compare(Duel(incumbent=orders[0], candidate=orders[1], pairs=bench.comparison_pairs,
                                          max_pairs=bench.comparison_max_pairs,
                                          bar=1 + spec.strategy.min_speedup_margin, confidence=confidence,
                                          budget_s=DUEL_SHARE_OF_TIMEOUT * bench.timeout_s))
    if isinstance(outcome, Failed):
        return not_compared(host.device.name, f"{outcome.stage}: {outcome.reason}")
    return answer(outcome.incumbent_ms, outcome.candidate_ms, host.device.name, confidence=confidence)


def _order(spec: KernelSpec, resources: BenchmarkResources, arch: str) -> Order:
    """A kernel with its defines (the configuration that won its tuning), compiled and placed."""
    params = spec.baseline_params()
    kernel, _ = compile_through(resources.cache, spec.source, spec.kernel_name, params, spec.compiler_options, arch)
    grid, block = spec.launch_geometry(params)
    return Order(params=params, kernel=kernel, grid=grid, block=block, best_ms=None,
                 shared_bytes=spec.shared_memory_bytes(params))
