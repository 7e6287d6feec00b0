"""What tuning searched, in the shapes the plots draw: each candidate's space with every configuration's
outcome in the order it was recorded, the best time so far along the search, and how much of the time each
tune parameter explains."""
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from shared.domain.events import CandidateGenerated, ConfigFailed, ConfigMeasured, Event, JobSubmitted, TuningRequested
from shared.domain.spec import ParamValue
from shared.domain.steps import SUBMITTED

Values = tuple[ParamValue, ...]


@dataclass(frozen=True)
class Outcome:
    """One configuration evaluated: its median time in ms, or None where it failed (compile, launch, output…).
    An abandoned one was timed once only, being clearly slower than the best so far."""

    params: dict[str, ParamValue]
    time_ms: float | None
    abandoned: bool = False

    def values(self, names: Sequence[str]) -> Values:
        return tuple(self.params.get(name) for name in names)


@dataclass(frozen=True)
class SearchedSpace:
    """One candidate's space (the submitted kernel's: candidate "submitted") and what its search found."""

    candidate_id: str
    axes: dict[str, list[ParamValue]]  # each tune parameter's values, in the order of tune_params
    outcomes: list[Outcome]  # in the order they were recorded

    @property
    def measured(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.time_ms is not None]

    @property
    def best_ms(self) -> float | None:
        return min((o.time_ms for o in self.measured), default=None)

    def best_by(self, names: Sequence[str]) -> dict[Values, float]:
        """The best time among the configurations that share each combination of these parameters' values."""
        best: dict[Values, float] = {}
        for outcome in self.measured:
            key = outcome.values(names)
            best[key] = min(best.get(key, outcome.time_ms), outcome.time_ms)
        return best

    def failed_only(self, names: Sequence[str]) -> set[Values]:
        """The combinations of these parameters' values where every configuration evaluated failed."""
        return {o.values(names) for o in self.outcomes if o.time_ms is None} - set(self.best_by(names))

    def explained_share(self, name: str) -> float:
        """The share of the measured times' variance between this parameter's values (eta squared): 1 when
        the parameter alone decides the time, 0 when it makes no difference or nothing varies."""
        times = [o.time_ms for o in self.measured]
        if len(times) < 2:
            return 0.0
        mean = fmean(times)
        total = sum((t - mean) ** 2 for t in times)
        groups: dict[ParamValue, list[float]] = {}
        for outcome in self.measured:
            groups.setdefault(outcome.params.get(name), []).append(outcome.time_ms)
        between = sum(len(g) * (fmean(g) - mean) ** 2 for g in groups.values())
        return between / total if total > 0 else 0.0

    def heatmap_pair(self) -> tuple[str, str] | None:
        """The two parameters with several values that explain the most of the time, in tune_params order
        (the first two on a tie); None with fewer than two such parameters."""
        varying = [name for name, values in self.axes.items() if len(values) > 1]
        if len(varying) < 2:
            return None
        top = sorted(varying, key=self.explained_share, reverse=True)[:2]  # a stable sort keeps ties in order
        first, second = sorted(top, key=varying.index)
        return first, second


def best_so_far(times: Sequence[float | None]) -> list[float | None]:
    """The running best of times in the order evaluated: None until a time is measured, and a failed
    configuration (None) keeps the best it found."""
    running, best = [], None
    for time in times:
        if time is not None and (best is None or time < best):
            best = time
        running.append(best)
    return running


def searched_spaces(events: Sequence[Event]) -> list[SearchedSpace]:
    """Every candidate's searched space, in the order its tuning was first requested."""
    submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
    if submitted is None:
        return []
    spaces = {SUBMITTED: submitted.spec.tune_params}
    for e in events:
        if isinstance(e, CandidateGenerated) and e.candidate.tune_params is not None:
            spaces[e.candidate_id] = e.candidate.tune_params
    candidate_of = {e.event_id: e.candidate_id for e in events if isinstance(e, TuningRequested)}
    outcomes: dict[str, list[Outcome]] = {c: [] for c in candidate_of.values()}
    for e in events:
        if isinstance(e, ConfigMeasured | ConfigFailed) and e.request_id in candidate_of:
            outcome = (Outcome(e.params, e.median_ms, e.abandoned) if isinstance(e, ConfigMeasured)
                       else Outcome(e.params, None))
            outcomes[candidate_of[e.request_id]].append(outcome)
    return [SearchedSpace(candidate, _axes(spaces.get(candidate, submitted.spec.tune_params), found), found)
            for candidate, found in outcomes.items()]


def _axes(tune_params: dict[str, list[ParamValue]], outcomes: list[Outcome]) -> dict[str, list[ParamValue]]:
    """tune_params' values, then any other value a configuration was recorded with: the plots draw whatever
    was recorded, even by a kforge whose spaces were read differently."""
    axes = {name: list(values) for name, values in tune_params.items()}
    for outcome in outcomes:
        for name, value in zip(axes, outcome.values(list(axes))):
            if value not in axes[name]:
                axes[name].append(value)
    return axes
