"""Which inputs a candidate is tried on: the spec's sizes with fresh seeds, then sizes that are not
multiples of any block size (n-1 and a prime below it), each trial with a seed of its own, recorded. A spec
with fixed `data` is tried at its own sizes only, where the files' arrays fit."""
import zlib
from dataclasses import dataclass

from shared.domain.spec import KernelSpec, ParamValue


@dataclass(frozen=True)
class Trial:
    label: str  # e.g. "spec size, seed 2" or "n=4093"
    sizes: dict[str, int]
    seed: int


def plan_trials(spec: KernelSpec) -> list[Trial]:
    base = spec.benchmark.seed
    seeds = spec.verify.seeds if spec.drawn_inputs else 1  # with every input fixed, each seed: the same trial
    trials = [Trial(f"spec sizes #{i + 1}", dict(spec.sizes), _seed(base, "spec", i)) for i in range(seeds)]
    if spec.verify.odd_sizes and not spec.sized_fixed_inputs:
        for name, n in spec.sizes.items():
            for odd in dict.fromkeys(v for v in (n - 1, prime_below(n - 1)) if v and v > 0 and v != n):
                trials.append(Trial(f"{name}={odd}", {**spec.sizes, name: odd}, _seed(base, name, odd)))
    return trials


def sizes_not_tried(spec: KernelSpec) -> str:
    """Why plan_trials leaves the odd sizes out although verify.odd_sizes asks for them, or ''."""
    if spec.verify.odd_sizes and spec.sized_fixed_inputs:
        return (f"odd sizes not tried: {', '.join(a.name for a in spec.sized_fixed_inputs)} has fixed data, which "
                "holds values at the spec's sizes only")
    return ""


def size_problem(spec: KernelSpec, params: dict[str, ParamValue]) -> str:
    """Why a configuration cannot run at `spec`'s sizes (a trial's), or '': an input's range holds no values
    there, or the launch cannot be worked out there (a grid or dynamic shared memory expression that fails, or
    gives a fraction of a byte, at an odd size)."""
    if empty := range_problem(spec):
        return empty
    try:
        spec.launch_geometry(params)
        spec.shared_memory_bytes(params)
    except (ValueError, ArithmeticError) as exc:  # ExpressionError is a ValueError
        return f"its launch cannot be worked out there: {exc}"
    return ""


def range_problem(spec: KernelSpec) -> str:
    """Why an input's range holds no values at `spec`'s sizes (a trial's: ranges follow the sizes), or ''."""
    for i, arg in enumerate(spec.args):
        if arg.range is not None:
            try:
                spec.value_range(arg)
            except ValueError as exc:
                return f"args[{i}].range: {exc}"
    return ""


def prime_below(n: int) -> int | None:
    """The largest prime < n, or None below 3. Primes are dense (gaps below 2**64 are under 1,600), so
    stepping down with a Miller-Rabin test costs microseconds at any size, where trial division took hours."""
    return next((c for c in range(n - 1, 1, -1) if _is_prime(c)), None)


# With these bases Miller-Rabin is exact for every n < 3.3 * 10**24 (Sorenson and Webster, 2015).
_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in _WITNESSES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _WITNESSES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _seed(base: int, *parts: object) -> int:
    """A fresh seed per trial, derived so that the same spec always gets the same trials."""
    return zlib.crc32("/".join(map(str, (base, *parts))).encode())
