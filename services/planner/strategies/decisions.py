"""What a strategy can decide: ask the generator something, skip a step, or finish."""
from dataclasses import dataclass
from typing import Protocol

from shared.domain.spec import StrategySpec, TuningStep
from shared.domain.steps import Optimisation


@dataclass(frozen=True)
class Ask:
    """A request to the generator: plan | replan | validate | breakdown | rewrite."""

    kind: str
    step: TuningStep | None = None
    focus: str | None = None


@dataclass(frozen=True)
class Skip:
    step: TuningStep
    reason: str


@dataclass(frozen=True)
class Finish:
    reason: str
    failed: bool = False  # nothing could even be tried (a plan that failed)


Decision = Ask | Skip | Finish


class Strategy(Protocol):
    def decide(self, optimisation: Optimisation, spec: StrategySpec) -> Decision:
        """Called when no request is pending and no step is past validation; `optimisation.current` is then
        None or a step whose status is valid (validated, not yet executed)."""
        ...
