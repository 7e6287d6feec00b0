"""A kernel whose float result depends on the order of its arithmetic (tests/corpus/atomic_sum.cu: one atomicAdd
per element) is never rejected against itself: its baseline is measured and it verifies with no tolerance set by
hand, as does a sum in another order, while a sum that drops 1% of its terms is still rejected. The examples
verify against themselves too, and a reduction that drops terms no longer verifies as NaN against NaN (the
verifier once poisoned the total that the reduction adds into). Run on the GPU machine (`make test-gpu`)."""
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.verifier import handlers as verifier
from services.verifier.session import VerifierSession
from shared.adapters.device.process import GpuProcess
from shared.domain.events import BaselineMeasured, CandidateRejected, CandidateVerified, VerificationRequested
from shared.domain.spec import KernelSpec
from tests.conftest import EXAMPLES
from tests.gpu.baselines import baseline_events

pytestmark = pytest.mark.gpu
ATOMIC_SUM = (Path(__file__).resolve().parents[1] / "corpus" / "atomic_sum.cu").read_text()
# The same sum, each warp's 32 elements added first (shuffles), then one atomicAdd per warp: another order.
WARP_SUM = r"""
extern "C" __global__ void atomic_sum(float *total, const float *x, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, v);
}
"""
DROPS_1PC = ATOMIC_SUM.replace("if (i < n) atomicAdd", "if (i < n && i % 100 != 0) atomicAdd")


def atomic_sum_spec(strategy: dict) -> KernelSpec:
    return KernelSpec.model_validate({
        "kernel_name": "atomic_sum", "source": ATOMIC_SUM, "sizes": {"n": 1 << 24}, "problem_size": ["n"],
        "args": [{"name": "total", "dtype": "float32", "shape": [1], "role": "out"},
                 {"name": "x", "dtype": "float32", "shape": ["n"]},
                 {"name": "n", "dtype": "int32", "value": "n"}],
        "params": {"block_size_x": 256}, "strategy": strategy})


def verify_spec(spec: KernelSpec, source: str) -> KernelSpec:
    return spec.model_validate({**spec.model_dump(), "strategy": {"name": "verify", "candidate": {"source": source}}})


@pytest.fixture(scope="module")
def process():
    process = GpuProcess(0, VerifierSession)
    yield process
    process.close()


def verify(spec: KernelSpec, process):
    request = VerificationRequested(stream_id="job-spread", queue="verifier.0", candidate_id="c",
                                    candidate=spec.strategy.candidate)
    return verifier._verify("job-spread", spec, request, lambda: process, "sm_90")


def test_the_baseline_of_a_float_atomic_sum_is_measured_with_no_tolerance_set(tmp_path):
    spec = atomic_sum_spec({"name": "baseline"})
    assert spec.benchmark.atol is None and spec.benchmark.rtol is None
    events = baseline_events(tmp_path, spec)
    measured = [e for e in events if isinstance(e, BaselineMeasured)]
    assert len(measured) == 1, [(e.type, getattr(e, "reason", "")) for e in events]
    (tolerance,) = measured[0].tolerances
    print(f"baseline {measured[0].median_ms:.4f} ms; total within atol {tolerance.atol:.3g} + rtol "
          f"{tolerance.rtol:.3g} x |ref|: {tolerance.reason}")
    assert tolerance.output == "total" and tolerance.spread > 0, "the atomic sum repeated itself exactly"
    assert tolerance.atol > 1e-4 and "differs from itself" in tolerance.reason


@pytest.mark.parametrize("candidate, expected", [(ATOMIC_SUM, "pass"), (WARP_SUM, "pass"), (DROPS_1PC, "mismatch")],
                         ids=["itself", "another order", "drops 1% of its terms"])
def test_an_atomic_sum_is_judged_within_its_own_spread(process, candidate, expected):
    answer = verify(verify_spec(atomic_sum_spec({"name": "baseline"}), candidate), process)
    print(answer.type, getattr(answer, "reason", ""), [t.tolerances for t in getattr(answer, "trials", [])])
    if expected == "pass":
        assert isinstance(answer, CandidateVerified), answer
        assert any(t.tolerances[0].spread > 0 for t in answer.trials)  # the tolerance was the derived one
    else:
        assert isinstance(answer, CandidateRejected) and answer.check == expected, answer
        assert answer.tolerances[0].output == "total" and "differs from itself" in answer.tolerances[0].reason


def example(name: str, sizes: dict) -> KernelSpec:
    spec = load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml")
    return spec.model_validate({**spec.model_dump(), "sizes": sizes})


EXAMPLE_SIZES = {"vector_add": {"n": 1 << 20}, "matmul": {"n": 512}, "reduction": {"n": 1 << 24, "blocks": 1024}}


@pytest.mark.parametrize("name", EXAMPLE_SIZES)
def test_every_example_verifies_against_itself(process, name):
    spec = example(name, EXAMPLE_SIZES[name])
    answer = verify(verify_spec(spec, spec.source), process)
    assert isinstance(answer, CandidateVerified), answer
    print(name, [(t.label, t.max_abs_error, [x.reason for x in t.tolerances]) for t in answer.trials])


def test_a_reduction_that_drops_terms_is_rejected_not_passed_as_nan_against_nan(process):
    spec = example("reduction", EXAMPLE_SIZES["reduction"])
    assert "sum += x[i];" in spec.source
    answer = verify(verify_spec(spec, spec.source.replace("sum += x[i];", "if (i % 100) sum += x[i];")), process)
    assert isinstance(answer, CandidateRejected) and answer.check == "mismatch", answer
