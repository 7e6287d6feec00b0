"""On a GPU machine: every memory-bound kernel of the corpus, and the naive atomic sum, optimised by the offline
rules, its best time held against a device-to-device copy of the same bytes measured in the same run (issue 21).

    python bench/memory_bound_table.py [--only transpose,gemv] [--strategy autonomous|explicit]
                                       [--jobs-timeout 900] [--concurrency 1] [--no-l2-flush] [--json OUT]
                                       [--larger] [--styles] [--plan-only]

Each kernel is one job with generator `rules`: `autonomous` (default) plans from what the recognisers find,
replanning as the kernel changes; `explicit` runs as steps every rule that applies, in the plan's order, as far
as applying them all offline reaches (each step still validated by the rules against the kernel it meets).
kforge runs embedded (SQLite under a temporary KFORGE_HOME, the in-process bus, as bench/corpus_matrix.py does);
every rewrite is verified against the submitted kernel, tuned, verified again and timed against the best so far.

For each kernel the table prints: what the recognisers found and the steps kept; the bytes one launch moves
(the spec's work.bytes, else every array once); the baseline and best times (kforge's benchmark medians); the
best's bandwidth; that bandwidth as a share of the copy's; and the speedup over the submitted kernel. The copy
moves the same bytes (half of them read, half written: a copy of bytes/2, rounded up to 16 bytes) with torch,
else cupy, else the CUDA driver's cuMemcpyDtoDAsync, timed with CUDA events (median of 30 after 5 warm-ups).
With L2 flushed (default) the jobs' benchmarks evict L2 before each timed launch (benchmark.l2_flush) and so
does the copy, both by reading twice the L2's bytes, so every figure is DRAM's and neither pays for writing back
what a flush by memset would leave dirty; --no-l2-flush times both warm. Targets: 85 % of the copy on each
kernel, 10x on the atomic sum. Kernels the corpus calls compute-bound are left out (COMPUTE_BOUND). Exit status 1
when a job did not complete.
"""
import argparse
import ctypes
import importlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
COMPUTE_BOUND = {"horner": "float64 Horner's rule, 31 dependent FMAs per element: compute-bound (corpus README)"}
STYLES = ROOT / "tests" / "corpus" / "styles"  # kernels written the ways users write them (--styles)
ATOMIC_SUM = "atomic_sum"  # tests/corpus/atomic_sum.cu: one atomicAdd per element
TARGET_SHARE, TARGET_ATOMIC_SPEEDUP = 0.85, 10.0
# Every size's copy is timed in this many rounds and keeps its fastest median: in one round on the H100, two sizes
# came out at 941 and 1,717 GB/s where their neighbours ran at 2,500 or more, and a kernel held against such a
# copy would pass at over 200% of it.
COPY_ROUNDS = 3
# --larger: the corpus kernels that move 64 MB or less, at 8 times their bytes (their outer dimension grown), so
# that a launch's fixed costs (its ramp, its last wave, a reduction's tail) weigh an eighth as much. At the corpus
# sizes, hand-written kernels of the usual structures stop near 80% of the copy on the H100: a GEMV with a warp or
# a block per row and float4 loads, block-per-row row sums (80-82%); at 8 times the bytes they reach 92-95%.
LARGER = {"bf16_axpy": {"n": 1 << 26}, "haxpy": {"n": 1 << 26}, "relu_inplace": {"n": 1 << 25},
          "bias_gelu": {"rows": 32768}, "gemv": {"rows": 32768}, "layernorm": {"rows": 32768},
          "softmax": {"rows": 32768}, "row_sum": {"rows": 65536}, "segmented_scan": {"segments": 32768},
          "conv2d": {"height": 16384}, "jacobi2d": {"ny": 16384}, "transpose": {"rows": 16384},
          "rgba_to_gray": {"height": 8640}}


@dataclass
class Row:
    kernel: str
    found: str = ""  # what the recognisers found
    plan: list[str] = field(default_factory=list)  # the rules that apply, in the plan's order (offline)
    bytes: int = 0
    outcome: str = "not run"
    detail: str = ""
    job_id: str | None = None
    wall_s: float | None = None
    baseline_ms: float | None = None
    best_ms: float | None = None
    kept: list[str] = field(default_factory=list)  # steps accepted, with their speedups
    tried: list[str] = field(default_factory=list)  # every step and how it ended
    best_rules: list[str] = field(default_factory=list)
    best_params: dict = field(default_factory=dict)
    copy_ms: float | None = None
    speedup_in_turn: float | None = None  # the job's reported speedup: its best timed in turn with the submitted
    speedup_ci: tuple[float, float] | None = None

    @property
    def gbps(self) -> float | None:
        return self.bytes / self.best_ms / 1e6 if self.best_ms else None

    @property
    def share(self) -> float | None:
        return self.copy_ms / self.best_ms if self.best_ms and self.copy_ms else None

    @property
    def speedup(self) -> float | None:
        """The job's speedup timed in turn where it was, else the ratio of the two times taken apart."""
        if self.speedup_in_turn is not None:
            return self.speedup_in_turn
        return self.baseline_ms / self.best_ms if self.best_ms and self.baseline_ms else None

    @property
    def met(self) -> bool:
        if self.kernel == ATOMIC_SUM:
            return (self.speedup or 0) >= TARGET_ATOMIC_SPEEDUP and (self.share or 0) >= TARGET_SHARE
        return (self.share or 0) >= TARGET_SHARE


def kernels(only: set[str] | None, larger: bool = False, styles: bool = False):
    """(name, spec) of every memory-bound corpus kernel, then the naive atomic sum at 32M floats; with `larger`,
    the small ones at LARGER's sizes; with `styles`, the kernels in users' styles (tests/corpus/styles) instead."""
    from kforge.specfile import load_spec
    from shared.domain.spec import KernelSpec
    from tests.corpus_kernels import corpus

    if styles:
        found = [(path.stem, load_spec(path, path.with_suffix(".yaml"))) for path in sorted(STYLES.glob("*.cu"))]
        return [(name, spec) for name, spec in found if not only or name in only]
    found = [(k.name, k.spec()) for k in corpus() if k.name not in COMPUTE_BOUND]
    if larger:
        found = [(name, spec.model_validate({**spec.model_dump(), "sizes": {**spec.sizes, **LARGER[name]}}))
                 if name in LARGER else (name, spec) for name, spec in found]
    source = (ROOT / "tests" / "corpus" / "atomic_sum.cu").read_text()
    found.append((ATOMIC_SUM, KernelSpec.model_validate({
        "kernel_name": "atomic_sum", "source": source, "sizes": {"n": 1 << 25}, "problem_size": ["n"],
        "args": [{"name": "total", "dtype": "float32", "shape": [1], "role": "out"},
                 {"name": "x", "dtype": "float32", "shape": ["n"]}, {"name": "n", "dtype": "int32", "value": "n"}],
        "params": {"block_size_x": 256}, "tune_params": {"block_size_x": [128, 256, 512, 1024]}})))
    return [(name, spec) for name, spec in found if not only or name in only]


def planned(spec) -> list[str]:
    """Every rule that applies, in the plan's order, applying each as it is reached until none is left."""
    from services.generator import rules

    candidate, order, progress = spec.as_candidate(), [], True
    while progress:
        progress = False
        for rule_id in rules.PLAN_ORDER:
            if rules.check(rule_id, spec, candidate) is None:
                candidate, progress = rules.apply(rule_id, spec, candidate), True
                order.append(rule_id)
    return order


def job_spec(spec, strategy: str, plan: list[str], flush: bool):
    from services.generator import rules

    chosen = {"name": strategy}
    if strategy == "explicit":
        chosen["steps"] = [{"id": rule_id, "description": rules.RULES[rule_id].description} for rule_id in plan]
    return spec.model_validate({**spec.model_dump(), "strategy": chosen, "generator": {"provider": "rules"},
                                "benchmark": {**spec.benchmark.model_dump(), "l2_flush": flush}})


# --- the copy -----------------------------------------------------------------------------------------
def copy_times(byte_counts: set[int], l2_bytes: int, flush: bool, reps: int = 30) -> tuple[dict[int, float], str]:
    """Milliseconds to copy bytes/2 device to device, for each byte count, and what copied. Each count is also
    copied at its next whole MiB and that time scaled back to the count, and the faster of the two kept: on the
    H100 a copy of conv2d's 33,488,960 bytes took 0.0184 ms where one of 33,554,432 took 0.0157 ms, an artefact
    of the copy's size that would flatter a kernel of that size."""
    sizes = sorted({size for nbytes in byte_counts for size in (nbytes, whole_mib(nbytes))})
    for copier in (_torch_copy, _cupy_copy, _driver_copy):
        try:
            rounds = [copier(sizes, l2_bytes if flush else 0, reps) for _ in range(COPY_ROUNDS)]
        except ImportError:
            continue
        times = {size: min(found[size] for found, _ in rounds) for size in sizes}
        return {nbytes: fastest_copy(nbytes, times) for nbytes in byte_counts}, rounds[0][1]
    raise RuntimeError("no way to copy on the device")


def whole_mib(nbytes: int) -> int:
    return -(-nbytes // 2**20) * 2**20


def fastest_copy(nbytes: int, times: dict[int, float]) -> float:
    """The copy time standing for `nbytes`: its own, or its next whole MiB's scaled down to it, the faster."""
    return min(times[nbytes], times[whole_mib(nbytes)] * nbytes / whole_mib(nbytes))


def _copied(nbytes: int) -> int:
    """The bytes a copy standing for `nbytes` moves one way: half of them, rounded up to 16 bytes so that the
    copy may use 16-byte vectors whatever the kernel's byte count."""
    return -(-max(nbytes // 2, 1) // 16) * 16


def cupy_event_ms(run) -> float:
    """Milliseconds `run` takes on cupy's current stream, between two CUDA events."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    run()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end)


def median_ms(run, evict, record, reps: int) -> float:
    """The median of `reps` timings of `run` by `record` after 5 warm-ups, `evict` called before each."""
    times = []
    for i in range(reps + 5):
        evict()
        elapsed = record(run)
        if i >= 5:
            times.append(elapsed)
    return statistics.median(times)


def _torch_copy(counts: list[int], l2: int, reps: int) -> tuple[dict[int, float], str]:
    import torch

    flush = torch.zeros(max(2 * l2, 1), dtype=torch.uint8, device="cuda")  # read to flush L2 (summed)

    def record(copy) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        copy()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    found = {}
    for nbytes in counts:
        half = _copied(nbytes)
        src = torch.empty(half, dtype=torch.uint8, device="cuda").random_(0, 255)
        dst = torch.empty_like(src)
        found[nbytes] = median_ms(lambda: dst.copy_(src), (lambda: flush.sum()) if l2 else (lambda: None), record,
                                  reps)
    src = dst = flush = None
    torch.cuda.empty_cache()
    return found, f"torch {torch.__version__} Tensor.copy_"


def _cupy_copy(counts: list[int], l2: int, reps: int) -> tuple[dict[int, float], str]:
    import cupy

    flush = cupy.zeros(max(2 * l2, 1), dtype=cupy.uint8)  # read to flush L2 (summed)

    found = {}
    for nbytes in counts:
        half = _copied(nbytes)
        src, dst = cupy.ones(half, dtype=cupy.uint8), cupy.empty(half, dtype=cupy.uint8)
        found[nbytes] = median_ms(lambda: dst.__setitem__(Ellipsis, src), (lambda: flush.sum()) if l2 else
                                  (lambda: None), cupy_event_ms, reps)
    src = dst = flush = None
    cupy.get_default_memory_pool().free_all_blocks()
    return found, f"cupy {cupy.__version__} array copy"


def _driver_copy(counts: list[int], l2: int, reps: int) -> tuple[dict[int, float], str]:
    from cuda.bindings import driver

    def ok(result):
        status, *values = result if isinstance(result, tuple) else (result,)
        if status != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver: {status.name}")
        return values[0] if len(values) == 1 else values

    ok(driver.cuInit(0))
    device = ok(driver.cuDeviceGet(0))
    context = ok(driver.cuDevicePrimaryCtxRetain(device))
    ok(driver.cuCtxSetCurrent(context))
    stream = ok(driver.cuStreamCreate(0))
    start, end = ok(driver.cuEventCreate(0)), ok(driver.cuEventCreate(0))
    flush = ok(driver.cuMemAlloc(max(2 * l2, 1)))
    read = _driver_reader(ok, device)

    def record(copy) -> float:
        ok(driver.cuEventRecord(start, stream))
        copy()
        ok(driver.cuEventRecord(end, stream))
        ok(driver.cuEventSynchronize(end))
        return ok(driver.cuEventElapsedTime(start, end))

    found = {}
    try:
        for nbytes in counts:
            half = _copied(nbytes)
            src, dst = ok(driver.cuMemAlloc(half)), ok(driver.cuMemAlloc(half))
            ok(driver.cuMemsetD8Async(src, 1, half, stream))
            found[nbytes] = median_ms(lambda: ok(driver.cuMemcpyDtoDAsync(dst, src, half, stream)),
                                   (lambda: read(flush, 2 * l2, stream)) if l2 else
                                   (lambda: None), record, reps)
            ok(driver.cuMemFree(src)), ok(driver.cuMemFree(dst))
    finally:
        ok(driver.cuMemFree(flush))
        ok(driver.cuStreamDestroy(stream))
        ok(driver.cuDevicePrimaryCtxRelease(device))
    return found, "the CUDA driver's cuMemcpyDtoDAsync"


def _driver_reader(ok, device):
    """A launch reading `nbytes` at a device address on a stream, writing nothing: the L2 flush of the copy timed
    through the driver alone, the same as the torch and cupy copies' sums."""
    from cuda.bindings import driver, nvrtc

    source = b"""extern "C" __global__ void read_all(const unsigned char *p, unsigned long long n, unsigned char *never) {
        unsigned char seen = 0;
        for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
             i += (unsigned long long)gridDim.x * blockDim.x) seen ^= p[i];
        if (never) *never = seen;
    }"""
    major = ok(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           device))
    minor = ok(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           device))

    def compiled(result):
        status, *values = result
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"the L2 flush's reading kernel did not compile: {status.name}")
        return values[0] if values else None

    program = compiled(nvrtc.nvrtcCreateProgram(source, b"read_all.cu", 0, [], []))
    options = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    compiled(nvrtc.nvrtcCompileProgram(program, len(options), options))
    cubin = b" " * compiled(nvrtc.nvrtcGetCUBINSize(program))
    compiled(nvrtc.nvrtcGetCUBIN(program, cubin))
    kernel = ok(driver.cuModuleGetFunction(ok(driver.cuModuleLoadData(cubin)), b"read_all"))

    def read(address, nbytes: int, stream) -> None:
        args = ((int(address), nbytes, 0), (ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_void_p))
        ok(driver.cuLaunchKernel(kernel, 1024, 1, 1, 256, 1, 1, 0, stream, args, 0))
    return read


# --- the jobs -----------------------------------------------------------------------------------------
def run(rt, row: Row, spec, timeout_s: float) -> None:
    from shared.application.jobs import NoProgress, cancel_job, follow_job, job_events, submit_job
    from shared.domain.events import (JOB_ENDS, BaselineMeasured, CandidateRejected, JobCompleted, JobFailed,
                                      StepAccepted, StepDiscarded, StepSkipped)
    from shared.domain.steps import project_optimisation, timed_in_turn

    started = time.monotonic()
    row.job_id = submit_job(rt.store, rt.bus, spec, submitted_by="memory-bound-table", run="memory-bound-table")
    finished = False
    try:
        finished = follow_job(rt.store, row.job_id, lambda event: None, timeout_s=timeout_s, poll_s=0.5,
                              stalled=rt.bus.stalled).finished
    except NoProgress as exc:
        row.outcome, row.detail = "stalled", exc.reason
    if not finished:
        try:
            cancel_job(rt.store, rt.bus, row.job_id, reason=f"no end within {timeout_s:.0f} s", cancelled_by="python")
        except Exception:  # it ended meanwhile
            pass
    events = job_events(rt.store, row.job_id)
    row.wall_s = time.monotonic() - started
    end = next((e for e in reversed(events) if isinstance(e, JOB_ENDS)), None)
    if isinstance(end, JobCompleted):
        row.outcome, row.detail = "completed", end.summary
    elif isinstance(end, JobFailed):
        row.outcome, row.detail = f"failed:{end.stage}", end.reason
    elif row.outcome == "not run":
        row.outcome = "HUNG" if end is None else type(end).__name__
    baseline = next((e for e in events if isinstance(e, BaselineMeasured)), None)
    row.baseline_ms = baseline.median_ms if baseline else None
    opt = project_optimisation(events)
    if timed_in_turn(opt.overall):
        row.speedup_in_turn, row.speedup_ci = opt.overall.speedup, opt.overall.speedup_ci
    if opt.best is not None and opt.best.time_ms:
        from services.generator import rules

        row.best_ms, row.best_params = opt.best.time_ms, dict(opt.best.params)
        row.best_rules = list(rules.applied(opt.best.candidate.source))
    rejected = {e.candidate_id: e for e in events if isinstance(e, CandidateRejected)}
    for e in events:
        if isinstance(e, StepAccepted):
            row.kept.append(f"{e.step_id} {e.speedup:.2f}x" if e.speedup else e.step_id)
            row.tried.append(f"{e.step_id}: accepted")
        elif isinstance(e, StepDiscarded):
            why = rejected.get(e.candidate_id or "")
            row.tried.append(f"{e.step_id}: discarded at {e.stage}{f' ({why.check})' if why else ''}: {e.reason[:200]}")
        elif isinstance(e, StepSkipped):
            row.tried.append(f"{e.step_id}: skipped: {e.reason[:160]}")


def table(rows: list[Row], copier: str, flush: bool, strategy: str):
    from rich.table import Table

    from shared.domain.speedup import speedup_text

    def number(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    title = (f"memory-bound kernels, offline rules ({strategy}): best time against a device-to-device copy of the "
             f"same bytes ({copier}, L2 {'flushed' if flush else 'warm'}); targets {TARGET_SHARE:.0%} of the copy, "
             f"{TARGET_ATOMIC_SPEEDUP:.0f}x on {ATOMIC_SUM}")
    out = Table("kernel", "found", "MB/launch", "baseline ms", "best ms", "GB/s", "copy GB/s", "% of copy",
                "speedup (in turn)",
                "kept", "target", title=title)
    for r in rows:
        copy_gbps = r.bytes / r.copy_ms / 1e6 if r.copy_ms else None
        verdict = ("[green]met[/green]" if r.met else "[red]missed[/red]") if r.outcome == "completed" else \
            f"[red]{r.outcome}[/red]"
        out.add_row(r.kernel, r.found, f"{r.bytes / 1e6:,.1f}", number(r.baseline_ms, ".4f"), number(r.best_ms, ".4f"),
                    number(r.gbps, ",.0f"), number(copy_gbps, ",.0f"),
                    "-" if r.share is None else f"{r.share:.0%}",
                    "-" if r.speedup is None else (speedup_text(r.speedup, r.speedup_ci) if r.speedup_in_turn
                                                   else f"{r.speedup:.2f}x apart"),
                    ", ".join(r.kept) or "none", verdict)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated kernel names (default: every memory-bound one)")
    parser.add_argument("--strategy", choices=("autonomous", "explicit"), default="autonomous")
    parser.add_argument("--jobs-timeout", type=float, default=900.0, help="seconds before a job is given up")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="jobs in flight at once (more is faster, but jobs then share the GPU while timing)")
    parser.add_argument("--no-l2-flush", action="store_true", help="time the jobs and the copy with L2 warm")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--larger", action="store_true",
                        help="run the kernels of 64 MB or less at 8 times their bytes (LARGER)")
    parser.add_argument("--styles", action="store_true",
                        help="the kernels in users' styles (tests/corpus/styles) instead of the corpus")
    parser.add_argument("--plan-only", action="store_true",
                        help="print what the recognisers find and the plan of each kernel, then stop (no GPU needed)")
    args = parser.parse_args()
    flush = not args.no_l2_flush
    os.environ.update(KFORGE_HOME=tempfile.mkdtemp(prefix="kforge-memory-bound-"))
    os.environ.pop("REDIS_URL", None), os.environ.pop("DATABASE_URL", None)

    from rich.console import Console
    from rich.markup import escape

    from services.generator import rules
    from shared.adapters.device.probe import probe

    console = Console(highlight=False, width=220)
    chosen = kernels(set(args.only.split(",")) if args.only else None, args.larger, args.styles)
    if not chosen:
        parser.error("no kernel chosen")
    rows, specs = [], {}
    for name, spec in chosen:
        plan = planned(spec)
        rows.append(Row(name, rules.found(spec).removeprefix("The recognisers found ").rstrip("."), plan,
                        spec.bytes_per_launch()))
        specs[name] = job_spec(spec, args.strategy, plan, flush)
    if args.plan_only:
        for r in rows:
            console.print(f"{r.kernel:<16} {r.bytes / 1e6:>9,.1f} MB  {r.found}: {', '.join(r.plan) or 'no rule'}")
        return
    device = probe(0)
    l2 = device.peaks.l2_bytes if device.peaks else 0
    copies, copier = copy_times({r.bytes for r in rows}, l2, flush)
    for r in rows:
        r.copy_ms = copies[r.bytes]
    console.print(f"{device.name}: copy measured with {copier}; {len(rows)} kernels, strategy {args.strategy}")

    importlib.import_module("kforge.worker")  # every service's tasks, in this process
    from shared.adapters.settings import Settings
    from shared.application import runtime

    rt = runtime.build(Settings(KFORGE_HOME=os.environ["KFORGE_HOME"], REDIS_URL=None, DATABASE_URL=None))
    runtime.install(rt)
    todo = list(rows)
    lock = threading.Lock()

    def follower() -> None:
        while True:
            with lock:
                if not todo:
                    return
                row = todo.pop(0)
            console.print(f"[dim]start {row.kernel}: plan {', '.join(row.plan) or 'none'}[/dim]")
            try:
                run(rt, row, specs[row.kernel], args.jobs_timeout)
            except Exception as exc:  # the bench itself broke on this kernel: say so and go on
                row.outcome, row.detail = "error", f"{type(exc).__name__}: {exc}"
            console.print(f"{row.kernel:<16} {row.outcome} in {row.wall_s or 0:.0f} s: kept "
                          f"{', '.join(row.kept) or 'none'}; {escape(row.detail[:160])}")

    threads = [threading.Thread(target=follower) for _ in range(max(1, args.concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    console.print(table(rows, copier, flush, args.strategy))
    for r in rows:
        console.print(f"[bold]{r.kernel}[/bold] ({r.job_id}): {r.outcome}; best carries "
                      f"{', '.join(r.best_rules) or 'no rule'} with {r.best_params}")
        for line in r.tried:
            console.print(f"    {escape(line)}")
    if args.json:
        args.json.write_text(json.dumps({
            "device": device.name, "copier": copier, "l2_flushed": flush, "strategy": args.strategy,
            "rows": [{**asdict(r), "gbps": r.gbps, "share_of_copy": r.share, "speedup": r.speedup, "met": r.met}
                     for r in rows]}, indent=2))
    console.file.flush()
    sys.stdout.flush()
    # Leave without the interpreter's clean-up: a job given up on may still hold a worker thread.
    os._exit(0 if all(r.outcome == "completed" for r in rows) else 1)


if __name__ == "__main__":
    main()
