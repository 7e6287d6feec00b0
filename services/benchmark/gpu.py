"""The benchmark's session in the GPU process: checks and times configurations of one space.

Runs only in the process that owns the GPU (see gpu_host.py); nothing here runs at import time, and CUDA
is initialised only there, never in a process that forks.

Every launch and synchronisation is checked. A configuration's output is compared with the reference on
the device (a small comparison kernel), so a 64 MB matrix is not copied back to be checked.

Launches face what a real call faces: two input sets drawn with different seeds, each with the reference
output the submitted kernel computes from it, alternate from one timed launch to the next, and every output
is restored before each launch; so a kernel that keys a cached result on its inputs, or reuses the last
launch's output, computes wrong or gains nothing.
"""
import math
import random
from dataclasses import dataclass

import numpy as np

from services.benchmark import sampling
from services.benchmark.measurement import INPUT_SETS, Duel, Measured, Order, Paired, Setup
from shared.device.compiler import compile_kernel
from shared.device.nvrtc import CompileError
from shared.device.process import Failed
from shared.device.session import SessionBase
from shared.inputs import make_arrays

COMPARE_SOURCE = r"""
// Compare a configuration's output with the reference: mismatch count, first mismatching index and the
// largest absolute error (non-negative doubles order like their bit patterns, so atomicMax on the bits works).
#define INF __longlong_as_double(0x7ff0000000000000ll)
__device__ float half_bits_to_float(unsigned short h);
__device__ double load(const VALUE *p, unsigned long long i) { return TO_DOUBLE(p[i]); }
__device__ float half_bits_to_float(unsigned short h) {
    unsigned int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float magnitude = exp == 0 ? ldexpf((float)mant, -24)
                    : exp == 31 ? (mant ? __int_as_float(0x7fc00000) : __int_as_float(0x7f800000))
                    : ldexpf((float)(mant | 0x400), (int)exp - 25);
    return sign ? -magnitude : magnitude;
}
extern "C" __global__ void compare_outputs(const VALUE *out, const VALUE *ref, unsigned long long n,
                                           double atol, double rtol, unsigned long long *stats) {
    unsigned long long bad = 0, first = ~0ull;
    double worst = 0.0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        double o = load(out, i), r = load(ref, i), err;
        bool mismatch;
        if (isnan(o) || isnan(r)) { mismatch = isnan(o) != isnan(r); err = mismatch ? INF : 0.0; }
        else if (isinf(o) || isinf(r)) { mismatch = o != r; err = mismatch ? INF : 0.0; }
        else { err = fabs(o - r); mismatch = err > atol + rtol * fabs(r); }
        if (mismatch) { bad++; if (i < first) first = i; }
        if (err > worst) worst = err;
    }
    if (bad) { atomicAdd(&stats[0], bad); atomicMin(&stats[1], first); }
    if (worst > 0.0) atomicMax(&stats[2], (unsigned long long)__double_as_longlong(worst));
}
"""
_VALUE_TYPES = {"float16": ("unsigned short", "half_bits_to_float"), "float32": ("float", "(double)"),
                "float64": ("double", "(double)"), "int8": ("signed char", "(double)"), "int16": ("short", "(double)"),
                "int32": ("int", "(double)"), "int64": ("long long", "(double)"), "uint8": ("unsigned char", "(double)"),
                "uint16": ("unsigned short", "(double)"), "uint32": ("unsigned int", "(double)"),
                "uint64": ("unsigned long long", "(double)")}


@dataclass
class InputSet:
    """One set of arguments on the device: `arrays` per array argument in signature order (None for a
    scalar), and per output argument (arg, buffer, pristine copy, reference output, elements)."""

    seed: int
    arrays: list
    outputs: list


class DeviceSession(SessionBase):
    """One GPU, one space at a time: the input sets uploaded once, their reference outputs kept on the device."""

    def __init__(self, index: int):
        super().__init__(index)
        self._comparers: dict[str, object] = {}
        self._flush = None
        self._setup: Setup | None = None
        self._setup_key: tuple | None = None
        self._sets: list[InputSet] = []

    # --- per space ---
    def prepare(self, setup: Setup) -> Failed | None:
        """Upload the input sets and run the reference once on each; a failing reference fails the whole space.
        The same setup again (a job's tuning after its baseline) keeps what is on the device."""
        key = (setup.spec.model_dump_json(), setup.seed, setup.reference.cache_key, setup.reference_geometry)
        if self._setup is not None and key == self._setup_key:
            return None
        self._release()
        spec = setup.spec
        self._sets = [self._upload(spec, setup.seed + i) for i in range(INPUT_SETS)]
        if self.info.peaks and self.info.peaks.l2_bytes:  # for the spec's l2_flush, and every comparison
            self._flush = self.allocate(2 * self.info.peaks.l2_bytes)
        self._setup, self._setup_key = setup, key
        grid, block = setup.reference_geometry
        for inputs in self._sets:
            outcome = self._checked_launch(setup.reference, grid, block, inputs, setup.reference_params)
            if isinstance(outcome, Failed):
                self._setup = None
                return Failed(outcome.stage, f"the submitted kernel, the reference, failed on the inputs of seed "
                                             f"{inputs.seed}: {outcome.reason}", outcome.poisoned)
            for _, buffer, _, reference, _ in inputs.outputs:
                self.copy(reference, buffer)
        return None

    def _upload(self, spec, seed: int) -> InputSet:
        arrays = make_arrays(spec, seed)  # one set at a time on the host: the device holds them all
        inputs = InputSet(seed=seed, arrays=[], outputs=[])
        for arg in spec.args:
            if not arg.is_array:
                inputs.arrays.append(None)
                continue
            buffer = self.upload(arrays[arg.name])
            inputs.arrays.append(buffer)
            if arg.is_output:
                pristine, reference = self.allocate(buffer.size), self.allocate(buffer.size)
                self.copy(pristine, buffer)
                inputs.outputs.append((arg, buffer, pristine, reference, arrays[arg.name].size))
        return inputs

    def _args(self, inputs: InputSet, params: dict) -> list:
        return [self._setup.spec.scalar_of(a, params) if buffer is None else buffer
                for a, buffer in zip(self._setup.spec.args, inputs.arrays)]

    def _timed_set(self, i: int) -> InputSet:
        """The input set of timed launch `i`: they alternate, the checked launch (on set 0) counting as -1."""
        return self._sets[(i + 1) % len(self._sets)]

    # --- per configuration ---
    def measure(self, order: Order) -> Measured | Failed:
        assert self._setup is not None, "prepare() first"
        bench = self._setup.spec.benchmark
        checked = self._checked_launch(order.kernel, order.grid, order.block, self._sets[0], order.params)
        if isinstance(checked, Failed):
            return checked
        check_ms, kernel = checked
        mismatch, max_error = self._compare(bench, self._sets[0])
        if mismatch:
            return Failed("output", mismatch, details={"max_abs_error": max_error})
        # The checked launch ran cold (module load, first touch): only a far slower one is abandoned on it.
        if order.best_ms is not None and check_ms > 2 * bench.abandon_factor * order.best_ms:
            return Measured(samples_ms=[check_ms], check_ms=check_ms, max_abs_error=max_error, abandoned=True)
        for i in range(bench.warmup):
            warm = self._timed_launch(kernel, order, self._timed_set(i), flush=False)
            if isinstance(warm, Failed):
                return warm
        policy = sampling.SamplingPolicy(bench.min_samples, bench.iterations, bench.ci_target, bench.abandon_factor)
        spot = random.randrange(policy.min_samples)  # a timed launch checked besides the last ones, unpredictably
        samples: list[float] = []
        while (step := sampling.next_step(samples, order.best_ms, policy)) is sampling.Next.SAMPLE:
            inputs = self._timed_set(len(samples))
            timed = self._timed_launch(kernel, order, inputs)
            if isinstance(timed, Failed):
                return timed
            samples.append(timed)
            if len(samples) - 1 == spot:
                mismatch, error = self._compare(bench, inputs)
                if mismatch:
                    return _inconsistent(f"timed launch {spot + 1}", inputs, mismatch, error)
                max_error = max(max_error, error)
        # Each set's outputs hold its latest launch's: the last timed launch's, and the one before it.
        for inputs in self._sets:
            mismatch, error = self._compare(bench, inputs)
            if mismatch:
                return _inconsistent("the latest launch", inputs, mismatch, error)
            max_error = max(max_error, error)
        return Measured(samples_ms=samples, check_ms=check_ms, max_abs_error=max_error,
                        abandoned=step is sampling.Next.ABANDON)

    def compare(self, duel: Duel) -> Paired | Failed:
        """Time two configurations in turn, each launch on the same input set as its partner's, and check
        both outputs of the last pair."""
        assert self._setup is not None, "prepare() first"
        bench = self._setup.spec.benchmark
        orders = (duel.incumbent, duel.candidate)
        kernels = [self.load(order.kernel) for order in orders]
        if failed := next((k for k in kernels if isinstance(k, Failed)), None):
            return failed
        for side in (0, 1):
            for i in range(bench.warmup):
                warm = self._timed_launch(kernels[side], orders[side], self._timed_set(i), flush=False)
                if isinstance(warm, Failed):
                    return _named(side, warm)
        samples: tuple[list[float], list[float]] = ([], [])
        for i in range(duel.pairs):
            inputs = self._timed_set(i)
            # Which goes first alternates every other pair, so neither always follows the other (and each
            # input set sees both orders): a cache the first leaves warm would otherwise favour the second.
            for side in ((0, 1) if (i // 2) % 2 == 0 else (1, 0)):
                # Always from a flushed L2: what one kernel leaves resident (or pins there) never speeds up the
                # next launch, so a step cannot be accepted for a time a real call, after other work, would
                # not see.
                timed = self._timed_launch(kernels[side], orders[side], inputs, flush=True)
                if isinstance(timed, Failed):
                    return _named(side, timed)
                samples[side].append(timed)
                if i == duel.pairs - 1:
                    mismatch, error = self._compare(bench, inputs)
                    if mismatch:
                        return _named(side, _inconsistent("its last launch", inputs, mismatch, error))
        return Paired(incumbent_ms=samples[0], candidate_ms=samples[1])

    # --- launches ---
    def _checked_launch(self, compiled, grid, block, inputs: InputSet, params: dict):
        """Reset the outputs, launch once with timing, wait: (ms, kernel) or Failed with the driver's words."""
        kernel = self.load(compiled)
        if isinstance(kernel, Failed):
            return kernel
        elapsed = self.timed_launch(kernel, grid, block, self._args(inputs, params),
                                    before=lambda: self._restore_outputs(inputs))
        return elapsed if isinstance(elapsed, Failed) else (elapsed, kernel)

    def _timed_launch(self, kernel, order: Order, inputs: InputSet, flush: bool | None = None) -> float | Failed:
        """A timed launch that faces what a real call faces: every output of its input set as it was before
        any launch (pristine for `out`, the original values for `inout`), so no launch finds the last one's
        results to reuse; and with L2 flushed when `flush` says so (default: when the spec asks for it), so
        each sample reads from DRAM. Both happen outside the timed region."""
        flushing = (self._setup.spec.benchmark.l2_flush if flush is None else flush) and self._flush is not None

        def before() -> None:
            self._restore_outputs(inputs)
            if flushing:
                self.fill(self._flush)

        return self.timed_launch(kernel, order.grid, order.block, self._args(inputs, order.params), before=before)

    def _restore_outputs(self, inputs: InputSet) -> None:
        for _, buffer, pristine, _, _ in inputs.outputs:
            self.copy(buffer, pristine)

    def _compare(self, bench, inputs: InputSet) -> tuple[str, float]:
        """('' or why the outputs of `inputs` differ from its reference, largest absolute error)."""
        from cuda.core import LaunchConfig, launch

        worst, problems = 0.0, []
        for arg, buffer, _, reference, size in inputs.outputs:
            atol, rtol = bench.tolerance(arg.dtype)
            stats = np.array([0, np.iinfo(np.uint64).max, 0], dtype=np.uint64)
            stats_buffer = self.upload(stats, keep=False)
            blocks = max(1, min(math.ceil(size / 256), 4 * 1024))
            launch(self.stream, LaunchConfig(grid=blocks, block=256), self._comparer(arg.dtype), buffer, reference,
                   np.uint64(size), np.float64(atol), np.float64(rtol), stats_buffer)
            self.download(stats, stats_buffer)
            stats_buffer.close(self.stream)
            error = float(stats[2:3].view(np.float64)[0])
            worst = max(worst, error)
            if stats[0]:
                problems.append(f"{int(stats[0])} of {size} elements of {arg.name} differ from the reference beyond "
                                f"atol {atol:g} + rtol {rtol:g} x |ref| (first at index {int(stats[1])}, "
                                f"largest absolute error {error:.3g})")
        return "; ".join(problems), worst

    def _comparer(self, dtype: str):
        if dtype not in self._comparers:
            value, to_double = _VALUE_TYPES[dtype]
            source = f"#define VALUE {value}\n#define TO_DOUBLE {to_double}\n{COMPARE_SOURCE}"
            try:
                compiled = compile_kernel(source, "compare_outputs", {}, [], self.info.arch)
            except CompileError as exc:  # a kforge bug, not the user's: say so with the log
                raise RuntimeError(f"kforge's output comparison kernel did not compile: {exc}\n{exc.log}") from None
            kernel = self.load(compiled)
            if isinstance(kernel, Failed):
                raise RuntimeError(f"kforge's output comparison kernel did not load: {kernel.reason}")
            self._comparers[dtype] = kernel
        return self._comparers[dtype]

    def _release(self) -> None:
        self.release()
        self._flush, self._setup, self._sets = None, None, []


def _inconsistent(which: str, inputs: InputSet, mismatch: str, error: float) -> Failed:
    return Failed("output", f"inconsistent across launches: {which}, on the inputs of seed {inputs.seed}, differs "
                            f"from their reference output: {mismatch}", details={"max_abs_error": error})


def _named(side: int, failed: Failed) -> Failed:
    """Which of the two compared kernels failed, in the reason."""
    who = ("the best kernel so far", "the candidate")[side]
    return Failed(failed.stage, f"{who}: {failed.reason}", failed.poisoned, failed.details)
