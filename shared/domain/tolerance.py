"""How far an output may be from the reference's, |out - ref| <= atol + rtol x |ref|, and why: one rule for
the verifier and the benchmark, pure, so it is tested on CPU.

An atol or rtol set in the spec always wins. Otherwise the dtype's default holds while the reference repeats
itself exactly on the inputs at hand. A reference whose own runs on the same inputs disagree (float atomics)
computes a result that depends on the order of its arithmetic; it is allowed, as any candidate then is,

    atol = max(default, SPREAD_MARGIN x spread, eps x N x max|x|)
    rtol = max(default, 2 x eps x sqrt(N))

with `spread` the largest absolute disagreement between its runs, eps the output dtype's machine epsilon, N
the number of float input elements and max|x| the largest finite one. The floors are the rounding error of a
sum taken in an arbitrary order, which a few runs may show too little of: summing in some order errs by
sum_k d_k T_k over the partial sums T_k, each |d_k| <= eps / 2, an error whose standard deviation, for
independent roundings, is about eps / (2 sqrt 3) x sqrt(sum_k T_k^2) (after Higham and Mary, SIAM J. Sci.
Comput., 2019). Where terms of either sign
cancel, the partial sums wander like a random walk and two orders differ by about 0.29 eps x N x rms|x|: the
atol floor is at least 3.4 of those standard deviations. Where terms share a sign the partial sums grow towards
the result, sqrt(sum_k T_k^2) <= sqrt(N) |result|, and the rtol floor is 4.9 of them. Which inputs reach which
output is unknown, so N counts them all: an output summing few of many inputs gets more room than it needs.
Both floors still grow with N as the error does and no faster: 2^24 terms in [-1, 1) summed in two orders
differ by about 0.5, their floors allow about 6, and a sum that drops 1% of the terms is off by about 240.
Integer arithmetic has no rounding: an integer output gets only the margin over its spread.
The relative spread is recorded but not used: one element near zero makes it unbounded.

An output's `answer` (Kernel Tuner's answer, whose atol the user gives) is held to the verifier's reading of the
spec wherever it is checked, the verifier's trials and the benchmark's input sets alike: verify.* wins, then
benchmark.*, and what neither sets is derived as above (answer_tolerances).
"""
import math
from dataclasses import dataclass

from shared.domain.dtypes import float_info, is_float
from shared.domain.events import Tolerance
from shared.domain.spec import DEFAULT_TOLERANCE, KernelSpec

SPREAD_MARGIN = 4  # a candidate may differ from the reference this many times as much as the reference's own runs
REFERENCE_RUNS = 3  # of the reference on the same inputs (and outputs restored), whose disagreement is its spread


@dataclass(frozen=True)
class Observed:
    """What the reference's own runs on one set of inputs showed of one output, and the scale of those inputs."""

    spread: float  # the largest |run - first run| over the elements, finite ones
    spread_rel: float  # the same, relative to |first run|
    runs: int
    terms: int  # float input elements
    largest: float  # the largest finite |x| among them


def set_in_spec(spec: KernelSpec, verifying: bool) -> dict[str, tuple[float, str]]:
    """The parts of the tolerance the spec sets ("atol", "rtol"), each with the field that sets it: the
    verifier's own first (verify.*), then the benchmark's, which are the only ones the benchmark reads."""
    sections = ("verify", "benchmark") if verifying else ("benchmark",)
    found = {}
    for part in ("atol", "rtol"):
        for section in sections:
            value = getattr(getattr(spec, section), part)
            if value is not None:
                found[part] = (value, f"{section}.{part}")
                break
    return found


def derive_each(outputs: list[tuple[str, str]], in_spec: dict[str, tuple[float, str]],
                spread: dict[str, tuple[float, float]], terms: int, largest: float) -> dict[str, Tolerance]:
    """The tolerance of each output, (name, dtype), from its spread (absolute, relative) over REFERENCE_RUNS runs
    of the reference and the scale of the float inputs those runs read."""
    return {name: derive(name, dtype, in_spec, Observed(spread=spread[name][0], spread_rel=spread[name][1],
                                                        runs=REFERENCE_RUNS, terms=terms, largest=largest))
            for name, dtype in outputs}


def answer_tolerances(spec: KernelSpec, outputs: list[tuple[str, str]], spread: dict[str, tuple[float, float]],
                      terms: int, largest: float) -> dict[str, Tolerance]:
    """The tolerance of each output, (name, dtype), against its `answer`: the verifier's (verify.*, then benchmark.*,
    then derived from the reference's spread), which the benchmark's own check of an answer uses too, though it
    holds configurations to benchmark.* alone."""
    return derive_each(outputs, set_in_spec(spec, verifying=True), spread, terms, largest)


def derive(output: str, dtype: str, in_spec: dict[str, tuple[float, str]], seen: Observed) -> Tolerance:
    """The tolerance of `output` on inputs where the reference showed `seen`; `in_spec` from set_in_spec."""
    default_atol, default_rtol = DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))
    default = f"the {dtype} default"
    atol, rtol = [(default_atol, default)], [(default_rtol, default)]  # (value, why), the default first
    if seen.spread > 0:
        atol.append((SPREAD_MARGIN * seen.spread, f"{SPREAD_MARGIN} x that"))
        if is_float(dtype):
            eps = float_info(dtype).eps
            atol.append((eps * seen.terms * seen.largest, f"eps x {seen.terms} terms x max|x| {seen.largest:.3g}"))
            rtol.append((2 * eps * math.sqrt(seen.terms), f"2 eps x sqrt({seen.terms} terms)"))

    def chosen(part: str, candidates: list[tuple[float, str]]) -> tuple[float, str]:
        if part in in_spec:
            return in_spec[part][0], f"from {in_spec[part][1]}"
        return max(candidates, key=lambda candidate: candidate[0])  # on a tie, the earlier

    (atol_value, atol_why), (rtol_value, rtol_why) = chosen("atol", atol), chosen("rtol", rtol)
    if seen.spread > 0:
        origin = f"the reference differs from itself by up to {seen.spread:.3g} over {seen.runs} runs"
    else:
        origin = "the reference repeats itself exactly"
    reason = (f"{default}: {origin}" if atol_why == rtol_why == default
              else f"{origin}: atol {atol_why}, rtol {rtol_why}")
    return Tolerance(output=output, atol=atol_value, rtol=rtol_value, spread=seen.spread, spread_rel=seen.spread_rel,
                     reason=reason)
