"""Verify a job's candidate: compile both kernels and compare their signatures (no GPU needed), then run
both on every trial and judge the candidate's outputs. The answer is one event: CandidateVerified,
CandidateRejected (with the check that failed and the trial that showed it) or, without a GPU,
VerificationIncomplete."""
from collections.abc import Callable
from uuid import UUID

from services.verifier import sanitizer
from services.verifier.session import TrialRun
from services.verifier.trials import plan_trials, size_problem, sizes_not_tried
from shared.adapters.bus import Bus
from shared.adapters.device.compiler import compile_kernel, kernel_signature, parameter_types
from shared.adapters.device.nvrtc import CompileError
from shared.adapters.device.process import Failed, GpuProcess, NoDevice
from shared.adapters.eventstore import EventStore
from shared.application.limits import memory_refusal
from shared.application.requests import answer_request
from shared.domain.events import (CandidateRejected, CandidateVerified, Event, JobSubmitted, Tolerance, TrialPassed,
                                  VerificationIncomplete, VerificationRequested, derived_id)
from shared.domain.signature import mismatches
from shared.domain.spec import KernelSpec


def verify_candidate(store: EventStore, bus: Bus, job_id: str, request_id: UUID,
                     device: Callable[[], GpuProcess], default_arch: str) -> None:
    """`device()` returns the GPU process of this worker, or raises NoDevice."""

    def compute(history: list[Event], submitted: JobSubmitted, request: VerificationRequested) -> list[Event]:
        answer = _verify(request.stream_id, submitted.spec, request, device, default_arch)
        # A verified candidate is sanitised too: SanitizerChecked, then the answer (or its rejection).
        return sanitizer.gate(submitted.spec, request, answer, device)

    answer_request(store, bus, job_id, request_id, VerificationRequested, compute)


def _verify(stream: str, spec: KernelSpec, request: VerificationRequested, device: Callable[[], GpuProcess],
            default_arch: str) -> Event:
    rid, candidate = request.event_id, request.candidate
    common = dict(stream_id=stream, request_id=rid, candidate_id=request.candidate_id)

    def rejected(check: str, reason: str, trial: str | None = None, log: str = "",
                 tolerances: tuple[Tolerance, ...] = ()) -> CandidateRejected:
        return CandidateRejected(event_id=derived_id(rid, "CandidateRejected"), **common, check=check, reason=reason,
                                 trial=trial, log=log, tolerances=list(tolerances))

    try:
        process, no_device = device(), ""
    except NoDevice as exc:
        process, no_device = None, str(exc)
    arch = spec.benchmark.arch or (process.device.arch if process else default_arch)
    reference_params = spec.baseline_params()
    candidate_params = {**reference_params, **candidate.params}
    candidate_name = candidate.kernel_name or spec.kernel_name
    try:
        reference = compile_kernel(spec.source, spec.kernel_name, reference_params, spec.compiler_options, arch)
    except CompileError as exc:
        return rejected("reference", f"the submitted kernel does not compile, so nothing can be compared with it: "
                                     f"{exc}", log=exc.log)
    try:
        compiled = compile_kernel(candidate.source, candidate_name, candidate_params, spec.compiler_options, arch)
        candidate_types = parameter_types(candidate.source, candidate_name, candidate_params, spec.compiler_options, arch)
    except CompileError as exc:
        return rejected("compile", str(exc), log=exc.log)
    # Admission refuses a submitted kernel that does not fit args; a job recorded before it did may still.
    reference_types, constants = kernel_signature(spec.source, spec.kernel_name, reference_params,
                                                  spec.compiler_options, arch)
    if reference_mismatch := _differences(spec, reference_types, constants):
        return rejected("reference", f"the submitted kernel does not match args: {reference_mismatch}; fix args")
    if wrong_signature := _differences(spec, candidate_types):
        return rejected("signature", wrong_signature)
    if process is None:
        return VerificationIncomplete(event_id=derived_id(rid, "VerificationIncomplete"), **common,
                                      passed=["compile", "signature"],
                                      reason=f"{no_device}; on a GPU machine the candidate is run on every trial")
    if too_big := memory_refusal(spec, process.device.memory_bytes):
        return rejected("reference", too_big)

    passed, skipped = [], [untried] if (untried := sizes_not_tried(spec)) else []
    as_candidate = spec.for_candidate(candidate)  # its own launch geometry (grid divisors) at every trial
    timeout = spec.verify.timeout_s
    for trial in plan_trials(spec):
        at_size = spec.with_sizes(trial.sizes)
        where = f"{trial.label} (sizes {trial.sizes}, seed {trial.seed})"
        if unusable := size_problem(at_size, reference_params):
            skipped.append(f"{where}: {unusable}")
            continue
        ran = process.call("reference", TrialRun(at_size, trial.seed, reference, reference_params), timeout,
                           "verify.timeout_s")
        if isinstance(ran, Failed):
            if ran.stage == "data":  # a data or answer file that cannot be used: no kernel is to blame
                return rejected("reference", ran.reason, where)
            if trial.sizes == spec.sizes:
                return rejected("reference", f"the submitted kernel itself fails at the spec's sizes ({ran.stage}): "
                                             f"{ran.reason}", where)
            skipped.append(f"{where}: the submitted kernel itself failed ({ran.stage}: {ran.reason})")
            continue
        if broken := size_problem(as_candidate.with_sizes(trial.sizes), candidate_params):
            return rejected("launch", f"the submitted kernel runs at these sizes, the candidate not: {broken}", where)
        verdict = process.call("candidate", TrialRun(as_candidate.with_sizes(trial.sizes), trial.seed, compiled,
                                                     candidate_params), timeout,
                               "verify.timeout_s")
        if isinstance(verdict, Failed):
            return rejected(_check_of(verdict), verdict.reason, where)
        if not verdict.passed:
            return rejected(verdict.check, verdict.reason, where, tolerances=verdict.tolerances)
        passed.append(TrialPassed(label=trial.label, sizes=trial.sizes, seed=trial.seed,
                                  max_abs_error=verdict.max_abs_error, max_rel_error=verdict.max_rel_error,
                                  tolerances=list(verdict.tolerances)))
    return CandidateVerified(event_id=derived_id(rid, "CandidateVerified"), **common, device=process.device.name,
                             trials=passed, skipped=skipped, max_abs_error=max(t.max_abs_error for t in passed),
                             max_rel_error=max(t.max_rel_error for t in passed))


def _check_of(failed: Failed) -> str:
    """A launch that faulted on an address is an out-of-bounds access; the rest keep their stage."""
    if any(code in failed.reason for code in ("ILLEGAL_ADDRESS", "MISALIGNED_ADDRESS")):
        return "out_of_bounds"
    return failed.stage if failed.stage in ("timeout", "crashed", "out_of_bounds") else "launch"


def _differences(spec: KernelSpec, types: list[str], constants: dict[str, int] | None = None) -> str:
    """'' when a kernel's parameter types (and its __constant__ variables, where given) fit the spec's args,
    else every way they do not. A candidate's constants are not asked for: one that no longer reads a
    __constant__ array loses it to the compiler, and is proven on the values like any candidate."""
    return "; ".join(m.what for m in mismatches(spec.args, types, constants))
