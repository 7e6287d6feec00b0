"""When to stop timing a configuration, and what its samples say: pure functions, no GPU.

A configuration is timed until the 95% confidence interval of its mean is within `ci_target` of the
mean (after at least `min_samples`), or `max_samples` are taken. One sample that is `abandon_factor`
times slower than the best time so far ends it early: more samples cannot make it the best.
"""
import math
import statistics
from dataclasses import dataclass
from enum import Enum

from shared.spec import BenchmarkSpec

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


def abandoned_on_check(check_ms: float, best_ms: float | None, policy: SamplingPolicy) -> bool:
    """The checked launch runs cold (module load, first touch): only a far slower one ends the configuration."""
    return best_ms is not None and check_ms > 2 * policy.abandon_factor * best_ms


def next_step(samples_ms: list[float], best_ms: float | None, policy: SamplingPolicy) -> Next:
    if not samples_ms:
        return Next.SAMPLE
    if best_ms is not None and min(samples_ms) > policy.abandon_factor * best_ms:
        return Next.ABANDON
    n = len(samples_ms)
    if n >= policy.max_samples:
        return Next.DONE
    if n >= policy.min_samples:
        stats = summarize(samples_ms)
        if stats.ci95_ms <= policy.ci_target * stats.mean_ms:
            return Next.DONE
    return Next.SAMPLE


def speedup_interval(old_ms: list[float], new_ms: list[float]) -> tuple[float, tuple[float, float] | None]:
    """How many times faster `new` is than `old` from paired samples (timed in turn, pair i one after the
    other), and the 95% interval of that ratio; None with fewer than two pairs.

    A log-ratio t-interval: d_i = ln(old_i / new_i) are taken as independent and roughly normal (pairing
    removes the drift both kernels share), so mean(d) +- t95 * sd(d) / sqrt(n) exponentiated bounds the
    geometric mean ratio, the point estimate returned."""
    logs = [math.log(o / n) for o, n in zip(old_ms, new_ms)]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(centre), None
    half = _t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(centre), (math.exp(centre - half), math.exp(centre + half))
