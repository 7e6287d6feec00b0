"""compute-sanitizer as a gate: a verified candidate is also launched once, on a small trial, under memcheck,
racecheck, initcheck and synccheck, and rejected (check `sanitizer`, with the tool's first error line) when
one of them reports an error. The verifier's own checks see only what a kernel leaves in memory; these see
what it did on the way (a read of shared memory nobody wrote, a hazard between warps, a barrier only some
threads reach, an access that happened to land inside another allocation).

Each check runs this module as a standalone program under the tool, in a process of its own: it loads the
candidate's cubin with cuda.core, uploads the trial's inputs and launches the kernel once. The result is
recorded either way (SanitizerChecked); a machine without the tool records that nothing was sanitised.
A check that breaks for reasons of its own (the tool cannot attach, the run times out) is recorded and does
not reject: only errors the tool attributes to the kernel do.

    python -m services.verifier.sanitizer RUN.json     (what compute-sanitizer is given to run)
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from math import prod
from pathlib import Path

from services.verifier.trials import size_problem
from shared.adapters.settings import Settings
from shared.domain.events import (CandidateRejected, CandidateVerified, Event, SanitizerCheck, SanitizerChecked,
                                  VerificationRequested, derived_id)
from shared.domain.spec import KernelSpec, ParamValue
from shared.domain.steps import TUNED_SUFFIX

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
ERROR_EXIT = 86  # what the tool exits with when it found an error, told apart from the runner's own failures
NOT_INSTALLED = "compute-sanitizer not installed: the candidate was not sanitised"
ROOT = Path(__file__).resolve().parents[2]
PREFIX = "========= "
_ERROR_COUNT = re.compile(r"ERROR SUMMARY: (\d+) errors?$|RACECHECK SUMMARY: .*\((\d+) errors?")
_NOT_PRINTED = "errors were not printed"  # a second summary line, when more errors were found than printed


@dataclass(frozen=True)
class SanitisedRun:
    """What the runner launches: the candidate's cubin on the inputs of `spec` (already at the small sizes)."""

    spec: KernelSpec
    seed: int
    cubin: bytes
    lowered_name: str
    params: dict[str, ParamValue]
    device_index: int

    def write(self, folder: Path) -> Path:
        cubin = folder / "candidate.cubin"
        cubin.write_bytes(self.cubin)
        path = folder / "run.json"
        path.write_text(json.dumps({"spec": self.spec.model_dump(mode="json"), "seed": self.seed,
                                    "cubin": str(cubin), "lowered_name": self.lowered_name,
                                    "params": self.params, "device_index": self.device_index}))
        return path


# --- the gate, in the verifier --------------------------------------------------------------------------
def _may_be_kept(spec: KernelSpec, request: VerificationRequested) -> bool:
    """Whether this verification can lead to a kept kernel: a rewrite's first verification cannot (its tuned
    version is verified again, and sanitised then); a verify job's candidate and a tuned rewrite can."""
    return not spec.strategy.generates or request.candidate_id.endswith(TUNED_SUFFIX)


def gate(spec: KernelSpec, request: VerificationRequested, answer: Event, device: Callable,
         settings: Settings | None = None) -> list[Event]:
    """The events to record for the verifier's answer: a verified candidate's SanitizerChecked, then the
    answer, or a CandidateRejected (check `sanitizer`) in its place when a check found an error."""
    if not isinstance(answer, CandidateVerified) or not _may_be_kept(spec, request):
        return [answer]
    from shared.adapters.device.compiler import compile_kernel

    settings = settings or Settings()
    tool = find_tool(settings.compute_sanitizer)
    candidate = request.candidate
    params = {**spec.baseline_params(), **candidate.params}
    sizes = small_sizes(spec.for_candidate(candidate), settings.sanitizer_elements, params)
    common = dict(stream_id=answer.stream_id, request_id=answer.request_id, candidate_id=answer.candidate_id)
    checked = dict(event_id=derived_id(answer.request_id, "SanitizerChecked"), **common, sizes=sizes)
    if tool is None:
        return [SanitizerChecked(**checked, tool_path=None, checks=[], note=NOT_INSTALLED), answer]
    process = device()
    compiled = compile_kernel(candidate.source, candidate.kernel_name or spec.kernel_name, params,
                              spec.compiler_options, spec.benchmark.arch or process.device.arch)
    run = SanitisedRun(spec.for_candidate(candidate).with_sizes(sizes), spec.benchmark.seed, compiled.cubin,
                       compiled.lowered_name, params, process.device_index)
    checks = check_all(tool, run, settings.sanitizer_timeout_s)
    failed = next((c for c in checks if c.verdict == "failed"), None)
    verdicts = ", ".join(f"{c.tool} {c.verdict}" for c in checks)
    recorded = SanitizerChecked(**checked, tool_path=str(tool), checks=checks,
                                note=f"one launch at sizes {sizes}: {verdicts}")
    if failed is None:
        return [recorded, answer]
    return [recorded, CandidateRejected(event_id=derived_id(answer.request_id, "CandidateRejected"), **common,
                                        check="sanitizer", reason=f"{failed.tool}: {failed.first_error}",
                                        trial=f"sanitised launch (sizes {sizes}, seed {run.seed})")]


def find_tool(configured: str | None = None) -> Path | None:
    """compute-sanitizer: the configured path, else on PATH, else in a CUDA toolkit under /usr/local, else in
    the nvidia pip packages (nvidia-cuda-sanitizer-api ships the tool beside its libraries)."""
    if configured:
        return Path(configured) if os.access(configured, os.X_OK) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return Path(found)
    site = sysconfig.get_paths()["purelib"]
    patterns = ["/usr/local/cuda*/bin/compute-sanitizer", "/usr/local/cuda*/compute-sanitizer/compute-sanitizer",
                f"{site}/nvidia/*/compute-sanitizer/compute-sanitizer", f"{site}/nvidia/*/bin/compute-sanitizer",
                f"{site}/nvidia/*/*/compute-sanitizer/compute-sanitizer"]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern), reverse=True):  # the newest toolkit first
            if os.access(path, os.X_OK):
                return Path(path)
    return None


def small_sizes(spec: KernelSpec, max_elements: int, params: dict[str, ParamValue] | None = None) -> dict[str, int]:
    """The spec's sizes, every one halved together until no array holds more than `max_elements` elements,
    then one less (as the verifier's odd sizes), so that partial blocks and edge tiles run too: the
    instrumented launch is slow, and one small launch exercises the code paths a large one does. Sizes where
    an input's range would hold no value, or where the launch of `params` (default: the spec's own) cannot be
    worked out, are not taken; a spec with fixed `data` of a sized shape keeps its sizes, the only ones its files'
    arrays fit."""
    sizes, params = dict(spec.sizes), spec.baseline_params() if params is None else params
    if spec.sized_fixed_inputs:
        return sizes
    while any(v > 1 for v in sizes.values()) and _largest_array(spec, sizes) > max_elements:
        halved = {name: max(1, value // 2) for name, value in sizes.items()}
        if size_problem(spec.with_sizes(halved), params):
            break
        sizes = halved
    odd = {name: value - 1 if value > 2 else value for name, value in sizes.items()}
    return sizes if size_problem(spec.with_sizes(odd), params) else odd


def _largest_array(spec: KernelSpec, sizes: dict[str, int]) -> int:
    at_size = spec.with_sizes(sizes)
    return max((prod(at_size.shape_of(a)) for a in spec.args if a.is_array), default=0)


def check_all(tool: Path, run: SanitisedRun, timeout_s: float) -> list[SanitizerCheck]:
    with tempfile.TemporaryDirectory(prefix="kforge-sanitise-") as folder:
        run_file = run.write(Path(folder))
        # The four tools at once: each is a process of its own around one small launch, mostly start-up.
        with ThreadPoolExecutor(len(TOOLS)) as tools:
            return list(tools.map(lambda name: check_one(tool, name, run_file, timeout_s), TOOLS))


def check_one(tool: Path, name: str, run_file: Path, timeout_s: float) -> SanitizerCheck:
    from shared.adapters.device.compiler import import_path  # as in gate: the runner, this module, stays light

    started = time.perf_counter()
    try:
        done = subprocess.run(command(tool, name, run_file), cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout_s,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *import_path()])})
    except subprocess.TimeoutExpired:
        return SanitizerCheck(tool=name, verdict="timeout", first_error=f"no verdict within {timeout_s:g} s "
                                                                        "(KFORGE_SANITIZER_TIMEOUT_S)",
                              seconds=time.perf_counter() - started)
    verdict, first_error = parse(done.returncode, done.stdout + done.stderr)
    return SanitizerCheck(tool=name, verdict=verdict, first_error=first_error, seconds=time.perf_counter() - started)


def command(tool: Path, name: str, run_file: Path) -> list[str]:
    # API errors are left out: they are the runner's (cuda.core probing what the driver offers), not the kernel's.
    # racecheck reports hazards too, not only its analysis: on the H100 (2025.3.1) the analysis alone counted 0
    # errors for a tiled matmul with its barrier removed, where the hazard report counts 131,072.
    hazards = ["--racecheck-report", "all"] if name == "racecheck" else []
    return [str(tool), "--tool", name, *hazards, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "10",
            "--report-api-errors", "no", sys.executable, "-m", "services.verifier.sanitizer", str(run_file)]


def parse(returncode: int, output: str) -> tuple[str, str]:
    """(verdict, first error line) from the tool's output: `failed` when it counted errors in the kernel,
    `passed` when it counted none and the launch succeeded, `error` when it gave no verdict."""
    lines = [line.rstrip() for line in output.splitlines()]
    reported = [line[len(PREFIX):] for line in lines if line.startswith(PREFIX)]
    counts = [int(a or b) for line in reported if (m := _ERROR_COUNT.search(line)) for a, b in [m.groups()]]
    headlines = [text for text in reported if text and not text[0].isspace() and text != "COMPUTE-SANITIZER"
                 and not _ERROR_COUNT.search(text) and _NOT_PRINTED not in text
                 and "Target application returned an error" not in text]
    if counts and counts[-1] > 0:
        return "failed", headlines[0] if headlines else f"{counts[-1]} errors reported"
    if counts and returncode == 0:
        return "passed", ""
    own = [line for line in lines if line.strip() and not line.startswith(PREFIX.strip())]
    why = headlines[0] if headlines else (own[-1] if own else f"exit status {returncode}")
    return "error", why


# --- the runner, under the tool ---------------------------------------------------------------------------
def main(run_file: str) -> int:
    import numpy as np

    from shared.adapters.device.nvrtc import CompiledKernel
    from shared.adapters.device.process import Failed
    from shared.adapters.device.session import GpuSession
    from shared.adapters.inputs import make_arrays

    run = json.loads(Path(run_file).read_text())
    spec = KernelSpec.model_validate(run["spec"])
    session = GpuSession(run["device_index"])
    kernel = session.load(CompiledKernel(cubin=Path(run["cubin"]).read_bytes(), lowered_name=run["lowered_name"],
                                         arch=session.info.arch, log="", compile_ms=0.0, cache_key=""))
    if isinstance(kernel, Failed):
        print(f"the candidate did not load: {kernel.reason}", file=sys.stderr)
        return 3
    # Every array uploaded, outputs included (zeros, as kforge guarantees for role: out), so that initcheck
    # reports only memory the kernel reads and nobody wrote. Each in an allocation of its own (cuMemAlloc):
    # memcheck missed a one-element overrun between two buffers of the stream-ordered pool (measured on an H100,
    # compute-sanitizer 2025.3), since the overrun landed in the pool's next buffer.
    arrays = make_arrays(spec, run["seed"])
    pointers = {name: _uploaded(array) for name, array in arrays.items()}
    args = [np.uint64(pointers[a.name]) if a.is_array else spec.scalar_of(a, run["params"]) for a in spec.parameters]
    try:
        for constant in spec.constants:
            session.fill_constant(kernel, constant.name, pointers[constant.name], arrays[constant.name].nbytes)
    except Exception as exc:  # the driver's words, or a declaration smaller than args says
        print(f"the launch failed (load): {exc}", file=sys.stderr)
        return 4
    grid, block = spec.launch_geometry(run["params"])
    launched = session.timed_launch(kernel, grid, block, args, shared_bytes=spec.shared_memory_bytes(run["params"]))
    if isinstance(launched, Failed):
        print(f"the launch failed ({launched.stage}): {launched.reason}", file=sys.stderr)
        return 4
    return 0


def _uploaded(array) -> int:
    from cuda.bindings import driver

    status, pointer = driver.cuMemAlloc(max(array.nbytes, 1))
    if status != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuMemAlloc of {array.nbytes} bytes: {status.name}")
    (status,) = driver.cuMemcpyHtoD(pointer, array.ctypes.data, array.nbytes)
    if status != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuMemcpyHtoD of {array.nbytes} bytes: {status.name}")
    return int(pointer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
