"""How far a job's searches have got, folded from its events: what `kforge tune` shows while it waits.

Each tuning requested (a candidate's space: the submitted kernel's is "submitted") counts its configurations
done against the number its search evaluates at most, keeps its fastest configuration and counts its rejections
by stage. It reads the events alone, their times included: what it shows of a job is the same wherever and
whenever it is folded.
"""
import itertools
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from shared.domain.events import (CandidateGenerated, ConfigFailed, ConfigMeasured, Event, JobSubmitted,
                                  TuningCompleted, TuningRequested)
from shared.domain.spec import MAX_THREADS_PER_BLOCK, CandidateSpec, KernelSpec
from shared.domain.steps import SUBMITTED



def configurations_to_search(spec: KernelSpec) -> int:
    """The most configurations a search of `spec`'s space evaluates: its Searchspace (the product of the
    tune_params lists, less those a restriction or the block's thread limit rules out), capped by
    `benchmark.search.max_fevals` for the strategies that take a budget (brute force always runs it all)."""
    names = list(spec.tune_params)
    blocks = [n for n in spec.block_size_names if n in spec.tune_params]
    size = sum(1 for values in itertools.product(*spec.tune_params.values())
               if _allowed(spec, dict(zip(names, values)), blocks))
    search = spec.benchmark.search
    return size if search.strategy == "brute_force" or not search.max_fevals else min(size, search.max_fevals)


def _allowed(spec: KernelSpec, config: dict, blocks: list[str]) -> bool:
    try:
        return math.prod(config[b] for b in blocks) <= MAX_THREADS_PER_BLOCK and spec.restrictions_hold(config)
    except (ArithmeticError, ValueError):  # an ExpressionError too: the search stops there, never evaluating it
        return False


@dataclass
class SpaceProgress:
    """One candidate's search: configurations done of `total`, its fastest, and its rejections by stage."""

    candidate_id: str
    total: int
    started_at: datetime  # when its tuning was requested
    last_at: datetime | None = None  # when its latest configuration was evaluated
    done: int = 0
    best: ConfigMeasured | None = None
    rejected: Counter[str] = field(default_factory=Counter)
    replay: bool = False  # outcomes were replayed from recordings, not measured here
    finished: bool = False

    def eta_s(self) -> float | None:
        """Seconds left after the latest configuration, at the rate from the request to it; None before a rate
        is known, 0 once finished. The worker's clock times both, whatever the clock of who reads them."""
        if self.finished or self.done >= self.total:
            return 0.0
        elapsed = (self.last_at - self.started_at).total_seconds() if self.last_at else 0.0
        if elapsed <= 0:
            return None
        return elapsed / self.done * (self.total - self.done)

    def add(self, outcome: ConfigMeasured | ConfigFailed) -> None:
        self.done += 1
        self.last_at = max(self.last_at or outcome.occurred_at, outcome.occurred_at)
        self.replay = self.replay or outcome.replay
        if isinstance(outcome, ConfigFailed):
            self.rejected[outcome.stage] += 1
        elif not outcome.abandoned and (self.best is None or outcome.median_ms < self.best.median_ms):
            self.best = outcome  # an abandoned configuration was timed once, as clearly slower than the best


@dataclass
class JobProgress:
    """Every search of a job, in the order requested; `current` is the one to show."""

    spaces: dict[str, SpaceProgress] = field(default_factory=dict)
    _submitted: KernelSpec | None = None
    _candidates: dict[str, CandidateSpec] = field(default_factory=dict)
    _space_of_request: dict[UUID, str] = field(default_factory=dict)  # TuningRequested id -> its candidate id

    @property
    def current(self) -> SpaceProgress | None:
        return next(reversed(self.spaces.values()), None)

    def add(self, event: Event) -> None:
        match event:
            case JobSubmitted(spec=spec):
                self._submitted = spec
            case CandidateGenerated(candidate_id=candidate, candidate=generated):
                self._candidates[candidate] = generated
            case TuningRequested(candidate_id=candidate) if self._submitted:
                self._space_of_request[event.event_id] = candidate
                if candidate not in self.spaces:  # the first shard of a space; the others share it
                    spec = self._space(candidate)
                    total = configurations_to_search(spec) if spec else 0
                    self.spaces[candidate] = SpaceProgress(candidate, total, event.occurred_at)
            case ConfigMeasured() | ConfigFailed() if event.request_id in self._space_of_request:
                self.spaces[self._space_of_request[event.request_id]].add(event)
            case TuningCompleted(candidate_id=candidate) if candidate in self.spaces:
                self.spaces[candidate].finished = True

    def _space(self, candidate: str) -> KernelSpec | None:
        """The spec whose space a tuning of `candidate` searches, as the benchmark builds it."""
        if candidate == SUBMITTED:
            return self._submitted
        generated = self._candidates.get(candidate)
        return self._submitted.for_candidate(generated) if generated else None


def fold(events: Iterable[Event]) -> JobProgress:
    progress = JobProgress()
    for event in events:
        progress.add(event)
    return progress
