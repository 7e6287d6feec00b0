"""The tolerance rule (shared/domain/tolerance.py): what the spec sets wins, a reference that repeats itself keeps the
dtype's default, and one whose runs disagree allows its own spread and the rounding of a sum in any order,
which lets an honest reordering of a float sum through and still catches a sum that drops 1% of its terms."""
from types import SimpleNamespace

import numpy as np
import pytest

from shared.domain.tolerance import SPREAD_MARGIN, Observed, answer_tolerances, derive, derive_each, set_in_spec

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


def test_an_answer_is_held_to_the_verifiers_rule_the_spec_first_else_the_derived_tolerance(vector_add_spec):
    """Kernel Tuner's answer: the atol/rtol the user sets win (verify.*, then benchmark.*), and what neither sets is
    derived from the reference's spread as for any output, never the bare dtype default."""
    outputs, spread = [("c", "float32")], {"c": (0.5, 0.001)}
    derived = answer_tolerances(vector_add_spec, outputs, spread, 1 << 24, 1.0)["c"]
    assert derived == derive_each(outputs, {}, spread, 1 << 24, 1.0)["c"]
    assert derived.atol == pytest.approx(max(SPREAD_MARGIN * 0.5, EPS32 * (1 << 24))) and derived.atol > 1e-4
    spec = with_tolerances(vector_add_spec, benchmark={"atol": 0.5, "rtol": 0.25}, verify={"atol": 0.125})
    given = answer_tolerances(spec, outputs, spread, 1 << 24, 1.0)["c"]
    assert (given.atol, given.rtol) == (0.125, 0.25)  # verify.atol over benchmark.atol, as the verifier reads it
    assert given == derive_each(outputs, set_in_spec(spec, verifying=True), spread, 1 << 24, 1.0)["c"]
    exact = answer_tolerances(vector_add_spec, outputs, {"c": (0.0, 0.0)}, 1 << 24, 1.0)["c"]
    assert (exact.atol, exact.rtol) == (1e-4, 1e-4)  # a reference that repeats itself: the dtype's default


def test_the_benchmark_checks_an_answer_with_the_answer_tolerance_not_the_configurations(vector_add_spec):
    """BenchmarkSession's answer check, its device calls replaced: configurations are held to benchmark.* alone,
    the answer to verify.* first, and an unset part of either to what the reference's spread derives."""
    from services.benchmark.session import BenchmarkSession, InputSet

    spec = with_tolerances(vector_add_spec, benchmark={"atol": 0.5}, verify={"atol": 0.125})
    c = spec.args[0]
    session = BenchmarkSession.__new__(BenchmarkSession)
    session._setup = SimpleNamespace(spec=spec)
    session._own = SimpleNamespace(max_abs=lambda handle, count, dtype: 1.0)
    session._sets = [InputSet(seed=1, arrays=[SimpleNamespace(handle=0)] * 3 + [None],
                              outputs=[(c, None, None, "reference", 16)])]
    session.stream = None
    compared = []
    session.upload = lambda array, keep=True: SimpleNamespace(close=lambda stream: None)
    session._differences = lambda dtype, out, ref, size, atol, rtol: compared.append((atol, rtol)) or (0, None, 0.0)

    answers = {"c": np.zeros(16, np.float32)}
    session._tolerances, session._answer_tolerances = session._derived_tolerances({"c": (0.5, 0.001)}, answers)
    assert (session._tolerances["c"].atol, session._answer_tolerances["c"].atol) == (0.5, 0.125)
    assert session._answer_mismatch(session._sets[0], answers) == ""
    terms = 2 * spec.sizes["n"]  # a and b, the float inputs
    assert compared == [(0.125, pytest.approx(2 * EPS32 * np.sqrt(terms)))]  # rtol unset: derived, not the default
