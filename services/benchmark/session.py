"""BenchmarkSession, the benchmark's GpuSession: checks and times configurations of one space.

Runs only in the child that owns the GPU, spawned by a BenchmarkProcess (process.py); nothing here runs at
import time, and CUDA is initialised only there, never in a process that forks.

Every launch and synchronisation is checked. A configuration's output is compared with the reference on
the device (kforge's own comparison kernel), so a 64 MB matrix is not copied back to be checked, within a
tolerance the reference's own runs decide: it runs REFERENCE_RUNS times on each input set, and how far those
runs disagree widens the tolerance of a kernel whose result depends on order (shared/domain/tolerance.py).

Launches face what a real call faces: two input sets drawn with different seeds, each with the reference
output the submitted kernel computes from it, alternate from one timed launch to the next, and every output
is restored before each launch; so a kernel that keys a cached result on its inputs, or reuses the last
launch's output, computes wrong or gains nothing. Every pure output starts each launch filled with one byte
drawn per space, neither zero nor the verifier's poison (NaN), unless the reference reads it before writing (it
accumulates into it) and so needs it zeroed: a kernel that tells a timed launch from a verified run by its
outputs' content (the poison), or that counts on zeroed outputs, leaves its outputs wrong there, and they are
checked. A kernel may still cache results keyed on the inputs' values, which two sets that repeat would
reward; so the comparison in turn, where a step is accepted or not, runs every pair on inputs drawn afresh
on the device (a seed no launch has seen, every input as the spec draws it), drawn again before each launch
so that neither kernel finds what the other did to them, and checks the two outputs of every pair against
each other.
"""
import math
import random
import time
from dataclasses import dataclass

import numpy as np

from services.benchmark import sampling
from services.benchmark.measurement import INPUT_SETS, Duel, Measured, Order, Paired, Setup
from shared.adapters.array_files import ArrayFileError, read_array
from shared.adapters.device.own_kernels import OwnKernels
from shared.adapters.device.process import Failed
from shared.adapters.device.session import GpuSession
from shared.adapters.inputs import distribution_of, make_arrays, special_values, stream_key
from shared.domain.dtypes import is_float
from shared.domain.events import Tolerance
from shared.domain.tolerance import REFERENCE_RUNS, answer_tolerances, derive_each, set_in_spec

# The bytes a pure output may start filled with: each makes a finite, non-zero value of every dtype (0x7C-0x7F
# and 0xFC-0xFF repeated are infinite or NaN in some float type), none is 0 or the verifier's poison (0xFF).
START_BYTES = (*range(0x11, 0x70), *range(0x91, 0xF0))


@dataclass
class InputSet:
    """One set of arguments on the device: `arrays` per array argument in signature order (None for a
    scalar), and per output argument (arg, buffer, pristine copy, reference output, elements)."""

    seed: int
    arrays: list
    outputs: list


class BenchmarkSession(GpuSession):
    """One GPU, one space at a time: the input sets uploaded once, their reference outputs kept on the device."""

    def __init__(self, index: int):
        super().__init__(index)
        self._own = OwnKernels(self)
        self._tolerances: dict[str, Tolerance] = {}  # per output of the space, from the reference's runs
        self._answer_tolerances: dict[str, Tolerance] = {}  # per output with an answer, as the verifier holds it
        self._flush = None
        self._setup: Setup | None = None
        self._setup_key: tuple | None = None
        self._sets: list[InputSet] = []
        self._fresh: InputSet | None = None  # the comparison's inputs, drawn afresh for every pair

    # --- per space ---
    def prepare(self, setup: Setup) -> Failed | None:
        """Upload the input sets and run the reference REFERENCE_RUNS times on each, keeping its first output
        and the tolerance its runs' disagreement decides; a failing reference fails the whole space. The same
        setup again (a job's tuning after its baseline) keeps what is on the device."""
        key = (setup.spec.model_dump_json(), setup.seed, setup.reference.cache_key, setup.reference_geometry,
               setup.reference_shared_bytes)
        if self._setup is not None and key == self._setup_key:
            return None
        self._release()
        spec = setup.spec
        try:
            self._sets = [self._upload(spec, setup.seed + i) for i in range(INPUT_SETS)]
            answers = {a.name: read_array(a.answer, a.dtype, spec.shape_of(a)) for a in spec.args if a.answer}
        except ArrayFileError as exc:
            return Failed("data", str(exc))
        if self.info.peaks and self.info.peaks.l2_bytes:  # for the spec's l2_flush, and every comparison
            self._flush = self.allocate(2 * self.info.peaks.l2_bytes)
        self._setup, self._setup_key = setup, key
        spread = {arg.name: (0.0, 0.0) for arg, *_ in self._sets[0].outputs}
        for inputs in self._sets:
            for run in range(REFERENCE_RUNS):
                if failed := self._reference_run(inputs):
                    self._setup = None
                    return failed
                for arg, buffer, _, reference, size in inputs.outputs:
                    if run == 0:
                        self.copy(reference, buffer)
                        continue
                    found = self._own.compare(int(buffer.handle), int(reference.handle), size, arg.dtype, 0.0, 0.0)
                    spread[arg.name] = (max(spread[arg.name][0], found.max_abs),
                                        max(spread[arg.name][1], found.max_rel))
        self._tolerances, self._answer_tolerances = self._derived_tolerances(spread, answers)
        if failed := self._fill_pure_outputs(random.choice(START_BYTES), spread):
            self._setup = None
            return failed
        # An answer comes with fixed data on every input, so both sets hold the same inputs: one is checked.
        if answers and (wrong := self._answer_mismatch(self._sets[0], answers)):
            self._setup = None
            return Failed("output", wrong)
        return None

    def _fill_pure_outputs(self, byte: int, spread: dict[str, tuple[float, float]]) -> Failed | None:
        """Start every pure output filled with `byte` in every set, but those whose result from it differs from
        their result from zeros on any set by more than the reference's own `spread` between runs: the reference
        reads them before writing (it accumulates into them), so they stay zeroed. Not the output's tolerance: a
        fill byte that makes a tiny value would hide under it, and an accumulating kernel's result would then
        carry that value into every timed launch."""
        zeroed: set[str] = set()
        for inputs in self._sets:
            pure = [output for output in inputs.outputs if output[0].effective_role == "out"]
            if not pure:
                return None
            for _, _, pristine, _, _ in pure:
                self.fill(pristine, byte)
            if failed := self._reference_run(inputs):
                return failed
            zeroed |= {arg.name for arg, buffer, _, reference, size in pure
                       if self._differences(arg.dtype, buffer, reference, size, *spread[arg.name])[0]}
        for inputs in self._sets:
            for arg, _, pristine, _, _ in inputs.outputs:
                if arg.name in zeroed:
                    self.fill(pristine, 0)
        return None

    def _derived_tolerances(self, spread: dict[str, tuple[float, float]],
                            answers: dict) -> tuple[dict[str, Tolerance], dict[str, Tolerance]]:
        """Each output's tolerance (shared/domain/tolerance.py) from the reference's spread, (absolute, relative) by
        output, and the scale of the float inputs: their elements in one set, the largest finite in any; and the
        tolerance of each output with an answer against it, by the same rule as the verifier's."""
        spec = self._setup.spec
        floats = [a for a in spec.args if a.is_array and a.effective_role != "out" and is_float(a.dtype)]
        counts = {a.name: math.prod(spec.shape_of(a)) for a in floats}
        largest = max((self._own.max_abs(int(buffer.handle), counts[a.name], a.dtype) for inputs in self._sets
                       for a, buffer in zip(spec.args, inputs.arrays) if a.name in counts), default=0.0)
        outputs = [(arg.name, arg.dtype) for arg, *_ in self._sets[0].outputs]
        terms = sum(counts.values())
        return (derive_each(outputs, set_in_spec(spec, verifying=False), spread, terms, largest),
                answer_tolerances(spec, [o for o in outputs if o[0] in answers], spread, terms, largest))

    def _upload(self, spec, seed: int) -> InputSet:
        # One set at a time on the host: the device holds them all. An input with fixed `data` is the same in
        # both sets, so a kernel could key a cached result on it: the user chose that input, and accepts it.
        arrays = make_arrays(spec, seed)
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
                for a, buffer in zip(self._setup.spec.args, inputs.arrays) if a.is_parameter]

    def _before(self, kernel, inputs: InputSet) -> None:
        """What every launch starts from: the outputs of its input set as they were before any launch, and the
        set's values in the kernel's __constant__ arrays (a module loads with them zeroed)."""
        self._restore_outputs(inputs)
        for arg, buffer in zip(self._setup.spec.args, inputs.arrays):
            if not arg.is_parameter:
                self.fill_constant(kernel, arg.name, int(buffer.handle), buffer.size)

    def _timed_set(self, i: int) -> InputSet:
        """The input set of timed launch `i`: they alternate, the checked launch (on set 0) counting as -1."""
        return self._sets[(i + 1) % len(self._sets)]

    # --- per configuration ---
    def measure(self, order: Order) -> Measured | Failed:
        assert self._setup is not None, "prepare() first"
        bench = self._setup.spec.benchmark
        checked = self._checked_launch(order.kernel, order.grid, order.block, order.shared_bytes, self._sets[0],
                                       order.params)
        if isinstance(checked, Failed):
            return checked
        check_ms, kernel = checked
        mismatch, max_error = self._compare(self._sets[0])
        if mismatch:
            return Failed("output", mismatch, details={"max_abs_error": max_error})
        tolerances = tuple(self._tolerances.values())
        policy = sampling.policy_of(bench)
        for i in range(bench.warmup):
            warm = self._timed_launch(kernel, order, self._timed_set(i), flush=False)
            if isinstance(warm, Failed):
                return warm
        spot = random.randrange(policy.min_samples)  # a timed launch checked besides the last ones, unpredictably
        samples: list[float] = []
        while (step := sampling.next_step(samples, order.best_ms, policy)) is sampling.Next.SAMPLE:
            inputs = self._timed_set(len(samples))
            timed = self._timed_launch(kernel, order, inputs)
            if isinstance(timed, Failed):
                return timed
            samples.append(timed)
            if len(samples) - 1 == spot:
                mismatch, error = self._compare(inputs)
                if mismatch:
                    return _inconsistent(f"timed launch {spot + 1}", inputs, mismatch, error)
                max_error = max(max_error, error)
        # Each set's outputs hold its latest launch's: the last timed launch's, and the one before it.
        for inputs in self._sets:
            mismatch, error = self._compare(inputs)
            if mismatch:
                return _inconsistent("the latest launch", inputs, mismatch, error)
            max_error = max(max_error, error)
        return Measured(samples_ms=samples, check_ms=check_ms, max_abs_error=max_error,
                        abandoned=step is sampling.Next.ABANDON, tolerances=tolerances)

    def compare(self, duel: Duel) -> Paired | Failed:
        """Time two configurations in turn, each pair on inputs drawn afresh (drawn again before each launch),
        and check the two outputs of every pair against each other."""
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
        looks = sampling.looks(duel.pairs, max(duel.pairs, duel.max_pairs))
        fresh, seeds = self._fresh_set(), random.Random()
        started = time.perf_counter()
        for i in range(looks[-1]):
            if i in looks:  # i pairs timed: stop if they decide, or if the next look would not fit the budget
                next_look = looks[looks.index(i) + 1]
                over_budget = (time.perf_counter() - started) / i * next_look > duel.budget_s
                if over_budget or sampling.settled(*samples, duel.bar, duel.confidence):
                    break
            seed = seeds.randrange(1 << 62)
            # Which goes first alternates every other pair, so neither always follows the other: a cache the
            # first leaves warm would otherwise favour the second.
            for turn, side in enumerate((0, 1) if (i // 2) % 2 == 0 else (1, 0)):
                self._draw(fresh, seed)
                # Always from a flushed L2: what one kernel leaves resident (or pins there) never speeds up the
                # next launch, so a step cannot be accepted for a time a real call, after other work, would
                # not see.
                timed = self._timed_launch(kernels[side], orders[side], fresh, flush=True)
                if isinstance(timed, Failed):
                    return _named(side, timed)
                samples[side].append(timed)
                if turn == 0:
                    for _, buffer, _, partner, _ in fresh.outputs:
                        self.copy(partner, buffer)
                # Each is within its tolerance of the reference, so two right outputs are within twice of each other.
                elif mismatch := self._compare(fresh, "the other kernel's", slack=2)[0]:
                    return _named(1, Failed("output", f"on inputs drawn afresh (seed {seed}), pair {i + 1}: "
                                                      f"{mismatch}"))
        return Paired(incumbent_ms=samples[0], candidate_ms=samples[1])

    def _fresh_set(self) -> InputSet:
        """Buffers laid out as the first set's, for the comparison's fresh inputs, its outputs starting as the
        sets' do and each with a buffer for the partner's output; allocated at the first comparison."""
        if self._fresh is None:
            first = self._sets[0]
            arrays = [None if buffer is None else self.allocate(buffer.size) for buffer in first.arrays]
            outputs = []
            for arg, _, pristine, _, size in first.outputs:
                start = self.allocate(pristine.size)
                self.copy(start, pristine)
                outputs.append((arg, arrays[self._setup.spec.args.index(arg)], start, self.allocate(pristine.size),
                                size))
            self._fresh = InputSet(seed=-1, arrays=arrays, outputs=outputs)
        return self._fresh

    def _draw(self, inputs: InputSet, seed: int) -> None:
        """Every input of `inputs` (an inout array's starting values too) drawn on the device as the spec draws
        it, from `seed`; one with fixed `data` copied from the first set. Whatever a launch did to them is gone."""
        spec = self._setup.spec
        starts = {arg.name: start for arg, _, start, _, _ in inputs.outputs}
        first = {arg.name: start for arg, _, start, _, _ in self._sets[0].outputs}
        for position, (arg, buffer, fixed) in enumerate(zip(spec.args, inputs.arrays, self._sets[0].arrays)):
            if buffer is None or arg.effective_role == "out":
                continue
            into = starts.get(arg.name, buffer)  # an inout array starts each launch from its starting values
            if arg.data is not None:
                self.copy(into, first.get(arg.name, fixed))
            else:
                self._own.generate(int(into.handle), math.prod(spec.shape_of(arg)), stream_key(seed, position),
                                   distribution_of(spec, arg), special_values(arg))
        inputs.seed = seed

    # --- launches ---
    def _reference_run(self, inputs: InputSet) -> Failed | None:
        """The submitted kernel run once on `inputs`, its outputs left in their buffers."""
        setup = self._setup
        grid, block = setup.reference_geometry
        outcome = self._checked_launch(setup.reference, grid, block, setup.reference_shared_bytes, inputs,
                                       setup.reference_params)
        if isinstance(outcome, Failed):
            return Failed(outcome.stage, f"the submitted kernel, the reference, failed on the inputs of seed "
                                         f"{inputs.seed}: {outcome.reason}", outcome.poisoned)
        return None

    def _checked_launch(self, compiled, grid, block, shared_bytes: int, inputs: InputSet, params: dict):
        """Reset the outputs, launch once with timing, wait: (ms, kernel) or Failed with the driver's words."""
        kernel = self.load(compiled)
        if isinstance(kernel, Failed):
            return kernel
        elapsed = self.timed_launch(kernel, grid, block, self._args(inputs, params), shared_bytes=shared_bytes,
                                    before=lambda: self._before(kernel, inputs))
        return elapsed if isinstance(elapsed, Failed) else (elapsed, kernel)

    def _timed_launch(self, kernel, order: Order, inputs: InputSet, flush: bool | None = None) -> float | Failed:
        """A timed launch that faces what a real call faces: every output of its input set as it was before
        any launch (pristine for `out`, the original values for `inout`), so no launch finds the last one's
        results to reuse; and with L2 flushed when `flush` says so (default: when the spec asks for it), so
        each sample reads from DRAM and finds L2 clean, owing it no write-back (OwnKernels.evict_l2). Both happen
        outside the timed region."""
        flushing = (self._setup.spec.benchmark.l2_flush if flush is None else flush) and self._flush is not None

        def before() -> None:
            self._before(kernel, inputs)
            if flushing:
                self._own.evict_l2(self._flush)

        return self.timed_launch(kernel, order.grid, order.block, self._args(inputs, order.params),
                                 shared_bytes=order.shared_bytes, before=before)

    def _restore_outputs(self, inputs: InputSet) -> None:
        for _, buffer, pristine, _, _ in inputs.outputs:
            self.copy(buffer, pristine)

    def _compare(self, inputs: InputSet, against: str = "the reference", slack: float = 1) -> tuple[str, float]:
        """('' or why the outputs of `inputs` differ from `against` beyond `slack` times their tolerance, largest
        absolute error). `against` is what each output's fourth buffer holds: its reference output in a set, the
        partner kernel's output in the comparison's fresh set."""
        worst, problems = 0.0, []
        for arg, buffer, _, reference, size in inputs.outputs:
            tolerance = self._tolerances[arg.name]
            atol, rtol = slack * tolerance.atol, slack * tolerance.rtol
            count, first, error = self._differences(arg.dtype, buffer, reference, size, atol, rtol)
            worst = max(worst, error)
            if count:
                scaled = f"{slack:g} x " if slack != 1 else ""
                problems.append(f"{count} of {size} elements of {arg.name} differ from {against} beyond "
                                f"atol {atol:g} + rtol {rtol:g} x |ref| ({scaled}{tolerance.reason}; "
                                f"first at index {first}, largest absolute error {error:.3g})")
        return "; ".join(problems), worst

    def _answer_mismatch(self, inputs: InputSet, answers: dict[str, np.ndarray]) -> str:
        """'' when the reference's outputs on `inputs` match the spec's answers within the answer's tolerance (the
        verifier's: verify.*, then benchmark.*, as Kernel Tuner's atol; else derived from the reference's spread),
        else how they differ: a wrong answer is reported as such, before any configuration."""
        problems = []
        for arg, _, _, reference, size in inputs.outputs:
            if arg.name not in answers:
                continue
            tolerance = self._answer_tolerances[arg.name]
            atol, rtol = tolerance.atol, tolerance.rtol
            answer = self.upload(answers[arg.name], keep=False)
            count, first, error = self._differences(arg.dtype, reference, answer, size, atol, rtol)
            answer.close(self.stream)
            if count:
                problems.append(f"the submitted kernel's {arg.name} differs from its answer ({arg.answer.path}) at "
                                f"{count} of {size} elements beyond atol {atol:g} + rtol {rtol:g} x |answer| (first "
                                f"at index {first}, largest absolute error {error:.3g}; {tolerance.reason}): the "
                                "kernel or the answer is wrong")
        return "; ".join(problems)

    def _differences(self, dtype: str, out, ref, size: int, atol: float, rtol: float) -> tuple[int, int | None, float]:
        """(elements of `out` beyond tolerance of `ref`, the first one's index, the largest absolute error over
        the finite elements), computed on the device."""
        found = self._own.compare(int(out.handle), int(ref.handle), size, dtype, atol, rtol)
        return found.beyond_tolerance.count, found.beyond_tolerance.first, found.max_abs

    def _release(self) -> None:
        self.release()
        self._flush, self._setup, self._sets, self._fresh = None, None, [], None


def _inconsistent(which: str, inputs: InputSet, mismatch: str, error: float) -> Failed:
    return Failed("output", f"inconsistent across launches: {which}, on the inputs of seed {inputs.seed}, differs "
                            f"from their reference output: {mismatch}", details={"max_abs_error": error})


def _named(side: int, failed: Failed) -> Failed:
    """Which of the two compared kernels failed, in the reason."""
    who = ("the best kernel so far", "the candidate")[side]
    return Failed(failed.stage, f"{who}: {failed.reason}", failed.poisoned, failed.details)
