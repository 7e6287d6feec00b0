"""When to stop timing a configuration, and what its samples say: pure functions, no GPU.

A configuration is timed until the 95% confidence interval of its mean is within `ci_target` of the
mean (after at least `min_samples`), or `max_samples` are taken. Two samples that are both `abandon_factor`
times slower than the best time so far end it early: more samples cannot make it the best. Two, not one: a single
launch can come out slow on its own (one of four block sizes of vector_add ran 2.4 times the others once on the
H100), and judged on it the configuration, the best perhaps, would be dropped. The checked launch
before the samples is never judged: it runs cold, loading the module (CUDA loads a kernel lazily, at its first
launch), which for a kernel of 20 us takes 5 to 25 times the kernel itself on the H100.
"""
import math
import statistics
from dataclasses import dataclass
from enum import Enum

from shared.domain.spec import BenchmarkSpec

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom; beyond that the normal 1.96 is close enough.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


class Next(Enum):
    SAMPLE = "sample"
    DONE = "done"
    ABANDON = "abandon"


@dataclass(frozen=True)
class SamplingPolicy:
    min_samples: int = 3
    max_samples: int = 7
    ci_target: float = 0.02
    abandon_factor: float = 1.25


@dataclass(frozen=True)
class Stats:
    median_ms: float
    min_ms: float
    mean_ms: float
    stddev_ms: float
    ci95_ms: float  # half-width of the 95% confidence interval of the mean; inf for one sample


def summarize(samples_ms: list[float]) -> Stats:
    n = len(samples_ms)
    mean = statistics.fmean(samples_ms)
    stddev = statistics.stdev(samples_ms) if n > 1 else 0.0
    ci = _t95(n - 1) * stddev / math.sqrt(n) if n > 1 else math.inf
    return Stats(median_ms=statistics.median(samples_ms), min_ms=min(samples_ms), mean_ms=mean, stddev_ms=stddev,
                 ci95_ms=ci)


def _t95(degrees_of_freedom: int) -> float:
    return _T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T95) else 1.96


def policy_of(bench: BenchmarkSpec) -> SamplingPolicy:
    return SamplingPolicy(bench.min_samples, bench.iterations, bench.ci_target, bench.abandon_factor)


ABANDON_AFTER = 2  # samples, each slower than abandon_factor times the best, that end a configuration


def next_step(samples_ms: list[float], best_ms: float | None, policy: SamplingPolicy) -> Next:
    if not samples_ms:
        return Next.SAMPLE
    if best_ms is not None and len(samples_ms) >= ABANDON_AFTER and min(samples_ms) > policy.abandon_factor * best_ms:
        return Next.ABANDON
    n = len(samples_ms)
    if n >= policy.max_samples:
        return Next.DONE
    if n >= policy.min_samples:
        stats = summarize(samples_ms)
        if stats.ci95_ms <= policy.ci_target * stats.mean_ms:
            return Next.DONE
    return Next.SAMPLE


def speedup_interval(old_ms: list[float], new_ms: list[float],
                     confidence: float = 0.95) -> tuple[float, tuple[float, float] | None]:
    """How many times faster `new` is than `old` from paired samples (timed in turn, pair i one after the
    other), and the `confidence` interval of that ratio; None with too few pairs to bound a median so (5 or
    fewer at 95%).

    The median of the pairs' ratios old_i / new_i, and the distribution-free interval of that median (the
    sign test's: order statistics k and n+1-k of the sorted ratios). Pairing removes the drift both kernels
    share; the median and its interval also ignore the odd pair a clock change or an interrupt disturbed,
    where one such pair widens a t-interval of the mean (seen on the H100: [0.933, 1.411] for a 1.15x rewrite)."""
    ratios = sorted(o / n for o, n in zip(old_ms, new_ms))
    k = _median_rank(len(ratios), (1 - confidence) / 2)
    if k is None:
        return statistics.median(ratios), None
    return statistics.median(ratios), (ratios[k - 1], ratios[len(ratios) - k])


def _median_rank(n: int, tail: float) -> int | None:
    """The largest k with P(Binomial(n, 1/2) < k) <= tail: order statistics k and n+1-k bound the median with
    at least 1 - 2 tail confidence. None when n is too small for any k."""
    k, below = 0, 0.0
    while True:
        below += math.comb(n, k) / 2 ** n
        if below > tail:
            return k or None
        k += 1


def looks(pairs: int, max_pairs: int) -> list[int]:
    """The pair counts at which a comparison may stop: `pairs`, then doubling, up to `max_pairs`. Looking
    after every pair instead, and stopping as soon as an interval cleared the bar, kept steps that did not
    clear it about five times as often as a 95% interval promises (simulated: 11% at a true speedup equal to
    the bar, against 1.4% for a fixed 120 pairs)."""
    found = [pairs]
    while found[-1] < max_pairs:
        found.append(min(2 * found[-1], max_pairs))
    return found


def look_confidence(pairs: int, max_pairs: int) -> float:
    """Each look's interval confidence, so that all of them together hold at 95% (Bonferroni): the interval a
    comparison records, whichever look it stopped at."""
    return 1 - 0.05 / len(looks(pairs, max_pairs))


def settled(old_ms: list[float], new_ms: list[float], bar: float, confidence: float) -> bool:
    """The paired samples decide against `bar`: their interval lies wholly above it or wholly below it, so
    more pairs would not change whether the candidate clears it."""
    _, interval = speedup_interval(old_ms, new_ms, confidence)
    return interval is not None and (interval[0] > bar or interval[1] < bar)
