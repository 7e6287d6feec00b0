"""Inputs users need, on a real GPU: a gather verified over indices drawn in `range: [0, n]` (at the spec's
sizes and an odd one), fixed `data` uploaded instead of drawn, an `answer` that replaces the reference's output
once the submitted kernel is found to match it, and a wrong answer or a changed file reported as such by the
verifier and the benchmark. (Bit-for-bit host/device draws: tests/gpu/test_verifier_device.py.)"""
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.benchmark.measurement import Order, Setup
from services.benchmark.process import BenchmarkProcess
from services.verifier.session import TrialRun, VerifierSession
from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.process import Failed
from shared.domain.spec import KernelSpec

pytestmark = pytest.mark.gpu
N = 100_003
GATHER = """extern "C" __global__ void gather(float *out, const float *x, const int *idx, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) out[i] = x[idx[i]];
}
"""
IGNORES_INDICES = GATHER.replace("x[idx[i]]", "x[i]")


def gather_spec(folder: Path, x: str = "", idx: str = "range: [0, n]", out: str = "") -> KernelSpec:
    (folder / "gather.cu").write_text(GATHER)
    (folder / "gather.yaml").write_text(f"""kernel_name: gather
sizes: {{n: {N}}}
args:
  - {{name: out, dtype: float32, shape: [n], role: out{', ' + out if out else ''}}}
  - {{name: x, dtype: float32, shape: [n]{', ' + x if x else ''}}}
  - {{name: idx, dtype: int32, shape: [n], {idx}}}
  - {{name: n, dtype: int32, value: n}}
""")
    return load_spec(folder / "gather.cu", None)


def compiled(spec: KernelSpec, source: str = GATHER):
    return compile_kernel(source, spec.kernel_name, spec.baseline_params(), [], "sm_90")


@pytest.fixture(scope="module")
def session():
    session = VerifierSession(0, cache_bytes=1 << 30)
    yield session
    session.stream.sync()


def fixed_files(folder: Path, answer_shift: float = 0.0) -> dict[str, str]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal(N).astype(np.float32)
    idx = rng.integers(0, N, N, dtype=np.int32)
    np.save(folder / "x.npy", x)
    np.save(folder / "idx.npy", idx)
    np.save(folder / "expected.npy", x[idx] + np.float32(answer_shift))
    return {"x": "data: x.npy", "idx": "data: idx.npy", "out": "answer: expected.npy"}


def test_a_gather_over_drawn_indices_is_verified_and_one_that_ignores_them_is_caught(session, tmp_path):
    spec = gather_spec(tmp_path)
    params = spec.baseline_params()
    reference, wrong = compiled(spec), compiled(spec, IGNORES_INDICES)
    for trial in (spec, spec.with_sizes({"n": N - 1})):  # an odd size draws indices in its own [0, n)
        assert isinstance(session.reference(TrialRun(trial, 3, reference, params)), float)
        assert session.candidate(TrialRun(trial, 3, reference, params)).passed
        assert session.candidate(TrialRun(trial, 3, wrong, params)).check == "mismatch"


def test_fixed_data_and_an_answer_serve_the_trial(session, tmp_path):
    spec = gather_spec(tmp_path, **fixed_files(tmp_path))
    params = spec.baseline_params()
    reference, wrong = compiled(spec), compiled(spec, IGNORES_INDICES)
    assert isinstance(session.reference(TrialRun(spec, 1, reference, params)), float)
    assert session.candidate(TrialRun(spec, 1, reference, params)).passed
    verdict = session.candidate(TrialRun(spec, 1, wrong, params))
    assert verdict.check == "mismatch" and "instead of" in verdict.reason


def test_a_wrong_answer_is_reported_as_such(session, tmp_path):
    spec = gather_spec(tmp_path, **fixed_files(tmp_path, answer_shift=1.0))
    failed = session.reference(TrialRun(spec, 1, compiled(spec), spec.baseline_params()))
    assert isinstance(failed, Failed) and failed.stage == "answer"
    assert f"the submitted kernel's out differs from its answer ({tmp_path / 'expected.npy'}) at {N} of {N}" in failed.reason


def test_a_data_file_changed_since_submission_is_refused(session, tmp_path):
    spec = gather_spec(tmp_path, **fixed_files(tmp_path))
    np.save(tmp_path / "x.npy", np.zeros(N, np.float32))
    failed = session.reference(TrialRun(spec, 1, compiled(spec), spec.baseline_params()))
    assert isinstance(failed, Failed) and failed.stage == "data" and "changed since the job was submitted" in failed.reason


def test_the_benchmark_checks_the_answer_before_any_configuration(tmp_path):
    process = BenchmarkProcess(0)
    try:
        for shift, ok in ((0.0, True), (1.0, False)):
            spec = gather_spec(tmp_path, **fixed_files(tmp_path, answer_shift=shift))
            params, kernel = spec.baseline_params(), compiled(spec)
            geometry = spec.launch_geometry(params)
            prepared = process.prepare(Setup(spec=spec, seed=1, reference=kernel, reference_geometry=geometry,
                                             reference_params=params))
            if ok:
                assert prepared is None
                measured = process.measure(Order(params=params, kernel=kernel, grid=geometry[0], block=geometry[1],
                                                 best_ms=None))
                assert not isinstance(measured, Failed) and measured.samples_ms
            else:
                assert isinstance(prepared, Failed) and prepared.stage == "output"
                assert "the submitted kernel's out differs from its answer" in prepared.reason
    finally:
        process.close()
