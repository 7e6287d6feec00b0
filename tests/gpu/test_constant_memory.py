"""__constant__ arrays filled by the host (role constant; Kernel Tuner's cmem_args) on a real GPU: a FIR filter
whose taps live in constant memory is tuned as a whole job, an honest rewrite that reads the taps is verified, a
rewrite that hard-codes taps it never read is rejected (the verifier draws the taps afresh like any input), and
Kernel Tuner's way of passing them, tune_kernel(..., cmem_args=...), tunes it with its answer checked."""
import numpy as np
import pytest

import kforge
from kforge.api import build_spec
from shared.domain.events import (CandidateRejected, CandidateVerified, ConfigFailed, ConfigMeasured, JobCompleted,
                                  TuningCompleted)
from tests.gpu.embedded import embedded_runtime, run_job

pytestmark = pytest.mark.gpu
TAPS = 9
FIR = """__constant__ float taps[9];

extern "C" __global__ void fir(float *out, const float *in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float sum = 0.0f;
        for (int k = 0; k < 9; k++) sum += taps[k] * in[i + k];
        out[i] = sum;
    }
}
"""
# Honest: the block stages its inputs in shared memory, then each thread reads the taps as before.
STAGED = """__constant__ float taps[9];

extern "C" __global__ void fir(float *out, const float *in, int n)
{
    __shared__ float window[block_size_x + 8];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    window[threadIdx.x] = i < n + 8 ? in[i] : 0.0f;
    if (threadIdx.x < 8 && i + block_size_x < n + 8) window[threadIdx.x + block_size_x] = in[i + block_size_x];
    __syncthreads();
    if (i < n) {
        float sum = 0.0f;
        #pragma unroll
        for (int k = 0; k < 9; k++) sum += taps[k] * window[threadIdx.x + k];
        out[i] = sum;
    }
}
"""
# A cheat: the taps of the benchmark's filter written into the code, the constant array never read.
BAKED = FIR.replace("taps[k] * in[i + k]", "(1.0f / 9.0f) * in[i + k]")


def fir_spec(strategy: dict):
    return build_spec(FIR, {
        "kernel_name": "fir", "sizes": {"n": 1 << 22}, "problem_size": ["n"],
        "args": [{"name": "out", "dtype": "float32", "shape": ["n"], "role": "out"},
                 {"name": "in", "dtype": "float32", "shape": ["n + 8"]},
                 {"name": "n", "dtype": "int32", "value": "n"},
                 {"name": "taps", "dtype": "float32", "shape": [TAPS], "role": "constant"}],
        "tune_params": {"block_size_x": [64, 128, 256, 512]}, "strategy": strategy})


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with embedded_runtime(tmp_path_factory.mktemp("kforge-constant")) as rt:
        yield rt


def run(embedded, spec) -> list:
    return run_job(embedded, spec, "constant-memory")


def test_a_kernel_reading_constant_memory_is_tuned_with_every_configuration_measured(embedded):
    events = run(embedded, fir_spec({"name": "tune"}))
    failed = [f"{e.params}: {e.reason[:200]}" for e in events if isinstance(e, ConfigFailed)]
    measured = [e for e in events if isinstance(e, ConfigMeasured)]
    print([(e.params, round(e.median_ms, 4)) for e in measured], failed)
    assert any(isinstance(e, JobCompleted) for e in events) and len(measured) == 4 and not failed
    assert [e for e in events if isinstance(e, TuningCompleted)][-1].best_time_ms > 0


@pytest.mark.parametrize("source, verified", [(STAGED, True), (BAKED, False)], ids=["staged", "baked_taps"])
def test_a_rewrite_is_proven_on_taps_drawn_afresh(embedded, source, verified):
    events = run(embedded, fir_spec({"name": "verify", "candidate": {"source": source}}))
    outcome = [e for e in events if isinstance(e, CandidateVerified | CandidateRejected)]
    print([(e.type, getattr(e, "check", ""), getattr(e, "reason", "")[:300]) for e in outcome])
    assert outcome and isinstance(outcome[-1], CandidateVerified) == verified
    if not verified:
        assert outcome[-1].check == "mismatch"


def test_kernel_tuners_cmem_args_fill_the_taps_and_the_answer_holds(embedded):
    rng = np.random.default_rng(5)
    n = 1 << 20
    signal, weights = rng.uniform(-1, 1, n + 8).astype(np.float32), rng.uniform(-1, 1, TAPS).astype(np.float32)
    expected = np.lib.stride_tricks.sliding_window_view(signal.astype(np.float64), TAPS)[:n] @ weights
    results, env = kforge.tune_kernel("fir", FIR, n, [np.zeros(n, np.float32), signal, np.int32(n)],
                                      {"block_size_x": [128, 256]}, answer=[expected.astype(np.float32), None, None],
                                      atol=1e-4, cmem_args={"taps": weights}, quiet=True)
    print([(r["block_size_x"], r.get("time"), r.get("kforge_error")) for r in results])
    assert len(results) == 2 and all(isinstance(r["time"], float) for r in results)
    assert env["best_config"]["block_size_x"] in (128, 256)

