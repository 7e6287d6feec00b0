"""From what a candidate's two runs left in memory to a verdict: pure, so every rule is tested on CPU.

The checks run in a fixed order, the first failing one names the rejection: memory written outside the
arrays, inputs changed, outputs left unwritten (in either run: a second run that skips work betrays a
cached result), two runs on the same inputs that disagree (a race), NaN or Inf where the reference is
finite, and finally values beyond tolerance.
"""
from dataclasses import dataclass

import numpy as np

from services.verifier.compare import Difference, beyond_tolerance, not_finite_where_reference_is, unwritten
from shared.spec import KernelSpec

# Every reason a candidate can be rejected for, in the order they are looked for.
CHECKS = ("compile", "signature", "launch", "timeout", "crashed", "out_of_bounds", "input_modified", "unwritten",
          "nondeterministic", "not_finite", "mismatch")


@dataclass(frozen=True)
class Run:
    outputs: dict[str, np.ndarray]
    guard_violations: list[str]  # "wrote 4 bytes after the end of c", ...
    inputs_modified: list[str]  # names of input arrays whose contents changed


@dataclass(frozen=True)
class Verdict:
    check: str | None  # None: passed
    reason: str
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0

    @property
    def passed(self) -> bool:
        return self.check is None


def judge(spec: KernelSpec, reference: dict[str, np.ndarray], runs: list[Run]) -> Verdict:
    for number, run in enumerate(runs, start=1):
        if run.guard_violations:
            return Verdict("out_of_bounds", f"run {number}: " + "; ".join(run.guard_violations))
        if run.inputs_modified:
            return Verdict("input_modified", f"run {number} changed its input(s) {', '.join(run.inputs_modified)}, "
                                             "which the kernel must only read")
    for number, run in enumerate(runs, start=1):
        found = _first(spec, lambda arg: unwritten(arg.name, run.outputs[arg.name], reference[arg.name]))
        if found:
            name, d = found
            return Verdict("unwritten", f"run {number} left {d.count} of {d.size} elements of {name} unwritten (they "
                                        f"still hold the poison every run starts with): {d.examples}")
    if len(runs) > 1:
        found = _first(spec, lambda arg: beyond_tolerance(arg.name, runs[1].outputs[arg.name], runs[0].outputs[arg.name],
                                                          *spec.verify_tolerance(arg.dtype)))
        if found:
            name, d = found
            return Verdict("nondeterministic", f"two runs on the same inputs disagree at {d.count} of {d.size} elements "
                                               f"of {name} (a race?): {d.examples}", d.max_abs, d.max_rel)
    run = runs[0]
    found = _first(spec, lambda arg: not_finite_where_reference_is(arg.name, run.outputs[arg.name], reference[arg.name]))
    if found:
        name, d = found
        return Verdict("not_finite", f"{d.count} elements of {name} are NaN or Inf where the reference is finite: "
                                     f"{d.examples}")
    worst_abs = worst_rel = 0.0
    for arg in spec.output_args:
        atol, rtol = spec.verify_tolerance(arg.dtype)
        d = beyond_tolerance(arg.name, run.outputs[arg.name], reference[arg.name], atol, rtol)
        if d.count:
            return Verdict("mismatch", f"{d.count} of {d.size} elements of {arg.name} differ beyond atol {atol:g} + "
                                       f"rtol {rtol:g} x |ref| (largest absolute error {d.max_abs:.3g}, relative "
                                       f"{d.max_rel:.3g}): {d.examples}", d.max_abs, d.max_rel)
        worst_abs, worst_rel = max(worst_abs, d.max_abs), max(worst_rel, d.max_rel)
    return Verdict(None, "matches the reference", worst_abs, worst_rel)


def _first(spec: KernelSpec, compare) -> tuple[str, Difference] | None:
    """The first output argument `compare(arg)` finds a difference in, with that difference."""
    for arg in spec.output_args:
        difference = compare(arg)
        if difference.count:
            return arg.name, difference
    return None
