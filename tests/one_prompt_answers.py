"""A one_prompt request answered by the real generator, for tests that check what a scripted model answer
becomes: the events a job has when its rewrite is asked for, then the generator's handler."""
from uuid import uuid4

from services.generator.handlers import generate
from services.planner.strategies.one_prompt import STEP
from shared.domain.events import BaselineMeasured, CandidateGenerated, GenerationRequested, JobSubmitted
from shared.domain.projections import job_stream
from shared.domain.spec import KernelSpec
from tests.fakes import RecordingBus


def generated(store, settings, spec: KernelSpec) -> CandidateGenerated:
    """The one_prompt request of a fresh job, answered by the generator through the Messages API."""
    stream = job_stream(uuid4().hex[:12])
    baseline = BaselineMeasured(stream_id=stream, request_id=uuid4(), device="GPU", params=spec.baseline_params(),
                                grid=(1, 1, 1), block=(256, 1, 1), samples_ms=[1.0], median_ms=1.0)
    request = GenerationRequested(stream_id=stream, queue="generator", kind="rewrite", step=STEP, candidate_id=STEP.id)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec), baseline, request], expected_version=0)
    generate(store, RecordingBus(), stream.split("-", 1)[1], request.event_id, settings)
    answer = store.read_stream(stream)[-1]
    assert isinstance(answer, CandidateGenerated), getattr(answer, "reason", answer)
    return answer
