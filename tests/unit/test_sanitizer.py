"""The sanitizer gate without a GPU: what is recorded where compute-sanitizer is not installed, the command
line it is run with, how its output becomes a verdict, and the whole gate driven by stand-in tools that print
the sanitizer's output."""
import json
import stat
import sys
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.verifier import sanitizer
from services.verifier.sanitizer import NOT_INSTALLED, SanitisedRun, command, find_tool, gate, parse, small_sizes
from shared.adapters.settings import Settings
from shared.domain.events import (CandidateRejected, CandidateVerified, SanitizerChecked, TrialPassed,
                                  VerificationRequested)
from tests.conftest import EXAMPLES

# compute-sanitizer's output, captured on an H100 (compute-sanitizer 2025.3.1, CUDA 13.0) from small faulty
# kernels run by a cuda.core script; host backtrace frames and the traceback's middle left out.
MEMCHECK_FAILED = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at oob+0xc0
=========     by thread (232,0,0) in block (3,0,0)
=========     Access to 0x7f249aa01fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f249aa01000 of size 4,000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
========= 
Traceback (most recent call last):
cuda.core._utils.cuda_utils.CUDAError: CUDA_ERROR_LAUNCH_FAILED: An exception occurred on the device while executing a kernel.
========= Target application returned an error
========= ERROR SUMMARY: 1 error
"""
RACECHECK_FAILED = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at race+0xe0
=========     and Read access at race+0xf0 [1024 hazards]
========= 
runner done
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
# What the H100's racecheck (2025.3.1) printed for matmul with its first barrier removed, at n = 63.
RACECHECK_HAZARD = """\
========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0xc00 in block (0,2,0) :
=========     Write Thread (0,0,0) at matmul+0x1680
=========     Read Thread (0,5,0) at matmul+0x16e0
=========     Current Value : 42
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main in sanitizer.py:215
========= 
========= RACECHECK SUMMARY: 10 hazards displayed (131072 errors, 16384 warnings)
"""
INITCHECK_FAILED = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at clean+0xc0
=========     by thread (0,0,0) in block (2,0,0)
=========     Address 0x7ff0d0a01800
=========     Saved host backtrace up to driver entry point at kernel launch time
========= 
========= Uninitialized __global__ memory read of size 4 bytes
=========     at clean+0xc0
=========     by thread (1,0,0) in block (2,0,0)
=========     Address 0x7ff0d0a01804
=========     Saved host backtrace up to driver entry point at kernel launch time
========= 
runner done
========= ERROR SUMMARY: 1000 errors
========= ERROR SUMMARY: 990 errors were not printed. Use --print-limit option to adjust the number of printed errors
"""
SYNCCHECK_FAILED = """\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in warp.
=========     at diverge+0x100
=========     by thread (0,0,0) in block (0,0,0)
=========     Saved host backtrace up to driver entry point at kernel launch time
========= 
Traceback (most recent call last):
cuda.core._utils.cuda_utils.CUDAError: CUDA_ERROR_LAUNCH_FAILED: An exception occurred on the device while executing a kernel.
Warning: cuMemFreeAsync failed during resource destruction (CUDA error 719)
========= Target application returned an error
========= ERROR SUMMARY: 16 errors
========= ERROR SUMMARY: 6 errors were not printed. Use --print-limit option to adjust the number of printed errors
"""
MEMCHECK_PASSED = "========= COMPUTE-SANITIZER\nrunner done\n========= ERROR SUMMARY: 0 errors\n"
RACECHECK_PASSED = ("========= COMPUTE-SANITIZER\nrunner done\n"
                    "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
RUNNER_BROKE = """\
========= COMPUTE-SANITIZER
Traceback (most recent call last):
  File "cuda/core/_module.pyx", line 810, in cuda.core._module.ObjectCode.get_kernel
cuda.core._utils.cuda_utils.CUDAError: CUDA_ERROR_NOT_FOUND: This indicates that a named symbol was not found.
========= Target application returned an error
========= ERROR SUMMARY: 0 errors
"""
# Not captured: the tool's own failure to attach, as it words it.
TOOL_BROKE = "========= COMPUTE-SANITIZER\n========= Error: No attachable process found. compute-sanitizer timed-out.\n"


@pytest.mark.parametrize("output, returncode, verdict, first_error", [
    (MEMCHECK_FAILED, 86, "failed", "Invalid __global__ read of size 4 bytes"),
    (RACECHECK_FAILED, 86, "failed", "Error: Race reported between Write access at race+0xe0"),
    (INITCHECK_FAILED, 86, "failed", "Uninitialized __global__ memory read of size 4 bytes"),
    (SYNCCHECK_FAILED, 86, "failed", "Barrier error detected. Divergent thread(s) in warp."),
    (MEMCHECK_PASSED, 0, "passed", ""),
    (RACECHECK_PASSED, 0, "passed", ""),
    (RACECHECK_HAZARD, 86, "failed", "Error: Potential RAW hazard detected at __shared__ 0xc00 in block (0,2,0) :"),
    (RUNNER_BROKE, 1, "error", "cuda.core._utils.cuda_utils.CUDAError: CUDA_ERROR_NOT_FOUND: This indicates "
                               "that a named symbol was not found."),
    (TOOL_BROKE, 1, "error", "Error: No attachable process found. compute-sanitizer timed-out."),
])
def test_the_tools_output_becomes_a_verdict_with_its_first_error_line(output, returncode, verdict, first_error):
    assert parse(returncode, output) == (verdict, first_error)


def test_the_command_runs_this_module_under_the_tool(tmp_path):
    run_file = tmp_path / "run.json"
    assert command(Path("/opt/cuda/bin/compute-sanitizer"), "racecheck", run_file) == [
        "/opt/cuda/bin/compute-sanitizer", "--tool", "racecheck", "--racecheck-report", "all", "--error-exitcode",
        "86", "--print-limit", "10", "--report-api-errors", "no", sys.executable, "-m", "services.verifier.sanitizer",
        str(run_file)]


def test_a_configured_tool_is_used_only_when_it_can_run(tmp_path):
    tool = fake_tool(tmp_path, MEMCHECK_PASSED, 0)
    assert find_tool(str(tool)) == tool
    assert find_tool(str(tmp_path / "missing")) is None


def test_the_sanitised_trial_is_small():
    vector_add, matmul, reduction = (load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml")
                                     for name in ("vector_add", "matmul", "reduction"))
    # Halved to at most 4096 elements an array, then one less, so that the last block is a partial one.
    assert small_sizes(vector_add, 4096) == {"n": 4095}
    assert small_sizes(matmul, 4096) == {"n": 63}  # 63 x 63 matrices
    assert small_sizes(reduction, 4096) == {"n": 4095, "blocks": 1}
    assert small_sizes(vector_add.with_sizes({"n": 1000}), 4096) == {"n": 999}


# --- the gate -----------------------------------------------------------------------------------------------
def verified(spec) -> tuple[VerificationRequested, CandidateVerified]:
    request = VerificationRequested(stream_id="job-x", queue="verifier.0", candidate_id="one_prompt",
                                    candidate=spec.as_candidate())
    answer = CandidateVerified(stream_id="job-x", request_id=request.event_id, candidate_id="one_prompt", device="H100",
                               trials=[TrialPassed(label="spec sizes #1", sizes=spec.sizes, seed=1, max_abs_error=0,
                                                   max_rel_error=0)], max_abs_error=0, max_rel_error=0)
    return request, answer


def no_device():
    raise AssertionError("the GPU is not needed when nothing is sanitised")


def test_without_the_tool_the_candidate_stays_verified_and_the_job_says_it_was_not_sanitised(vector_add_spec, tmp_path):
    request, answer = verified(vector_add_spec)

    events = gate(vector_add_spec, request, answer, no_device,
                  Settings(KFORGE_HOME=str(tmp_path), KFORGE_COMPUTE_SANITIZER=str(tmp_path / "none")))

    checked, kept = events
    assert kept is answer
    assert isinstance(checked, SanitizerChecked) and checked.tool_path is None and checked.checks == []
    assert checked.note == NOT_INSTALLED == "compute-sanitizer not installed: the candidate was not sanitised"
    assert (checked.request_id, checked.candidate_id, checked.sizes) == (request.event_id, "one_prompt", {"n": 4095})


def test_an_answer_other_than_verified_passes_through(vector_add_spec):
    request, answer = verified(vector_add_spec)
    rejected = CandidateRejected(stream_id="job-x", request_id=request.event_id, candidate_id="one_prompt",
                                 check="mismatch", reason="differs")
    assert gate(vector_add_spec, request, rejected, no_device) == [rejected]


class FakeProcess:
    """What the gate asks of the verifier's GPU process: its device's arch and index."""
    device_index = 0

    class device:
        arch = "sm_90"


def fake_tool(folder: Path, output: str, status: int, only: str = "") -> Path:
    """A stand-in compute-sanitizer that prints `output` and exits with `status` when run as `--tool only` (any
    tool when `only` is empty); as any other tool it reports no errors."""
    (folder / "output.txt").write_text(output)
    (folder / "passed.txt").write_text(MEMCHECK_PASSED)
    tool = folder / "compute-sanitizer"
    tool.write_text(f"#!/bin/sh\nif [ -z '{only}' ] || [ \"$2\" = '{only}' ]; then cat '{folder / 'output.txt'}'; "
                    f"exit {status}; fi\ncat '{folder / 'passed.txt'}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_a_failing_check_rejects_the_candidate_with_the_tools_first_error(vector_add_spec, tmp_path):
    request, answer = verified(vector_add_spec)
    tool = fake_tool(tmp_path, RACECHECK_FAILED, 86, only="racecheck")

    checked, rejected = gate(vector_add_spec, request, answer, lambda: FakeProcess,
                             Settings(KFORGE_HOME=str(tmp_path), KFORGE_COMPUTE_SANITIZER=str(tool)))

    assert checked.tool_path == str(tool)
    assert [(c.tool, c.verdict) for c in checked.checks] == [
        ("memcheck", "passed"), ("racecheck", "failed"), ("initcheck", "passed"), ("synccheck", "passed")]
    assert isinstance(rejected, CandidateRejected) and rejected.check == "sanitizer"
    assert rejected.reason == "racecheck: Error: Race reported between Write access at race+0xe0"
    assert rejected.request_id == request.event_id and "4095" in rejected.trial


def test_passing_checks_keep_the_candidate_verified(vector_add_spec, tmp_path):
    request, answer = verified(vector_add_spec)
    tool = fake_tool(tmp_path, MEMCHECK_PASSED, 0)

    checked, kept = gate(vector_add_spec, request, answer, lambda: FakeProcess,
                         Settings(KFORGE_HOME=str(tmp_path), KFORGE_COMPUTE_SANITIZER=str(tool)))

    assert kept is answer
    assert [(c.tool, c.verdict) for c in checked.checks] == [(t, "passed") for t in sanitizer.TOOLS]
    assert checked.note == f"one launch at sizes {{'n': 4095}}: " + ", ".join(f"{t} passed" for t in sanitizer.TOOLS)


def test_a_check_past_its_time_limit_is_recorded_and_does_not_reject(vector_add_spec, tmp_path):
    request, answer = verified(vector_add_spec)
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\nsleep 5\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)

    checked, kept = gate(vector_add_spec, request, answer, lambda: FakeProcess,
                         Settings(KFORGE_HOME=str(tmp_path), KFORGE_COMPUTE_SANITIZER=str(tool),
                                  KFORGE_SANITIZER_TIMEOUT_S=0.2))

    assert kept is answer
    assert {c.verdict for c in checked.checks} == {"timeout"}
    assert "KFORGE_SANITIZER_TIMEOUT_S" in checked.checks[0].first_error


def test_the_run_file_carries_the_small_trial(vector_add_spec, tmp_path):
    spec = vector_add_spec.with_sizes({"n": 4096})
    path = SanitisedRun(spec, 7, b"\x7fELF", "vector_add", {"block_size_x": 256}, 0).write(tmp_path)
    run = json.loads(path.read_text())
    assert run["spec"]["sizes"] == {"n": 4096} and run["seed"] == 7 and run["lowered_name"] == "vector_add"
    assert Path(run["cubin"]).read_bytes() == b"\x7fELF"


# --- the hook in the verifier -------------------------------------------------------------------------------
def test_the_verifier_records_the_sanitiser_verdict_with_its_answer(store, vector_add_spec, monkeypatch, tmp_path):
    from services.verifier import handlers
    from shared.adapters.device.process import GpuProcess
    from shared.domain.projections import job_stream
    from tests.fakes import RecordingBus, ScriptedVerifierSession
    from tests.unit.test_tune_job import submit

    monkeypatch.setenv("KFORGE_COMPUTE_SANITIZER", str(tmp_path / "none"))  # as on a machine without the tool
    spec = vector_add_spec.model_validate({**vector_add_spec.model_dump(), "sizes": {"n": 1 << 16}})
    job_id = submit(store, spec)
    request = VerificationRequested(stream_id=job_stream(job_id), queue="verifier.0", candidate_id="one_prompt",
                                    candidate=spec.as_candidate())
    store.append(job_stream(job_id), [request], expected_version=None)
    process = GpuProcess(0, ScriptedVerifierSession)
    try:
        handlers.verify_candidate(store, RecordingBus(), job_id, request.event_id, lambda: process, "sm_90")
    finally:
        process.close()

    checked, verified_ = store.read_stream(job_stream(job_id))[-2:]
    assert isinstance(checked, SanitizerChecked) and checked.note == NOT_INSTALLED
    assert isinstance(verified_, CandidateVerified) and verified_.request_id == request.event_id


def test_a_rewrite_is_sanitised_once_tuned_the_version_that_may_be_kept(vector_add_spec, tmp_path):
    from shared.domain.steps import TUNED_SUFFIX

    rewriting = vector_add_spec.model_validate({**vector_add_spec.model_dump(), "strategy": {"name": "one_prompt"}})
    request, answer = verified(rewriting)
    settings = Settings(KFORGE_HOME=str(tmp_path), KFORGE_COMPUTE_SANITIZER=str(tmp_path / "none"))

    assert gate(rewriting, request, answer, no_device, settings) == [answer]
    tuned = request.model_copy(update={"candidate_id": "one_prompt" + TUNED_SUFFIX})
    checked, kept = gate(rewriting, tuned, answer, no_device, settings)
    assert isinstance(checked, SanitizerChecked) and kept is answer
