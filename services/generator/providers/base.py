"""The one interface every generator provider serves: a prompt in, an answer's text out.

A prompt carries its prose (what an LLM reads) and the structured facts it was written from (what the
offline rules read), so every provider answers the same request and is recorded the same way.
"""
from dataclasses import dataclass, field
from typing import Protocol

from shared.domain.spec import CandidateSpec, KernelSpec, TuningStep

KINDS = ("plan", "replan", "validate", "breakdown", "rewrite")


@dataclass(frozen=True)
class Attempt:
    """A step tried earlier in the job and how it went: what a refinement should not repeat."""

    step_id: str
    description: str
    outcome: str  # accepted | discarded | skipped | invalid
    detail: str  # e.g. "0.301 ms -> 0.284 ms" or the reason it was discarded
    source: str | None = None  # the candidate's source, when one was generated


@dataclass(frozen=True)
class Prompt:
    kind: str  # one of KINDS
    system: str
    text: str
    spec: KernelSpec  # the submission: the original kernel, its arguments and sizes
    current: CandidateSpec  # the best kernel so far, which a rewrite starts from
    lineage: tuple[str, ...] = ()  # ids of the steps whose rewrites `current` carries
    step: TuningStep | None = None  # the step to validate, break down or execute
    focus: str | None = None  # SLOW | MODERATE | GOOD: what a refinement should concentrate on
    history: tuple[Attempt, ...] = ()  # the steps tried so far in this job, in order


@dataclass(frozen=True)
class Answer:
    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    attempts: tuple[str, ...] = field(default=())  # why earlier attempts were retried


class ProviderFailed(RuntimeError):
    """The provider gave no usable answer; the message says why and is recorded with the call."""

    def __init__(self, reason: str, attempts: tuple[str, ...] = ()):
        super().__init__(reason)
        self.attempts = attempts


class Provider(Protocol):
    name: str

    def complete(self, prompt: Prompt) -> Answer: ...
