"""Which inputs a candidate is tried on: the spec's sizes with fresh seeds, then sizes that are not
multiples of any block size (n-1 and a prime below it), each trial with a seed of its own, recorded."""
import zlib
from dataclasses import dataclass

from shared.spec import KernelSpec


@dataclass(frozen=True)
class Trial:
    label: str  # e.g. "spec size, seed 2" or "n=4093"
    sizes: dict[str, int]
    seed: int


def plan_trials(spec: KernelSpec) -> list[Trial]:
    base = spec.benchmark.seed
    trials = [Trial(f"spec sizes #{i + 1}", dict(spec.sizes), _seed(base, "spec", i)) for i in range(spec.verify.seeds)]
    if spec.verify.odd_sizes:
        for name, n in spec.sizes.items():
            for odd in dict.fromkeys(v for v in (n - 1, prime_below(n - 1)) if v and v > 0 and v != n):
                trials.append(Trial(f"{name}={odd}", {**spec.sizes, name: odd}, _seed(base, name, odd)))
    return trials


def prime_below(n: int) -> int | None:
    """The largest prime < n, or None below 3."""
    for candidate in range(n - 1, 1, -1):
        if all(candidate % d for d in range(2, int(candidate ** 0.5) + 1)):
            return candidate
    return None


def _seed(base: int, *parts: object) -> int:
    """A fresh seed per trial, derived so that the same spec always gets the same trials."""
    return zlib.crc32("/".join(map(str, (base, *parts))).encode())
