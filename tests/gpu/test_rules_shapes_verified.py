"""The offline rules' restructurings (issue 21) proven on a real GPU by the verifier, against the submitted kernel.

Each rewrite the recognisers make of a corpus kernel (examples/corpus), of the naive atomic sum
(tests/corpus/atomic_sum.cu), of the variants in tests/unit/rules_variants.py and of the kernels in users' styles
(tests/corpus/styles), and each corpus and styles kernel with
every rule that applies composed in the plan's order, is verified at moderate sizes (then, as the verifier always
does, at each size less one and at a prime below it, which no tile or vector width divides) for a sample of its
tune space: the default configuration, the smallest and largest, and seeded picks. The candidate runs at its own
launch geometry (its grid divisors), the submitted kernel at the spec's. Run on the GPU machine
(`make test-gpu`, or `pytest -q -m gpu tests/gpu/test_rules_shapes_verified.py -s` for the table).
"""
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.shapes import recognise
from services.verifier import handlers
from services.verifier.session import VerifierSession
from shared.adapters.device.process import GpuProcess
from shared.domain.events import CandidateVerified, VerificationRequested
from shared.domain.spec import CandidateSpec, KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import (ATOMIC_SUM, BLOCK_MAX, INTERIOR_OFFSET, NOT_OF_SHAPE, ONE_D, PADDED_WINDOWS,
                                      SPLIT_COLUMNS, UNSIGNED_STENCILS, VARIANTS, sample)
from tests.unit.test_rules_vectorize16 import NARROW_VARIANTS

pytestmark = pytest.mark.gpu
CORPUS = {kernel.name: kernel for kernel in corpus()}
STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"  # kernels in users' styles
# Sizes small enough to verify quickly, large enough for several blocks, tiles and rows per block.
SIZES = {
    "transpose": {"rows": 1000, "cols": 776}, "jacobi2d": {"nx": 1000, "ny": 520},
    "laplace3d": {"nx": 96, "ny": 64, "nz": 40}, "conv2d": {"height": 520, "width": 640, "k": 5},
    "gemv": {"rows": 1000, "cols": 1000}, "spmv_csr": {"rows": 65536, "cols": 65536, "nnz": 1048576},
    "softmax": {"rows": 300, "cols": 1000}, "layernorm": {"rows": 300, "cols": 1000},
    "row_sum": {"rows": 500, "cols": 1000}, "int_stats": {"n": 1 << 22}, "dot": {"n": 1 << 22},
    "histogram": {"n": 1 << 22}, "bias_gelu": {"rows": 500, "cols": 1000},
    "rgba_to_gray": {"height": 500, "width": 700}, "gather": {"n": 1 << 22, "m": 1 << 20},
    "haxpy": {"n": 1 << 22}, "bf16_axpy": {"n": 1 << 22}, "segmented_scan": {"segments": 300, "seg": 1000},
    "silu_clamp": {"n": 1 << 22},
}
RESTRUCTURED = {"transpose": "shared_tile", "jacobi2d": "register_blocking", "laplace3d": "register_blocking",
                "conv2d": "register_window", "gemv": "warp_per_row", "spmv_csr": "warp_per_row",
                "softmax": "shuffle_reduction", "layernorm": "shuffle_reduction", "row_sum": "shuffle_reduction",
                "int_stats": "hierarchical_reduction", "histogram": "hierarchical_reduction",
                "bias_gelu": "elements_per_thread",
                "rgba_to_gray": "elements_per_thread", "gather": "elements_per_thread",
                "segmented_scan": "shuffle_scan", "silu_clamp": "elements_per_thread"}
VECTORIZED = ("softmax", "layernorm", "row_sum", "dot", "histogram", "int_stats")
# Kernels passing over each row several times: the row read once into shared memory, or held in registers
# (alone here; with everything else that applies in their -plan cases, which take the registers the plan tries
# first, and in their -plan-row_in_shared cases, which leave the registers out: there the shuffles and vectors
# compose with shared memory, and sizes less one leave rows unaligned, so one pass may take vectors and another
# the scalar loop).
ROW_IN_SHARED = ("softmax", "layernorm")
ROW_IN_REGISTERS = ("softmax", "layernorm")
ROW_VARIANTS = ("l2_normalise", "rms_norm")
LEFT_OUT = {f"{prefix}-plan-row_in_shared": ("row_in_registers",)
            for prefix in (*ROW_IN_SHARED, *(f"variant-{case}" for case in ROW_VARIANTS))}
NARROW = ("haxpy", "bf16_axpy")  # 2-byte elementwise kernels: vectorize alone, and with everything in plan order


def small(name: str) -> KernelSpec:
    spec = CORPUS[name].spec()
    return spec.model_validate({**spec.model_dump(), "sizes": {**spec.sizes, **SIZES.get(name, {})},
                                "strategy": {"name": "baseline"}, "verify": {"timeout_s": 20}})


def style(path: Path) -> KernelSpec:
    """A kernel of tests/corpus/styles at an eighth of each size of 1024 or more, so it verifies quickly."""
    spec = load_spec(path.with_suffix(".cu"), path)
    sizes = {name: max(64, value // 8) if value >= 1024 else value for name, value in spec.sizes.items()}
    return spec.model_validate({**spec.model_dump(), "sizes": sizes, "strategy": {"name": "baseline"},
                                "verify": {"timeout_s": 20}})


def style_cases() -> dict:
    """Every shape rule that applies to a kernel of tests/corpus/styles, alone, and every rule in plan order."""
    found = {}
    for path in sorted(STYLES.glob("*.cu")):
        path = path.with_suffix(".yaml")
        spec = style(path)
        shape, _, _ = recognise(spec)
        for rule_id in shape.rules if shape else ():
            if rules.check(rule_id, spec, spec.as_candidate()) is None:
                found[f"style-{path.stem}-{rule_id}"] = (lambda p=path: style(p), rule_id)
        found[f"style-{path.stem}-plan"] = (lambda p=path: style(p), None)
    return found


def composed(spec: KernelSpec, left_out: tuple[str, ...] = ()) -> CandidateSpec:
    candidate, progress = spec.as_candidate(), True
    while progress:
        progress = False
        for rule_id in rules.PLAN_ORDER:
            if rule_id not in left_out and rules.check(rule_id, spec, candidate) is None:
                candidate, progress = rules.apply(rule_id, spec, candidate), True
    return candidate


def cases() -> dict:
    found = {f"{name}-{rule_id}": (lambda n=name: small(n), rule_id) for name, rule_id in RESTRUCTURED.items()}
    found.update({f"{name}-vectorize_loops": (lambda n=name: small(n), "vectorize_loops") for name in VECTORIZED})
    found.update({f"{name}-row_in_shared": (lambda n=name: small(n), "row_in_shared") for name in ROW_IN_SHARED})
    found.update({f"{name}-row_in_registers": (lambda n=name: small(n), "row_in_registers")
                  for name in ROW_IN_REGISTERS})
    found.update({f"{name}-plan-row_in_shared": (lambda n=name: small(n), None) for name in ROW_IN_SHARED})
    found.update({f"{name}-plan": (lambda n=name: small(n), None) for name in RESTRUCTURED})
    found.update({f"{name}-vectorize": (lambda n=name: small(n), "vectorize") for name in NARROW})
    found.update({f"{name}-plan": (lambda n=name: small(n), None) for name in NARROW})
    found.update({f"variant16-{case}": (lambda s=spec: s, "vectorize") for case, spec in NARROW_VARIANTS.items()})
    found.update({f"variant16-{case}-plan": (lambda s=spec: s, None) for case, spec in NARROW_VARIANTS.items()})
    found["atomic_sum-hierarchical_reduction"] = (lambda: ATOMIC_SUM, "hierarchical_reduction")
    found["atomic_sum-plan"] = (lambda: ATOMIC_SUM, None)
    found.update({f"variant-{case}": (lambda s=spec: s, rule_id) for case, (rule_id, spec) in VARIANTS.items()})
    # One result per block from a grid-stride share: every rule that applies keeps the submitted block size.
    found["variant-block_max-plan"] = (lambda: BLOCK_MAX, None)
    found.update(style_cases())
    found.update({f"variant-{case}-plan": (lambda s=VARIANTS[case][1]: s, None) for case in ROW_VARIANTS})
    # An argmax's places through the whole plan: vectors keep a lane's elements in the row's order.
    found.update({f"variant-{case}-plan": (lambda s=VARIANTS[case][1]: s, None) for case in ("row_argmax",
                                                                                             "code_argmin")})
    # Column loops split among a column's threads, with batch_loads' passes over each thread's share of the rows.
    found.update({f"variant-split_{case}-plan": (lambda s=spec: s, None) for case, spec in SPLIT_COLUMNS.items()})
    found.update({f"variant-{case}-plan-row_in_shared": (lambda s=VARIANTS[case][1]: s, None) for case in ROW_VARIANTS})
    found.update({f"variant-{case}-row_in_registers": (lambda s=VARIANTS[case][1]: s, "row_in_registers")
                  for case in ROW_VARIANTS})
    # Chunked block scans, four elements per thread: the verifier's sizes less one leave rows unaligned, so some
    # chunks take the vector path and others the element path.
    found["segmented_scan-scan_vectors"] = (lambda: small("segmented_scan"), "scan_vectors")
    found["variant-row_cumsum-scan_vectors"] = (lambda: VARIANTS["row_cumsum"][1], "scan_vectors")
    # 1D kernels of points as one row of vectors, elements_per_thread of them a block width apart a thread.
    found.update({f"variant-one_d_{case}-plan": (lambda s=spec: s, None) for case, spec in ONE_D.items()})
    # Points whose slowest index no guard bounds, marched along x, with vectors a block width apart.
    found.update({f"variant-{case}-plan": (lambda s=VARIANTS[case][1]: s, None) for case in (
        "points_marched_along_x_past_unguarded_rows", "points_of_a_band_marched_along_x", "batch_along_z_vectors",
        "bias_relu_nchw_block_per_channel", "rows_scaled_by_the_block_index_itself")})
    # Thread indices offset into an interior, read without the offset: marched, and restrict and launch_bounds.
    found.update({f"variant-interior_offset_{case}-plan": (lambda s=spec: s, None)
                  for case, spec in INTERIOR_OFFSET.items()})
    # Zero-padded windows: registers where a patch's window lies inside the image, the point body elsewhere.
    found.update({f"variant-{case}-plan": (lambda s=spec: s, None) for case, spec in PADDED_WINDOWS.items()})
    found.update({f"variant-{case}-plan": (lambda s=spec: s, None) for case, spec in UNSIGNED_STENCILS.items()})
    # A row of two warps with no barrier between its passes, which row_in_shared refuses: registers need none.
    found["variant-several_warps-row_in_registers"] = (
        lambda: NOT_OF_SHAPE["rows_of_several_warps_without_a_barrier"][1], "row_in_registers")
    return found


CASES = cases()
# The submitted moments kernel adds 1M float squares with one atomic each: its rounding is biased (small terms
# added to a large running sum round down more often than up), so it is 137 (3.9e-4) below the exact sum, in
# every order, while the rewrite is within 0.03 of it. The verifier judges against the submitted kernel, whose
# spread over runs cannot show a bias all orders share, and refuses the accurate rewrite: a known limit of
# judging order-dependent sums against a float32 reference (issue 21's note).
BIASED_REFERENCE = {"variant-moments"}


@pytest.fixture(scope="module")
def process():
    process = GpuProcess(0, VerifierSession)
    yield process
    process.close()


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason="biased reference"))
                                  if c in BIASED_REFERENCE else c for c in CASES])
def test_the_restructured_kernel_is_verified_against_the_submitted_one(process, case):
    make, rule_id = CASES[case]
    spec = make().model_validate({**make().model_dump(), "verify": {"timeout_s": 20}})
    candidate = rules.apply(rule_id, spec, spec.as_candidate()) if rule_id else composed(spec, LEFT_OUT.get(case, ()))
    failures, verified = [], 0
    for params in sample(candidate, spec, 4):
        configured = candidate.model_copy(update={"params": {**candidate.params, **params}})
        job = spec.model_validate({**spec.model_dump(), "strategy": {"name": "verify",
                                                                     "candidate": configured.model_dump()}})
        request = VerificationRequested(stream_id="job-shapes", queue="verifier.0", candidate_id=case,
                                        candidate=configured)
        answer = handlers._verify("job-shapes", job, request, lambda: process, "sm_90")
        verdict = "verified" if isinstance(answer, CandidateVerified) else (
            f"{answer.type} {getattr(answer, 'check', '')}: {getattr(answer, 'reason', '')} "
            f"[{getattr(answer, 'trial', '')}]")
        print(f"{case:<48} {rules.applied(candidate.source)} {params}: {verdict}")
        if isinstance(answer, CandidateVerified):
            verified += 1
        elif not _without_registers(answer):
            failures.append(f"{params}: {verdict}")
    assert not failures, f"{case}:\n" + "\n".join(failures) + f"\n{candidate.source}"
    assert verified, f"{case}: no configuration launched\n{candidate.source}"


def _without_registers(answer) -> bool:
    """A configuration that does not launch for want of registers (1,024 threads of a kernel holding several
    vectors in flight): the tuner skips it as any failed launch, and only a configuration that ran is verified,
    so it says nothing of the rewrite's correctness."""
    return getattr(answer, "check", "") == "launch" and "OUT_OF_RESOURCES" in getattr(answer, "reason", "")
