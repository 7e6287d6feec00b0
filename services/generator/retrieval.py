"""Earlier accepted optimisations of similar kernels, read back from the event store for prompts.

Similarity is the Jaccard index of the identifier sets of two submitted kernels: cheap, deterministic
and good at "this is another elementwise kernel over float arrays" without an embedding service.
"""
import re
from dataclasses import dataclass

from shared.adapters.eventstore import EventStore
from shared.domain.events import CandidateGenerated, JobSubmitted, StepAccepted

TOKENS = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Example:
    kernel_name: str
    similarity: float
    step_id: str
    description: str
    old_ms: float
    new_ms: float
    source: str  # the accepted rewrite


def _tokens(source: str) -> set[str]:
    return set(TOKENS.findall(source))


def similarity(a: str, b: str) -> float:
    ta, tb = _tokens(a), _tokens(b)
    return len(ta & tb) / len(ta | tb) if ta | tb else 0.0


def similar_optimisations(store: EventStore, source: str, k: int, exclude_stream: str, tenant: str) -> list[Example]:
    """The k accepted steps of `tenant`'s other jobs whose submitted kernels are most like `source`, best
    first. Only the tenant's own: a prompt quoting them shows their code to whoever reads its job."""
    if k == 0:
        return []
    events = store.read_types(["JobSubmitted", "CandidateGenerated", "StepAccepted"], stream_prefix="job-")
    submitted = {e.stream_id: e.spec for e in events
                 if isinstance(e, JobSubmitted) and e.stream_id != exclude_stream and e.tenant == tenant}
    generated = {(e.stream_id, e.candidate_id): e for e in events if isinstance(e, CandidateGenerated)}
    examples = []
    for accepted in (e for e in events if isinstance(e, StepAccepted) and e.stream_id in submitted):
        candidate = generated.get((accepted.stream_id, accepted.candidate_id))
        if candidate is None:
            continue
        spec = submitted[accepted.stream_id]
        examples.append(Example(kernel_name=spec.kernel_name, similarity=similarity(source, spec.source),
                                step_id=accepted.step_id, description=_description(candidate),
                                old_ms=accepted.old_time_ms, new_ms=accepted.new_time_ms,
                                source=candidate.candidate.source))
    examples.sort(key=lambda e: (-e.similarity, e.new_ms / e.old_ms))
    return examples[:k]


def _description(generated: CandidateGenerated) -> str:
    renamed = f" (parameters renamed: {generated.renames})" if generated.renames else ""
    return f"{generated.step_id} by {generated.provider}{renamed}"
