"""VerifierSession, the verifier's GpuSession: run the reference, then the candidate twice, on one trial's
inputs, every array fenced by canary bytes; every check made on the device, only its findings read back.
The reference runs more than once: how far its own runs disagree decides how close a candidate must come.
It is served in the child of a plain GpuProcess (shared/adapters/device/process.py), with no subclass like the
benchmark's: every trial starts with a reference request, which makes again on a replacement process what
the broken one held.

Two requests per trial (reference, then candidate) so that a hang is pinned on the kernel that hung. A
trial's inputs are generated on the device (shared/adapters/inputs.py's generator, in shared/adapters/device/own_kernels.py),
or uploaded from an input's `data` file, and kept there with the reference's outputs (or an output's
`answer`), in a cache under a byte budget, for every later candidate of the job. The candidate's module
stays loaded across trials, as it would in a benchmark loop: a kernel that keeps results in device globals
between launches shows it on the next trial's fresh inputs.
"""
import json
from dataclasses import dataclass, field

import numpy as np

from services.verifier.cache import TrialCache
from services.verifier.compare import POISON, Difference, OutputCheck, example
from services.verifier.judge import Run, Verdict, judge
from shared.adapters.array_files import ArrayFileError, read_array
from shared.adapters.device.nvrtc import CompiledKernel
from shared.adapters.device.own_kernels import Comparison, Found, OwnKernels
from shared.adapters.device.process import Failed
from shared.adapters.device.session import GpuSession
from shared.adapters.inputs import distribution_of, special_values, stream_key
from shared.adapters.settings import Settings
from shared.domain.dtypes import as_numbers, host_dtype, is_float
from shared.domain.events import Tolerance
from shared.domain.spec import ArgSpec, KernelSpec, ParamValue
from shared.domain.tolerance import REFERENCE_RUNS, derive_each, set_in_spec

CANARY = 0xA5  # every guard byte; a kernel writing out of bounds changes some


@dataclass(frozen=True)
class TrialRun:
    """Run `kernel` (compiled with `params`) on the inputs of `spec` (at the trial's sizes) drawn from `seed`."""

    spec: KernelSpec
    seed: int
    kernel: CompiledKernel
    params: dict[str, ParamValue]

    @property
    def inputs_key(self) -> tuple:
        """What the inputs are drawn from; a candidate's spec differs from the reference's only elsewhere."""
        return self.spec.model_dump_json(include={"args", "sizes"}), self.seed

    @property
    def reference_key(self) -> tuple:
        """What the reference's outputs on these inputs depend on, besides the inputs."""
        return (*self.inputs_key, self.spec.verify.guard_bytes, self.kernel.cache_key,
                json.dumps(self.params, sort_keys=True), self.spec.launch_geometry(self.params),
                self.spec.shared_memory_bytes(self.params))


@dataclass(frozen=True)
class _Array:
    """One array argument as laid out on the device: `guard` canary bytes, its `nbytes`, `guard` more."""

    arg: ArgSpec
    position: int  # in the kernel's arguments: the generator's key
    shape: tuple[int, ...]
    guard: int

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.count * host_dtype(self.arg.dtype).itemsize

    @property
    def fenced_bytes(self) -> int:
        return self.nbytes + 2 * self.guard


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 256) * 256


def _layout(spec: KernelSpec) -> tuple[_Array, ...]:
    return tuple(_Array(a, i, spec.shape_of(a), spec.verify.guard_bytes) for i, a in enumerate(spec.args) if a.is_array)


@dataclass(frozen=True)
class _Region:
    """Part of an allocation, usable wherever GpuSession takes a buffer."""

    handle: int
    size: int


@dataclass
class _Trial:
    """A trial kept on the device, every buffer fenced like the working arrays, so one copy restores both."""

    pristine: dict[str, object]  # in and inout arrays: the generated inputs
    reference: dict[str, object]  # out and inout arrays: what the reference left
    ms: float = 0.0
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # per output, from the reference's runs
    zeroed: frozenset[str] = frozenset()  # pure outputs the reference accumulates into: they start at zero

    def close(self, stream) -> None:
        for buffer in [*self.pristine.values(), *self.reference.values()]:
            buffer.close(stream)


class VerifierSession(GpuSession):
    def __init__(self, index: int, cache_bytes: int | None = None):
        """`cache_bytes`: the trial cache's budget; default KFORGE_VERIFY_CACHE_FRACTION of device memory."""
        super().__init__(index)
        if cache_bytes is None:
            cache_bytes = int(Settings().verify_cache_fraction * (self.info.memory_bytes or 0))
        self.cache: TrialCache[_Trial] = TrialCache(cache_bytes, lambda trial: trial.close(self.stream))
        self._own = OwnKernels(self)
        self._kernels: dict[str, object] = {}
        self._trial: tuple[tuple, _Trial] | None = None  # (inputs key, trial) of the last reference()
        # (layout, working arrays, the first run's outputs, the allocation holding them all)
        self._scratch: tuple[tuple[_Array, ...], dict[str, _Region], dict[str, _Region], object] | None = None

    def reference(self, request: TrialRun) -> float | Failed:
        """The trial's inputs and the submitted kernel's outputs on them, from the cache or made now (the
        kernel's own launch error, or out-of-bounds writes, make it Failed: it cannot serve). Its time."""
        self._trial = None
        trial = self.cache.get(request.reference_key)
        if trial is None:
            layout = _layout(request.spec)
            nbytes = sum(a.fenced_bytes * ((a.arg.effective_role != "out") + a.arg.is_output) for a in layout)
            self.cache.make_room(nbytes)
            trial = self._new_trial(request, layout)
            if isinstance(trial, Failed):
                return trial
            self.cache.add(request.reference_key, trial, nbytes)
        self._trial = (request.inputs_key, trial)
        return trial.ms

    def candidate(self, request: TrialRun) -> Verdict | Failed:
        """Run the candidate twice on the reference's inputs and judge what the device finds."""
        assert self._trial is not None and self._trial[0] == request.inputs_key, "reference() of this trial first"
        trial, layout = self._trial[1], _layout(request.spec)
        work, first_run = self._scratch_for(layout)
        runs = []
        for number in (1, 2):
            ran = self._run(request, layout, trial, trial.zeroed)
            if isinstance(ran, Failed):
                return ran
            if number == 1:
                for name, buffer in first_run.items():
                    self.copy(buffer, work[name])
            runs.append(ran[1])
        outputs = [a for a in layout if a.arg.is_output]

        def check(a: _Array, out, ref) -> OutputCheck:
            return self._output_check(a, out, ref, trial.tolerances[a.arg.name], a.arg.name in trial.zeroed)

        checked = [Run(guards, modified, {a.arg.name: check(a, run_outputs[a.arg.name], trial.reference[a.arg.name])
                                          for a in outputs})
                   for (guards, modified), run_outputs in zip(runs, (first_run, work))]
        disagreement = {a.arg.name: check(a, work[a.arg.name], first_run[a.arg.name]).mismatch for a in outputs}
        return judge(request.spec, checked, disagreement, trial.tolerances)

    # --- a trial ---
    def _new_trial(self, request: TrialRun, layout: tuple[_Array, ...]) -> _Trial | Failed:
        """Generate the inputs on the device (or upload an input's `data`), run the reference on them (from
        poison, then from zeros to settle each output's tolerance and start), keep its last run's outputs;
        where an output has an `answer`, keep the answer instead, once the reference is found to match
        it (a wrong answer is then reported as such, not blamed on every candidate)."""
        try:  # every file read before anything is allocated, so a file that fails leaves nothing behind
            fixed = {a.arg.name: read_array(a.arg.data, a.arg.dtype, a.shape) for a in layout if a.arg.data}
            answers = {a.arg.name: read_array(a.arg.answer, a.arg.dtype, a.shape) for a in layout if a.arg.answer}
        except ArrayFileError as exc:
            return Failed("data", str(exc))
        trial = _Trial(pristine={}, reference={})
        for a in layout:
            if a.arg.effective_role != "out":
                buffer = trial.pristine[a.arg.name] = self.allocate(a.fenced_bytes, keep=False)
                self.fill(buffer, CANARY)
                if a.arg.name in fixed:
                    self.upload(fixed[a.arg.name], into=buffer, offset=a.guard)
                else:
                    self._own.generate(int(buffer.handle) + a.guard, a.count, stream_key(request.seed, a.position),
                                       distribution_of(request.spec, a.arg), special_values(a.arg))
            if a.arg.is_output:
                trial.reference[a.arg.name] = self.allocate(a.fenced_bytes, keep=False)
        ran = self._run(request, layout, trial)
        if not isinstance(ran, Failed) and ran[1][0]:
            ran = Failed("out_of_bounds", "; ".join(ran[1][0]))
        if not isinstance(ran, Failed):
            ran = self._settle(request, layout, trial) or ran
        if not isinstance(ran, Failed) and answers:
            ran = self._against_answers(request.spec, layout, trial, answers) or ran
        if isinstance(ran, Failed):
            trial.close(self.stream)
            return ran
        work, _ = self._scratch_for(layout)
        for name, buffer in trial.reference.items():
            if name not in answers:
                self.copy(buffer, work[name])
        trial.ms = ran[0]
        return trial

    def _against_answers(self, spec: KernelSpec, layout: tuple[_Array, ...], trial: _Trial,
                         answers: dict[str, np.ndarray]) -> Failed | None:
        """Put each answer where the reference's output is kept, fenced like it, after checking the reference's
        output (still in the working arrays) against it within the trial's tolerance."""
        work, _ = self._scratch_for(layout)
        wrong = []
        for a in layout:
            if a.arg.name not in answers:
                continue
            kept = trial.reference[a.arg.name]
            self.copy(kept, work[a.arg.name])  # the canaries around it
            self.upload(answers[a.arg.name], into=kept, offset=a.guard)
            tolerance = trial.tolerances[a.arg.name]
            check = self._output_check(a, work[a.arg.name], kept, tolerance)
            found = [(d, what) for d, what in ((check.unwritten, "left unwritten"),
                                               (check.not_finite, "NaN or Inf where the answer is finite"),
                                               (check.mismatch, f"beyond atol {tolerance.atol:g} + rtol "
                                                                f"{tolerance.rtol:g} x |answer|"))
                     if d.count]
            if found:
                d, what = found[0]
                wrong.append(f"the submitted kernel's {a.arg.name} differs from its answer ({a.arg.answer.path}) at "
                             f"{d.count} of {d.size} elements ({what}), the first {d.example}: the kernel or the "
                             "answer is wrong")
        return Failed("answer", "; ".join(wrong)) if wrong else None

    def _settle(self, request: TrialRun, layout: tuple[_Array, ...], trial: _Trial) -> Failed | None:
        """After the reference's first run (from poisoned outputs, still in the working arrays): run it
        REFERENCE_RUNS more times from zeroed outputs, as the spec's outputs start. How far those runs disagree
        is its own spread, from which each output's tolerance follows (shared/domain/tolerance.py). A pure output
        whose result from poison differs from its result from zeros is one the reference reads before writing
        (it accumulates into it): it starts at zero in every run of the trial, the candidate's too, and poison
        cannot show its unwritten elements. The last run's outputs stay in the working arrays, to be kept."""
        work, first_run = self._scratch_for(layout)
        outputs = [a for a in layout if a.arg.is_output]
        arrays = {a.arg.name: a for a in outputs}
        for a in outputs:  # the run from poison, held until it is compared
            self.copy(trial.reference[a.arg.name], work[a.arg.name])
        pure = frozenset(a.arg.name for a in outputs if a.arg.effective_role == "out")
        spread = {a.arg.name: (0.0, 0.0) for a in outputs}
        for number in range(REFERENCE_RUNS):
            ran = self._run(request, layout, trial, pure)
            if isinstance(ran, Failed):
                return ran
            if ran[1][0]:
                return Failed("out_of_bounds", "; ".join(ran[1][0]))
            for a in outputs:
                if number == 0:
                    self.copy(first_run[a.arg.name], work[a.arg.name])
                    continue
                found = self._compared(a, work[a.arg.name], first_run[a.arg.name], 0.0, 0.0)
                spread[a.arg.name] = (max(spread[a.arg.name][0], found.max_abs),
                                      max(spread[a.arg.name][1], found.max_rel))
        terms, largest = self._input_scale(layout, trial)
        trial.tolerances = derive_each([(a.arg.name, a.arg.dtype) for a in outputs],
                                       set_in_spec(request.spec, verifying=True), spread, terms, largest)
        trial.zeroed = frozenset(name for name in pure if self._compared(
            arrays[name], trial.reference[name], first_run[name], trial.tolerances[name].atol,
            trial.tolerances[name].rtol).beyond_tolerance.count)
        return None

    def _input_scale(self, layout: tuple[_Array, ...], trial: _Trial) -> tuple[int, float]:
        """How many float input elements the trial has, and the largest finite magnitude among them."""
        floats = [a for a in layout if a.arg.effective_role != "out" and is_float(a.arg.dtype)]
        largest = max((self._own.max_abs(int(trial.pristine[a.arg.name].handle) + a.guard, a.count, a.arg.dtype)
                       for a in floats), default=0.0)
        return sum(a.count for a in floats), largest

    # --- one run ---
    def _run(self, request: TrialRun, layout: tuple[_Array, ...], trial: _Trial,
             zeroed: frozenset[str] = frozenset()) -> tuple[float, tuple[list[str], list[str]]] | Failed:
        """Launch once on freshly restored arrays, the pure outputs named in `zeroed` starting at zero and the
        others poisoned; (ms, (guard violations, inputs modified)) or Failed."""
        kernel = self._kernel(request.kernel)
        if isinstance(kernel, Failed):
            return kernel
        work, _ = self._scratch_for(layout)

        def restore() -> None:
            """Outside the timed region: canaries around every array, the inputs' values (also an inout
            array's) inside, poison (or zeros) inside every pure output, so no run finds another's results."""
            for a in layout:
                if a.arg.effective_role == "out":
                    self.fill(work[a.arg.name], CANARY, 0, a.guard)
                    self.fill(work[a.arg.name], 0 if a.arg.name in zeroed else POISON, a.guard, a.nbytes)
                    self.fill(work[a.arg.name], CANARY, a.guard + a.nbytes, a.guard)
                else:
                    self.copy(work[a.arg.name], trial.pristine[a.arg.name])
                    if not a.arg.is_parameter:  # a __constant__ array: into its module's copy, every run
                        self.fill_constant(kernel, a.arg.name, int(trial.pristine[a.arg.name].handle) + a.guard,
                                           a.nbytes)

        arrays = {a.arg.name: a for a in layout}
        args = [np.uint64(int(work[arg.name].handle) + arrays[arg.name].guard) if arg.is_array
                else request.spec.scalar_of(arg, request.params) for arg in request.spec.parameters]
        grid, block = request.spec.launch_geometry(request.params)
        shared_bytes = request.spec.shared_memory_bytes(request.params)
        ms = self.timed_launch(kernel, grid, block, args, shared_bytes=shared_bytes, before=restore)
        if isinstance(ms, Failed):
            return ms
        violations = [v for a in layout if (v := self._guard_violation(a, work[a.arg.name]))]
        modified = [m for a in layout if a.arg.effective_role in ("in", "constant")
                    and (m := self._modification(a, work[a.arg.name], trial.pristine[a.arg.name]))]
        return ms, (violations, modified)

    def _guard_violation(self, a: _Array, buffer) -> str:
        start = int(buffer.handle)
        before = self._own.changed_bytes(start, a.guard, value=CANARY)
        after = self._own.changed_bytes(start + a.guard + a.nbytes, a.guard, value=CANARY)
        itemsize, name, parts = host_dtype(a.arg.dtype).itemsize, a.arg.name, []
        if after.count:
            parts.append(f"changed {after.count} guard bytes after the end of {name} (first at element "
                         f"{a.count + after.first // itemsize}, {a.count} elements long)")
        if before.count:
            parts.append(f"changed {before.count} guard bytes before the start of {name} (first "
                         f"{a.guard - before.first} bytes before it)")
        return "; ".join(parts)

    def _modification(self, a: _Array, buffer, pristine) -> str:
        changed = self._own.changed_bytes(int(buffer.handle) + a.guard, a.nbytes, int(pristine.handle) + a.guard)
        return f"{a.arg.name} ({changed.count} bytes changed, the first at byte {changed.first})" if changed.count else ""

    def _output_check(self, a: _Array, out, ref, tolerance: Tolerance, zeroed: bool = False) -> OutputCheck:
        """`out` against `ref` on the device within `tolerance`, each finding with the first element it found
        quoted. An output that started `zeroed` holds no poison to tell unwritten elements by."""
        found = self._compared(a, out, ref, tolerance.atol, tolerance.rtol)

        def difference(count: int, first: int | None, max_abs: float = 0.0, max_rel: float = 0.0) -> Difference:
            quoted = ""
            if first is not None:  # two elements read back, to quote
                dtype = a.arg.dtype
                at = a.guard + first * host_dtype(dtype).itemsize
                value, instead_of = (as_numbers(self.download(np.empty(1, host_dtype(dtype)), buffer, at), dtype)[0]
                                     for buffer in (out, ref))
                quoted = example(a.arg.name, a.shape, first, value, instead_of)
            return Difference(count, a.count, first, max_abs, max_rel, quoted)

        unwritten = Found(0, None) if zeroed else found.unwritten
        return OutputCheck(unwritten=difference(unwritten.count, unwritten.first),
                           not_finite=difference(found.not_finite.count, found.not_finite.first),
                           mismatch=difference(found.beyond_tolerance.count, found.beyond_tolerance.first,
                                               found.max_abs, found.max_rel))

    def _compared(self, a: _Array, out, ref, atol: float, rtol: float) -> Comparison:
        return self._own.compare(int(out.handle) + a.guard, int(ref.handle) + a.guard, a.count, a.arg.dtype, atol, rtol)

    def _scratch_for(self, layout: tuple[_Array, ...]) -> tuple[dict[str, _Region], dict[str, _Region]]:
        """The working arrays and a copy of each output for the first run's results, remade for a new layout.

        One allocation, laid out as: first-run copies, working outputs, working inputs, then `guard` more
        canary bytes. A kernel may read past its inputs' guard bands unnoticed (reads change no canary);
        what it finds there is then the same in both runs, so its result differs from the reference's
        (mismatch), where memory that changes between the runs (an output, a copy of one) would make it
        differ from itself instead."""
        if self._scratch is None or self._scratch[0] != layout:
            if self._scratch is not None:
                self._scratch[3].close(self.stream)
            outputs, inputs = [a for a in layout if a.arg.is_output], [a for a in layout if not a.arg.is_output]
            guard = layout[0].guard
            order = [("first run", a) for a in outputs] + [("work", a) for a in outputs + inputs]
            whole = self.allocate(sum(_aligned(a.fenced_bytes) for _, a in order) + guard, keep=False)
            regions, at = {}, int(whole.handle)
            for role, a in order:
                regions[role, a.arg.name] = _Region(at, a.fenced_bytes)
                at += _aligned(a.fenced_bytes)  # every array keeps cudaMalloc's 256-byte alignment
            self.fill(whole, CANARY, at - int(whole.handle), guard)
            work = {a.arg.name: regions["work", a.arg.name] for a in layout}
            first_run = {a.arg.name: regions["first run", a.arg.name] for a in outputs}
            self._scratch = (layout, work, first_run, whole)
        return self._scratch[1], self._scratch[2]

    def _kernel(self, compiled: CompiledKernel):
        if compiled.cache_key not in self._kernels:
            kernel = self.load(compiled)
            if isinstance(kernel, Failed):
                return kernel
            self._kernels[compiled.cache_key] = kernel
        return self._kernels[compiled.cache_key]
