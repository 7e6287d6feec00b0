"""The verifier's session in the GPU process: run the reference, then the candidate twice, on one
trial's inputs, every array fenced by canary bytes.

Two requests per trial (reference, then candidate) so that a hang is pinned on the kernel that hung. The
candidate's module stays loaded across trials, as it would in a benchmark loop: a kernel that keeps
results in device globals between launches shows it on the next trial's fresh inputs.
"""
from dataclasses import dataclass

import numpy as np

from services.verifier.compare import POISON
from services.verifier.judge import Run, Verdict, judge
from shared.device.nvrtc import CompiledKernel
from shared.device.process import Failed
from shared.device.session import SessionBase
from shared.inputs import make_arrays
from shared.spec import KernelSpec, ParamValue

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


class VerifySession(SessionBase):
    def __init__(self, index: int):
        super().__init__(index)
        self._kernels: dict[str, object] = {}
        self._trial: tuple | None = None  # (inputs key, host arrays, device buffers, reference outputs)

    def reference(self, request: TrialRun) -> float | Failed:
        """Run the submitted kernel on fresh buffers; its outputs become this trial's reference. Returns
        its time, or Failed (its own launch error, or out-of-bounds writes) when it cannot serve."""
        self.release()
        self._trial = None
        arrays = make_arrays(request.spec, request.seed)
        guard = request.spec.verify.guard_bytes
        buffers = {name: self.allocate(array.nbytes + 2 * guard) for name, array in arrays.items()}
        run = self._run(request, arrays, buffers)
        if isinstance(run, Failed):
            return run
        ms, outcome = run
        if outcome.guard_violations:
            return Failed("out_of_bounds", "; ".join(outcome.guard_violations))
        self._trial = (request.inputs_key, arrays, buffers, outcome.outputs)
        return ms

    def candidate(self, request: TrialRun) -> Verdict | Failed:
        """Run the candidate twice on the reference's inputs and judge what it left."""
        assert self._trial is not None and self._trial[0] == request.inputs_key, "reference() of this trial first"
        _, arrays, buffers, reference = self._trial
        runs = []
        for _ in range(2):
            run = self._run(request, arrays, buffers)
            if isinstance(run, Failed):
                return run
            runs.append(run[1])
        return judge(request.spec, reference, runs)

    # --- one run ---
    def _run(self, request: TrialRun, arrays: dict[str, np.ndarray], buffers: dict) -> tuple[float, Run] | Failed:
        spec, guard = request.spec, request.spec.verify.guard_bytes
        kernel = self._kernel(request.kernel)
        if isinstance(kernel, Failed):
            return kernel
        self._reset(spec, arrays, buffers, guard)
        args = [np.uint64(int(buffers[a.name].handle) + guard) if a.is_array else spec.scalar_of(a, request.params)
                for a in spec.args]
        grid, block = spec.launch_geometry(request.params)
        ms = self.timed_launch(kernel, grid, block, args)
        if isinstance(ms, Failed):
            return ms
        outputs = {a.name: self.download(np.empty_like(arrays[a.name]), buffers[a.name], guard)
                   for a in spec.output_args}
        inputs_modified = [a.name for a in spec.args if a.is_array and not a.is_output and not np.array_equal(
            self.download(np.empty_like(arrays[a.name]), buffers[a.name], guard).view(np.uint8),
            arrays[a.name].view(np.uint8))]
        violations = [v for name, array in arrays.items() if (v := self._guard_violation(name, array, buffers[name], guard))]
        return ms, Run(outputs=outputs, guard_violations=violations, inputs_modified=inputs_modified)

    def _reset(self, spec: KernelSpec, arrays: dict[str, np.ndarray], buffers: dict, guard: int) -> None:
        """Canaries around every array, the inputs' values inside, poison inside every pure output."""
        roles = {a.name: a.effective_role for a in spec.args}
        for name, array in arrays.items():
            buffer = buffers[name]
            self.fill(buffer, CANARY)
            if roles[name] == "out":
                self.fill(buffer, POISON, guard, array.nbytes)
            else:
                self.upload(array, into=buffer, offset=guard)

    def _guard_violation(self, name: str, array: np.ndarray, buffer, guard: int) -> str:
        before = self.download(np.empty(guard, np.uint8), buffer, 0)
        after = self.download(np.empty(guard, np.uint8), buffer, guard + array.nbytes)
        touched_before, touched_after = np.flatnonzero(before != CANARY), np.flatnonzero(after != CANARY)
        parts = []
        if touched_after.size:
            parts.append(f"changed {touched_after.size} guard bytes after the end of {name} (first at element "
                         f"{array.size + int(touched_after[0]) // array.itemsize}, {array.size} elements long)")
        if touched_before.size:
            parts.append(f"changed {touched_before.size} guard bytes before the start of {name} (first "
                         f"{guard - int(touched_before[0])} bytes before it)")
        return "; ".join(parts)

    def _kernel(self, compiled: CompiledKernel):
        if compiled.cache_key not in self._kernels:
            kernel = self.load(compiled)
            if isinstance(kernel, Failed):
                return kernel
            self._kernels[compiled.cache_key] = kernel
        return self._kernels[compiled.cache_key]
