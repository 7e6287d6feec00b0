"""bfloat16 on a real GPU: the device's comparison of bfloat16 outputs finds what numpy finds on their float32
values, the corpus's bf16_axpy gets its baseline measured within the bfloat16 default tolerance, its honest
vectorised rewrite (examples/corpus/bf16_axpy.rewrite.md) is verified, and a rewrite that swaps the two lanes
of each bfloat16 pair is rejected. The device's generator gives the host's bfloat16 bits in
tests/gpu/test_verifier_device.py, with every other dtype's."""
import re

import numpy as np
import pytest

from services.generator.answers import parse
from services.verifier import handlers
from services.verifier.compare import POISON
from services.verifier.session import VerifierSession
from shared.adapters.device.own_kernels import OwnKernels
from shared.adapters.device.process import GpuProcess
from shared.adapters.inputs import distribution, draw, stream_key
from shared.domain.dtypes import from_bfloat16, to_bfloat16
from shared.domain.events import BaselineMeasured, CandidateRejected, CandidateVerified, VerificationRequested
from shared.domain.spec import CandidateSpec, KernelSpec
from tests.corpus_kernels import CorpusKernel
from tests.gpu.baselines import baseline_events

pytestmark = pytest.mark.gpu
N = 3 * (1 << 20) + 17  # not a multiple of anything: every thread loops, and the rewrite has a scalar tail
AXPY = CorpusKernel("bf16_axpy")
REWRITE = parse("rewrite", AXPY.rewrite())
SWAPPED = REWRITE.source.replace("__floats2bfloat162_rn(fmaf(af, xf.x, yf.x), fmaf(af, xf.y, yf.y))",
                                 "__floats2bfloat162_rn(fmaf(af, xf.y, yf.y), fmaf(af, xf.x, yf.x))")


def axpy(strategy: dict) -> KernelSpec:
    spec = AXPY.spec()
    return spec.model_validate({**spec.model_dump(), "sizes": {"n": N}, "strategy": strategy,
                                "verify": {"timeout_s": 10}})


@pytest.fixture(scope="module")
def process():
    process = GpuProcess(0, VerifierSession)
    yield process
    process.close()


def verify(source: str, process):
    candidate = CandidateSpec(source=source, **REWRITE.settings)
    spec = axpy({"name": "verify", "candidate": candidate.model_dump()})
    request = VerificationRequested(stream_id="job-bf16", queue="verifier.0", candidate_id="c", candidate=candidate)
    return handlers._verify("job-bf16", spec, request, lambda: process, "sm_90")


def test_the_device_comparison_of_bfloat16_finds_what_numpy_finds():
    session = VerifierSession(0, cache_bytes=0)
    own = OwnKernels(session)
    ref = draw(distribution("bfloat16", -1, 1), stream_key(1, 0), 0, N)
    out = ref.copy()
    changed = np.sort(np.random.default_rng(1).choice(N, 50, replace=False))
    out[changed[:20]] = to_bfloat16(from_bfloat16(ref[changed[:20]]) + 0.5)  # beyond 2e-2 + 2e-2 x |ref|
    out[changed[20:30]] = np.uint16(POISON * 0x101)  # unwritten: every byte poison, a NaN
    out[changed[30:40]] = to_bfloat16(np.inf)  # not finite where the reference is
    out[changed[40]] = to_bfloat16(from_bfloat16(ref[changed[40]]) * 1.01)  # within tolerance
    ref[changed[45]] = out[changed[45]] = to_bfloat16(np.nan)  # NaN against NaN: a match
    buffers = [session.upload(a, keep=False) for a in (out, ref)]
    found = own.compare(int(buffers[0].handle), int(buffers[1].handle), N, "bfloat16", 2e-2, 2e-2)
    o, r = from_bfloat16(out).astype(np.float64), from_bfloat16(ref).astype(np.float64)
    with np.errstate(invalid="ignore"):
        special = ~np.isfinite(o) | ~np.isfinite(r)
        bad = np.where(special, ~((np.isnan(o) & np.isnan(r)) | (np.isinf(o) & (o == r))),
                       np.abs(o - r) > 2e-2 + 2e-2 * np.abs(r))
        error = np.where(special, 0, np.abs(o - r))
    assert (found.beyond_tolerance.count, found.beyond_tolerance.first) == (bad.sum(), np.flatnonzero(bad)[0])
    assert (found.unwritten.count, found.unwritten.first) == (10, changed[20])
    assert found.not_finite.count == (~np.isfinite(o) & np.isfinite(r)).sum()
    assert found.max_abs == error.max()
    for buffer in buffers:
        buffer.close(session.stream)
    session.stream.sync()


def test_the_baseline_of_a_bfloat16_kernel_is_measured_within_the_bfloat16_default(tmp_path):
    events = baseline_events(tmp_path, axpy({"name": "baseline"}))
    measured = [e for e in events if isinstance(e, BaselineMeasured)]
    assert len(measured) == 1, [(e.type, getattr(e, "reason", "")) for e in events]
    (tolerance,) = measured[0].tolerances
    print(f"bf16_axpy baseline {measured[0].median_ms:.4f} ms at n = {N}; {tolerance.reason}")
    assert (tolerance.output, tolerance.atol, tolerance.rtol) == ("y", 2e-2, 2e-2)
    assert tolerance.reason == "the bfloat16 default: the reference repeats itself exactly"


def test_the_honest_vectorised_rewrite_is_verified(process):
    answer = verify(REWRITE.source, process)
    assert isinstance(answer, CandidateVerified), answer
    assert {t.sizes["n"] for t in answer.trials} >= {N, N - 1}
    print("bf16_axpy rewrite", [(t.label, t.max_abs_error) for t in answer.trials])


def test_a_rewrite_that_swaps_the_lanes_of_each_pair_is_rejected(process):
    assert SWAPPED != REWRITE.source
    answer = verify(SWAPPED, process)
    assert isinstance(answer, CandidateRejected) and answer.check == "mismatch", answer
    quoted = re.search(r"the first y\[\d+\]: (\S+) instead of (\S+)$", answer.reason)
    assert quoted and all(abs(float(v)) < 2 for v in quoted.groups()), answer.reason  # values, not bit patterns
