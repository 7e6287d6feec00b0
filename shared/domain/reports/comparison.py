"""Two runs of the same kernels side by side: what got faster, what got slower, and whether the change is
more than noise, by a threshold on the change and a rank test on the recorded samples."""
from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from shared.domain.reports.results import KernelResult

DEFAULT_THRESHOLD_PERCENT = 5.0  # a smaller change is noise for kernel timings, whatever a test says
DEFAULT_ALPHA = 0.05
MIN_SAMPLES_FOR_TEST = 4  # below this on either side the rank test cannot reach p < 0.05


class RunEntry(BaseModel):
    """One kernel's time in a run, with the samples it is the median of."""

    model_config = ConfigDict(frozen=True)
    kernel: str
    job_id: str
    time_ms: float
    samples_ms: list[float]
    device: str | None = None
    replay: bool = False


class Run(BaseModel):
    """A set of kernel timings: one job, the jobs submitted under one run name, or a file exported earlier."""

    model_config = ConfigDict(frozen=True)
    name: str
    metric: str = Field(description="best: each kernel's best version; baseline: the kernels as submitted")
    kernels: dict[str, RunEntry]


def run_of(name: str, results: Iterable[KernelResult], metric: str = "best") -> Run:
    """The run of these results; a kernel measured by several jobs counts with its latest."""
    if metric not in ("best", "baseline"):
        raise ValueError(f"metric {metric!r}: use best (each kernel's best version) or baseline (as submitted)")
    kernels = {}
    for result in results:
        measured = result.best if metric == "best" else result.baseline
        if measured is not None:
            kernels[result.kernel] = RunEntry(kernel=result.kernel, job_id=result.job_id, time_ms=measured.median_ms,
                                              samples_ms=measured.samples_ms, device=result.device,
                                              replay=result.replay)
    return Run(name=name, metric=metric, kernels=kernels)


class ChangeType(StrEnum):
    IMPROVEMENT = "IMPROVEMENT"
    REGRESSION = "REGRESSION"
    NO_CHANGE = "NO_CHANGE"
    NEW = "NEW"
    REMOVED = "REMOVED"


class KernelComparison(BaseModel):
    model_config = ConfigDict(frozen=True)
    kernel: str
    baseline_time_ms: float | None
    current_time_ms: float | None
    change_ms: float | None
    change_percent: float | None = Field(description="positive: slower than the baseline")
    change_type: ChangeType
    is_significant: bool
    p_value: float | None = Field(description="two-sided Mann-Whitney U on the samples; none with too few")
    test: str = Field(description="how significance was decided")


class ComparisonSummary(BaseModel):
    model_config = ConfigDict(frozen=True)
    total: int
    regressions_count: int
    improvements_count: int
    unchanged_count: int
    new_count: int
    removed_count: int
    baseline_total_ms: float = Field(description="summed over the kernels both runs measured")
    current_total_ms: float
    overall_change_percent: float | None


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True)
    baseline: str
    current: str
    metric: str
    threshold_percent: float
    alpha: float
    kernels: list[KernelComparison]
    summary: ComparisonSummary

    def get_summary(self) -> ComparisonSummary:
        return self.summary

    def get_regressions(self, top_n: int | None = None) -> list[KernelComparison]:
        """Regressions, the largest slow-down first."""
        found = sorted((k for k in self.kernels if k.change_type is ChangeType.REGRESSION),
                       key=lambda k: k.change_percent, reverse=True)
        return found[:top_n] if top_n is not None else found

    def get_improvements(self, top_n: int | None = None) -> list[KernelComparison]:
        """Improvements, the largest speed-up first."""
        found = sorted((k for k in self.kernels if k.change_type is ChangeType.IMPROVEMENT),
                       key=lambda k: k.change_percent)
        return found[:top_n] if top_n is not None else found


def compare_runs(baseline: Run, current: Run, threshold_percent: float = DEFAULT_THRESHOLD_PERCENT,
                 alpha: float = DEFAULT_ALPHA) -> Comparison:
    if baseline.metric != current.metric:
        raise ValueError(f"run {baseline.name!r} holds {baseline.metric} times and {current.name!r} holds "
                         f"{current.metric} times: compare like with like")
    names = sorted(set(baseline.kernels) | set(current.kernels))
    rows = [_compare(name, baseline.kernels.get(name), current.kernels.get(name), threshold_percent, alpha)
            for name in names]
    return Comparison(baseline=baseline.name, current=current.name, metric=baseline.metric,
                      threshold_percent=threshold_percent, alpha=alpha, kernels=rows, summary=_summary(rows))


def _compare(name: str, old: RunEntry | None, new: RunEntry | None, threshold: float, alpha: float) -> KernelComparison:
    if old is None or new is None:
        kind = ChangeType.NEW if old is None else ChangeType.REMOVED
        return KernelComparison(kernel=name, baseline_time_ms=old and old.time_ms, current_time_ms=new and new.time_ms,
                                change_ms=None, change_percent=None, change_type=kind, is_significant=False,
                                p_value=None, test="only one run measured it")
    change = new.time_ms - old.time_ms
    percent = 100 * change / old.time_ms
    p_value, test = None, f"threshold only: fewer than {MIN_SAMPLES_FOR_TEST} samples on a side"
    if min(len(old.samples_ms), len(new.samples_ms)) >= MIN_SAMPLES_FOR_TEST:
        from scipy.stats import mannwhitneyu  # here: importing scipy costs every kforge process a second

        p_value = float(mannwhitneyu(old.samples_ms, new.samples_ms, alternative="two-sided").pvalue)
        test = f"|change| >= {threshold:g}% and Mann-Whitney U p < {alpha:g}"
    significant = abs(percent) >= threshold and (p_value is None or p_value < alpha)
    kind = ChangeType.NO_CHANGE if not significant else ChangeType.REGRESSION if change > 0 else ChangeType.IMPROVEMENT
    return KernelComparison(kernel=name, baseline_time_ms=old.time_ms, current_time_ms=new.time_ms, change_ms=change,
                            change_percent=percent, change_type=kind, is_significant=significant, p_value=p_value,
                            test=test)


def _summary(rows: list[KernelComparison]) -> ComparisonSummary:
    def count(kind: ChangeType) -> int:
        return sum(1 for r in rows if r.change_type is kind)

    both = [r for r in rows if r.change_ms is not None]
    old_total = sum(r.baseline_time_ms for r in both)
    new_total = sum(r.current_time_ms for r in both)
    return ComparisonSummary(total=len(rows), regressions_count=count(ChangeType.REGRESSION),
                             improvements_count=count(ChangeType.IMPROVEMENT),
                             unchanged_count=count(ChangeType.NO_CHANGE), new_count=count(ChangeType.NEW),
                             removed_count=count(ChangeType.REMOVED), baseline_total_ms=old_total,
                             current_total_ms=new_total,
                             overall_change_percent=100 * (new_total - old_total) / old_total if old_total else None)
