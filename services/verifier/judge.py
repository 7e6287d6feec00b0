"""From what the device found in a candidate's two runs to a verdict: pure, so every rule is tested on CPU.

The checks run in a fixed order, the first failing one names the rejection: memory written outside the
arrays, inputs changed, outputs left unwritten (in either run: a second run that skips work betrays a
cached result), two runs on the same inputs that disagree (a race), NaN or Inf where the reference is
finite, and finally values beyond tolerance (each output's own, shared/domain/tolerance.py: the reference's
runs decide it with the spec, so it comes with every verdict).
"""
from dataclasses import dataclass, replace

from services.verifier.compare import Difference, OutputCheck
from shared.domain.events import Tolerance
from shared.domain.spec import KernelSpec

# Every reason a candidate can be rejected for, in the order they are looked for.
CHECKS = ("compile", "signature", "launch", "timeout", "crashed", "out_of_bounds", "input_modified", "unwritten",
          "nondeterministic", "not_finite", "mismatch")


@dataclass(frozen=True)
class Run:
    guard_violations: list[str]  # "changed 4 guard bytes after the end of c ...", ...
    inputs_modified: list[str]  # "a (12 bytes changed, the first at byte 40)", ...
    outputs: dict[str, OutputCheck]  # by output argument


@dataclass(frozen=True)
class Verdict:
    check: str | None  # None: passed
    reason: str
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    tolerances: tuple[Tolerance, ...] = ()  # per output, what its values were compared with

    @property
    def passed(self) -> bool:
        return self.check is None


def judge(spec: KernelSpec, runs: list[Run], disagreement: dict[str, Difference],
          tolerances: dict[str, Tolerance]) -> Verdict:
    """`disagreement`: the second run's outputs against the first's; every comparison made with `tolerances`."""
    verdict = _first_failure(spec, runs, disagreement, tolerances)
    return replace(verdict, tolerances=tuple(tolerances[arg.name] for arg in spec.output_args))


def _first_failure(spec: KernelSpec, runs: list[Run], disagreement: dict[str, Difference],
                   tolerances: dict[str, Tolerance]) -> Verdict:
    for number, run in enumerate(runs, start=1):
        if run.guard_violations:
            return Verdict("out_of_bounds", f"run {number}: " + "; ".join(run.guard_violations))
        if run.inputs_modified:
            return Verdict("input_modified", f"run {number} changed its input(s) {', '.join(run.inputs_modified)}, "
                                             "which the kernel must only read")
    for number, run in enumerate(runs, start=1):
        found = _first(spec, lambda name: run.outputs[name].unwritten)
        if found:
            name, d = found
            return Verdict("unwritten", f"run {number} left {d.count} of {d.size} elements of {name} unwritten (they "
                                        f"still hold the poison every run starts with), the first {d.example}")
    found = _first(spec, lambda name: disagreement.get(name, _NONE))
    if found:
        name, d = found
        tolerance = tolerances[name]
        return Verdict("nondeterministic", f"two runs on the same inputs disagree beyond atol {tolerance.atol:g} + "
                                           f"rtol {tolerance.rtol:g} x |run 1| at {d.count} of {d.size} elements of "
                                           f"{name} (a race?), the first {d.example} (run 2 against run 1)",
                       d.max_abs, d.max_rel)
    run = runs[0]
    found = _first(spec, lambda name: run.outputs[name].not_finite)
    if found:
        name, d = found
        return Verdict("not_finite", f"{d.count} elements of {name} are NaN or Inf where the reference is finite, "
                                     f"the first {d.example}")
    worst_abs = worst_rel = 0.0
    for arg in spec.output_args:
        tolerance = tolerances[arg.name]
        d = run.outputs[arg.name].mismatch
        if d.count:
            return Verdict("mismatch", f"{d.count} of {d.size} elements of {arg.name} differ beyond atol "
                                       f"{tolerance.atol:g} + rtol {tolerance.rtol:g} x |ref| ({tolerance.reason}; "
                                       f"largest absolute error {d.max_abs:.3g}, relative {d.max_rel:.3g}), the "
                                       f"first {d.example}", d.max_abs, d.max_rel)
        worst_abs, worst_rel = max(worst_abs, d.max_abs), max(worst_rel, d.max_rel)
    return Verdict(None, "matches the reference", worst_abs, worst_rel)


_NONE = Difference(count=0, size=0)


def _first(spec: KernelSpec, difference_of) -> tuple[str, Difference] | None:
    """The first output argument whose `difference_of(name)` counts something, with that difference."""
    for arg in spec.output_args:
        difference = difference_of(arg.name)
        if difference.count:
            return arg.name, difference
    return None
