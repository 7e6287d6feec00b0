"""The generator service end to end over a real SQLite store: requests answered by Claude through the
official SDK against a Messages API on loopback, by a replay of an earlier job, and what is recorded
when an answer is unusable or never comes."""
from uuid import uuid4

import pytest

from services.generator.handlers import generate
from shared.adapters.settings import Settings
from shared.domain.events import (BaselineMeasured, CandidateGenerated, GenerationFailed, GenerationRequested,
                                  GeneratorCalled, JobSubmitted, PlanProposed, StepAccepted, StepValidated)
from shared.domain.projections import job_stream
from shared.domain.spec import TuningStep
from tests.fakes import RecordingBus
from tests.messages_api import messages_api  # noqa: F401  (fixture)

STEP = TuningStep(id="unroll", description="unroll the loop by a tunable factor", tune_params={"unroll": [1, 2, 4]})
REWRITE = """Here is the rewrite.

```cuda
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * BLOCK_SIZE_X + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
```

```json
{"tune_params": {"block_size_x": [128, 256]}, "params": {"block_size_x": 128}}
```
"""


@pytest.fixture
def settings(messages_api, tmp_path):
    return Settings(KFORGE_HOME=str(tmp_path), ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=messages_api.url,
                    KFORGE_LLM_MODEL="claude-sonnet-4-6", KFORGE_LLM_MAX_RETRIES=2)


def start_job(store, spec, job_id=None, **generator):
    job_id = job_id or uuid4().hex[:12]
    spec = spec.model_validate({**spec.model_dump(), "strategy": {"name": "explicit"},
                                "generator": {"provider": "anthropic", **generator}})
    stream = job_stream(job_id)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec),
                          BaselineMeasured(stream_id=stream, request_id=uuid4(), device="GPU",
                                           params={"block_size_x": 256}, grid=(1, 1, 1), block=(256, 1, 1),
                                           samples_ms=[1.0], median_ms=1.0)], expected_version=0)
    return job_id


def ask(store, settings, job_id, kind, step=None):
    request = GenerationRequested(stream_id=job_stream(job_id), queue="generator", kind=kind, step=step,
                                  candidate_id=step.id if kind == "rewrite" and step else None)
    store.append(job_stream(job_id), [request], expected_version=None)
    bus = RecordingBus()
    generate(store, bus, job_id, request.event_id, settings)
    assert [m.task for m in bus.messages] == ["planner.catch_up"]
    answered = [e for e in store.read_stream(job_stream(job_id)) if getattr(e, "request_id", None) == request.event_id]
    return answered


def test_a_rewrite_is_recorded_with_its_transcript_and_its_names_fixed(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.answer(REWRITE, input_tokens=1200, output_tokens=300)

    call, generated = ask(store, settings, job, "rewrite", STEP)

    assert isinstance(call, GeneratorCalled) and isinstance(generated, CandidateGenerated)
    assert (call.provider, call.model, call.input_tokens, call.output_tokens) == ("anthropic", "claude-sonnet-4-6", 1200, 300)
    assert call.cost_usd == pytest.approx((1200 * 3 + 300 * 15) / 1e6)
    assert call.response == REWRITE and "unroll the loop by a tunable factor" in call.prompt
    assert "c[i] = a[i] + b[i]" in call.prompt  # the current kernel is in the prompt
    sent = messages_api.requests[0].body
    assert sent["model"] == "claude-sonnet-4-6" and sent["messages"][0]["content"] == call.prompt
    # The code said BLOCK_SIZE_X; block_size_x sets the launch, so the code is renamed to it.
    assert generated.renames == {"BLOCK_SIZE_X": "block_size_x"}
    assert "blockIdx.x * block_size_x" in generated.candidate.source
    assert generated.candidate.tune_params == {"block_size_x": [128, 256]}
    assert generated.candidate.params == {"block_size_x": 128}
    assert generated.candidate_id == "unroll"


def test_an_answer_without_code_is_a_recorded_failure(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.answer("I would unroll the loop, but here is no code.")

    call, failed = ask(store, settings, job, "rewrite", STEP)

    assert call.response.startswith("I would unroll") and call.error is None
    assert isinstance(failed, GenerationFailed) and failed.step_id == "unroll"
    assert "no ```cuda block" in failed.reason


def test_a_malformed_plan_is_a_recorded_failure(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.answer('```json\n{"steps": [{"id": "tile", "description": "tile it",}]}\n```')

    _, failed = ask(store, settings, job, "plan")

    assert failed.kind == "plan" and "not valid JSON" in failed.reason


def test_a_rewrite_naming_an_unknown_kernel_is_refused(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.answer(REWRITE.replace("void vector_add", "void vector_add_fast"))

    _, failed = ask(store, settings, job, "rewrite", STEP)

    assert "not a usable candidate" in failed.reason and "vector_add_fast" in failed.reason


def test_rate_limits_are_retried_and_the_retries_recorded(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.rate_limited(retry_after=0)
    messages_api.answer('```json\n{"valid": true, "reason": "a tunable unroll factor"}\n```')

    call, validated = ask(store, settings, job, "validate", STEP)

    assert isinstance(validated, StepValidated) and validated.valid and validated.reason == "a tunable unroll factor"
    assert len(call.attempts) == 1 and "429" in call.attempts[0]
    assert len(messages_api.requests) == 2


def test_a_refused_key_is_recorded_without_retrying(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.unauthorized()

    call, failed = ask(store, settings, job, "plan")

    assert call.error and "ANTHROPIC_API_KEY" in call.error and call.response == ""
    assert "ANTHROPIC_API_KEY" in failed.reason and len(messages_api.requests) == 1


def test_no_key_with_provider_anthropic_says_how_to_fix_it(store, vector_add_spec, tmp_path):
    job = start_job(store, vector_add_spec)
    (failed,) = ask(store, Settings(KFORGE_HOME=str(tmp_path), ANTHROPIC_API_KEY=None), job, "plan")
    assert "set ANTHROPIC_API_KEY" in failed.reason


def test_a_redelivered_request_calls_the_provider_once(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.answer('```json\n{"steps": [{"id": "tile", "description": "tile it"}]}\n```')
    request = GenerationRequested(stream_id=job_stream(job), queue="generator", kind="plan")
    store.append(job_stream(job), [request], expected_version=None)

    for _ in range(2):
        generate(store, RecordingBus(), job, request.event_id, settings)

    plans = [e for e in store.read_stream(job_stream(job)) if isinstance(e, PlanProposed)]
    assert len(plans) == 1 and [s.id for s in plans[0].steps] == ["tile"] and len(messages_api.requests) == 1


def test_planned_ids_already_taken_get_a_suffix(store, settings, messages_api, vector_add_spec):
    job = start_job(store, vector_add_spec)
    messages_api.answer('```json\n{"steps": [{"id": "block_size"}, {"id": "tile"}, {"id": "tile"}]}\n```')
    _, plan = ask(store, settings, job, "plan")
    # explicit's default steps already hold block_size
    assert [s.id for s in plan.steps] == ["block_size-2", "tile", "tile-2"]


def test_replay_answers_with_an_earlier_jobs_transcript(store, settings, messages_api, vector_add_spec):
    recorded = start_job(store, vector_add_spec)
    messages_api.answer(REWRITE)
    _, original = ask(store, settings, recorded, "rewrite", STEP)

    again = start_job(store, vector_add_spec, provider="replay", replay_job=recorded)
    call, replayed = ask(store, settings, again, "rewrite", STEP)
    (missing,) = [e for e in ask(store, settings, again, "rewrite", STEP) if isinstance(e, GenerationFailed)]

    assert call.provider == "replay" and call.model == "anthropic:claude-sonnet-4-6"
    assert replayed.candidate == original.candidate
    assert "holds 1 answer(s) to rewrite of step unroll; this is request 2" in missing.reason
    assert len(messages_api.requests) == 1  # the replay never called the API


def test_prompts_quote_accepted_optimisations_of_similar_kernels(store, settings, messages_api, vector_add_spec):
    earlier = start_job(store, vector_add_spec)
    messages_api.answer(REWRITE)
    _, generated = ask(store, settings, earlier, "rewrite", STEP)
    store.append(job_stream(earlier), [StepAccepted(stream_id=job_stream(earlier), step_id="unroll",
                                                    candidate_id="unroll", old_time_ms=1.0, new_time_ms=0.8,
                                                    best_params={"block_size_x": 128}, speedup=1.25,
                                                    speedup_ci=(1.2, 1.3))], expected_version=None)
    quoted, unquoted = start_job(store, vector_add_spec, rag_k=1), start_job(store, vector_add_spec, rag_k=0)
    for _ in range(2):
        messages_api.answer('```json\n{"steps": []}\n```')

    (call, _), (plain, _) = ask(store, settings, quoted, "plan"), ask(store, settings, unquoted, "plan")

    assert "Optimisations accepted earlier on similar kernels" in call.prompt
    assert "similarity 1.00" in call.prompt and "1.0000 -> 0.8000 ms" in call.prompt
    assert generated.candidate.source.strip() in call.prompt
    assert "accepted earlier" not in plain.prompt
