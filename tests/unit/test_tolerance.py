"""The tolerance rule (shared/domain/tolerance.py): what the spec sets wins, a reference that repeats itself keeps the
dtype's default, and one whose runs disagree allows its own spread and the rounding of a sum in any order,
which lets an honest reordering of a float sum through and still catches a sum that drops 1% of its terms."""
import numpy as np
import pytest

from shared.domain.tolerance import SPREAD_MARGIN, Observed, derive, set_in_spec

EPS32 = float(np.finfo(np.float32).eps)


def observed(spread: float = 0.0, terms: int = 1 << 24, largest: float = 1.0) -> Observed:
    return Observed(spread=spread, spread_rel=spread / 1000, runs=3, terms=terms, largest=largest)


def with_tolerances(spec, benchmark: dict | None = None, verify: dict | None = None):
    return spec.model_validate({**spec.model_dump(), "benchmark": {**spec.benchmark.model_dump(), **(benchmark or {})},
                                "verify": {**spec.verify.model_dump(), **(verify or {})}})


def test_a_reference_that_repeats_itself_keeps_the_dtype_default():
    float32 = derive("c", "float32", {}, observed())
    assert (float32.atol, float32.rtol, float32.spread) == (1e-4, 1e-4, 0.0)
    assert float32.reason == "the float32 default: the reference repeats itself exactly"
    assert (derive("h", "int32", {}, observed()).atol, derive("h", "int32", {}, observed()).rtol) == (0.0, 0.0)


def test_a_reference_that_differs_from_itself_allows_its_spread_and_the_rounding_of_any_order():
    tolerance = derive("total", "float32", {}, observed(spread=0.8))
    assert tolerance.atol == pytest.approx(SPREAD_MARGIN * 0.8)  # above eps x N x max|x| = 2.0
    assert tolerance.rtol == pytest.approx(2 * EPS32 * 4096)
    assert tolerance.reason == ("the reference differs from itself by up to 0.8 over 3 runs: atol 4 x that, rtol "
                                "2 eps x sqrt(16777216 terms)")
    floor = derive("total", "float32", {}, observed(spread=0.01))  # a few runs that happened to agree closely
    assert floor.atol == pytest.approx(EPS32 * (1 << 24)) and "eps x 16777216 terms x max|x| 1" in floor.reason
    # Integers have no rounding: only the margin over what the runs showed.
    assert (derive("h", "int32", {}, observed(spread=2.0)).atol, derive("h", "int32", {}, observed(2.0)).rtol) == (8, 0)


def test_what_the_spec_sets_always_wins(vector_add_spec):
    spec = with_tolerances(vector_add_spec, benchmark={"atol": 0.5, "rtol": 0.25}, verify={"atol": 0.125})
    assert set_in_spec(spec, verifying=True) == {"atol": (0.125, "verify.atol"), "rtol": (0.25, "benchmark.rtol")}
    assert set_in_spec(spec, verifying=False) == {"atol": (0.5, "benchmark.atol"), "rtol": (0.25, "benchmark.rtol")}
    assert set_in_spec(vector_add_spec, verifying=True) == {}
    tolerance = derive("c", "float32", set_in_spec(spec, verifying=True), observed(spread=100.0))
    assert (tolerance.atol, tolerance.rtol) == (0.125, 0.25)
    assert tolerance.reason.endswith("atol from verify.atol, rtol from benchmark.rtol")
    half = derive("c", "float32", {"rtol": (0.0, "verify.rtol")}, observed(spread=1.0))
    assert (half.atol, half.rtol) == (SPREAD_MARGIN * 1.0, 0.0)  # the part left unset is still derived


def within(out: float, ref: float, tolerance) -> bool:
    return abs(out - ref) <= tolerance.atol + tolerance.rtol * abs(ref)


@pytest.mark.parametrize("low", [-1.0, 0.0], ids=["terms of either sign", "terms of one sign"])
def test_an_honest_reordering_passes_and_a_sum_missing_1pc_of_its_terms_does_not(low):
    """A float32 sum taken one term at a time in a random order, as atomicAdd takes it: three runs of the
    reference give its spread, then a candidate summing in another order (pairwise, as a tree reduction does)
    and one that drops every 100th term are judged against the first run."""
    rng = np.random.default_rng(7)
    n = 1 << 20
    x = rng.uniform(low, 1.0, n).astype(np.float32)
    runs = [float(np.cumsum(x[rng.permutation(n)], dtype=np.float32)[-1]) for _ in range(3)]
    spread = max(abs(r - runs[0]) for r in runs[1:])
    assert spread > 0  # the order shows: the default tolerance would not do
    tolerance = derive("total", "float32", {}, Observed(spread=spread, spread_rel=spread / abs(runs[0]), runs=3,
                                                        terms=n, largest=float(np.abs(x).max())))
    honest = float(np.sum(x))  # numpy sums pairwise
    dropped = float(np.sum(np.delete(x, np.s_[::100])))
    assert within(honest, runs[0], tolerance)
    assert not within(dropped, runs[0], tolerance)
