"""Measure the submitted kernel of a job: compile, launch, time; every outcome is an event."""
import statistics
from collections.abc import Callable
from uuid import UUID

import numpy as np

from services.benchmark import gpu
from services.benchmark.compile_cache import CompileCache, compile_through
from services.benchmark.compiler import CompileError
from services.benchmark.replay import ReplayBook
from shared.bus import Bus
from shared.contracts import PlannerCatchUp
from shared.events import (BaselineFailed, BaselineMeasured, BaselineRequested, Event, JobSubmitted, KernelCompiled,
                           derived_id)
from shared.eventstore import ConcurrencyConflict, EventStore
from shared.inputs import make_arrays
from shared.projections import job_stream
from shared.spec import KernelSpec


def measure_baseline(store: EventStore, bus: Bus, job_id: str, request_id: UUID, device_index: int,
                     default_arch: str, cache: CompileCache | None = None,
                     replay_book: ReplayBook | None = None) -> None:
    stream = job_stream(job_id)
    history = store.read_stream(stream)
    if not _already_answered(history, request_id):
        submitted = next(e for e in history if isinstance(e, JobSubmitted))
        request = next(e for e in history if isinstance(e, BaselineRequested) and e.event_id == request_id)
        outcome = _measure(stream, submitted, request, device_index, default_arch, cache, replay_book)
        try:
            # Ids derive from the request, so the same outcome appended twice is a no-op.
            store.append(stream, outcome, expected_version=history[-1].stream_version)
        except ConcurrencyConflict:
            # The stream moved while we measured. If another worker answered this request, its answer
            # stands; otherwise the task is retried and measures again against the new stream.
            if not _already_answered(store.read_stream(stream), request_id):
                raise
    bus.dispatch(PlannerCatchUp.message(reason=f"{stream} baseline answered"))


def _already_answered(history: list[Event], request_id: UUID) -> bool:
    return any(isinstance(e, BaselineMeasured | BaselineFailed) and e.request_id == request_id for e in history)


def _measure(stream: str, submitted: JobSubmitted, request: BaselineRequested, device_index: int,
             default_arch: str, cache: CompileCache | None, replay_book: ReplayBook | None) -> list[Event]:
    spec, rid = submitted.spec, request.event_id

    def failed(stage: str, reason: str, log: str = "") -> BaselineFailed:
        return BaselineFailed(event_id=derived_id(rid, "BaselineFailed"), stream_id=stream, request_id=rid,
                              stage=stage, reason=reason, log=log)

    if spec.benchmark.replay:
        return [_replayed(stream, rid, spec, request, replay_book or ReplayBook(), failed)]
    try:
        device: gpu.DeviceInfo | None = gpu.probe(device_index)
        no_device = ""
    except gpu.NoCudaDevice as exc:
        device, no_device = None, str(exc)
    # Compile even without a device: a compile error is the more useful message, and NVRTC needs no GPU.
    arch = spec.benchmark.arch or (device.arch if device else default_arch)
    try:
        kernel, cache_hit = compile_through(cache, spec.source, spec.kernel_name, request.params,
                                            spec.compiler_options, arch)
    except CompileError as exc:
        return [failed("compile", str(exc), exc.log)]
    compiled = KernelCompiled(event_id=derived_id(rid, "KernelCompiled"), stream_id=stream, request_id=rid,
                              arch=arch, compile_ms=kernel.compile_ms, cache_key=kernel.cache_key,
                              cache_hit=cache_hit, log=kernel.log)
    if device is None:
        return [compiled, failed("device", no_device)]
    grid, block = spec.launch_geometry(request.params)
    arrays = make_arrays(spec, spec.benchmark.seed)
    args = [arrays[a.name] if a.is_array else spec.scalar_of(a, request.params) for a in spec.args]
    outputs = [i for i, a in enumerate(spec.args) if a.is_output]
    try:
        timing = gpu.time_kernel(device.index, kernel.cubin, kernel.lowered_name, grid, block, args, outputs,
                                 spec.benchmark.warmup, spec.benchmark.iterations)
    except gpu.LaunchFailed as exc:
        return [compiled, failed("launch", f"grid {grid}, block {block}: {exc}")]
    bad = [spec.args[int(i)].name for i, out in timing.outputs.items() if not np.all(np.isfinite(out))]
    if bad:
        return [compiled, failed("launch", f"output {', '.join(bad)} holds NaN or Inf after the launch")]
    measured = BaselineMeasured(event_id=derived_id(rid, "BaselineMeasured"), stream_id=stream, request_id=rid,
                                device=device.name, params=request.params, grid=grid, block=block,
                                samples_ms=timing.samples_ms, median_ms=statistics.median(timing.samples_ms))
    return [compiled, measured]


def _replayed(stream: str, rid: UUID, spec: KernelSpec, request: BaselineRequested, book: ReplayBook,
              failed: Callable[[str, str], BaselineFailed]) -> Event:
    recording = book.find(spec, request.params)
    if recording is None:
        recorded = sorted({r.kernel_name for r in book.recordings.values()}) or ["none"]
        return failed("replay", f"no recorded measurement of {spec.kernel_name} with {request.params} at these sizes; "
                                f"recordings exist for: {', '.join(recorded)}")
    grid, block = spec.launch_geometry(request.params)
    return BaselineMeasured(event_id=derived_id(rid, "BaselineMeasured"), stream_id=stream, request_id=rid,
                            device=f"{recording.device} (recorded {recording.recorded_on})", params=request.params,
                            grid=grid, block=block, samples_ms=recording.samples_ms,
                            median_ms=statistics.median(recording.samples_ms), replay=True)
