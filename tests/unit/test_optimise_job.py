"""Rewriting jobs from submission to the kept kernel, on CPU: the planner's strategies, the generator with
the offline rules (real rewrites, compiled by NVRTC in the benchmark's pool), the verifier and the benchmark
with scripted GPU processes, over a real SQLite store. Every message is delivered as the bus would."""
from uuid import UUID

import pytest

from services.benchmark import handlers as benchmark
from services.benchmark.resources import BenchmarkResources
from services.generator import handlers as generator
from services.planner.handlers import catch_up
from services.verifier import handlers as verifier
from shared.adapters.device.process import GpuProcess
from shared.adapters.settings import Settings
from shared.domain.contracts import CompareKernels, Generate, MeasureBaseline, TuneShard, VerifyCandidate
from shared.domain.events import (CandidateGenerated, CandidateVerified, GeneratorCalled, JobCompleted, StepAccepted,
                                  StepDiscarded, StepSkipped, TuningCompleted, VerificationRequested)
from shared.domain.projections import job_stream, project_job
from shared.domain.steps import TUNED_SUFFIX, project_optimisation
from tests.fakes import RecordingBus, ScriptedBenchmarkSession, ScriptedVerifierSession, scripted_time_ms
from tests.unit.test_tune_job import submit


BENCHMARK = {MeasureBaseline.task: benchmark.measure_baseline, TuneShard.task: benchmark.tune_shard,
             CompareKernels.task: benchmark.compare_kernels}


@pytest.fixture(scope="module")
def gpu():
    resources = BenchmarkResources(0, compile_workers=2, session_factory=ScriptedBenchmarkSession)
    verify = GpuProcess(0, ScriptedVerifierSession)
    yield resources, verify
    resources.close()
    verify.close()


def run_until_quiet(store, gpu, tmp_path):
    resources, verify = gpu
    settings = Settings(KFORGE_HOME=str(tmp_path), ANTHROPIC_API_KEY=None)
    bus, done = RecordingBus(), 0
    while True:
        catch_up(store, bus, ["0"])
        if done == len(bus.messages):
            return
        for message in bus.messages[done:]:
            done += 1
            kw = message.kwargs
            if message.task in BENCHMARK:
                BENCHMARK[message.task](store, bus, kw["job_id"], UUID(kw["request_id"]), resources)
            elif message.task == VerifyCandidate.task:
                verifier.verify_candidate(store, bus, kw["job_id"], UUID(kw["request_id"]), lambda: verify, "sm_90")
            elif message.task == Generate.task:
                generator.generate(store, bus, kw["job_id"], UUID(kw["request_id"]), settings)


def rules_job(spec, **strategy):
    return spec.model_validate({**spec.model_dump(), "sizes": {"n": 1 << 16}, "strategy": strategy,
                                "tune_params": {"block_size_x": [128, 256, 512]}, "generator": {"provider": "rules"},
                                "benchmark": {**spec.benchmark.model_dump(), "timeout_s": 5}})


def test_explicit_with_the_rules_keeps_what_is_faster(store, gpu, tmp_path, vector_add_spec):
    job_id = submit(store, rules_job(vector_add_spec, name="explicit"))

    run_until_quiet(store, gpu, tmp_path)

    history = store.read_stream(job_stream(job_id))
    view, opt = project_job(history, job_id), project_optimisation(history)
    assert view.status == "completed", view.failure
    statuses = {r.step.id: r.status for r in opt.steps}
    # block_size: the kernel is already tuned on block_size_x, so the rule does not apply; restrict changes
    # nothing the scripted GPU times; more elements per thread is faster there, and only that is kept.
    assert statuses["block_size"] == "discarded" and statuses["restrict"] == "discarded"
    assert statuses["elements_per_thread"] == "accepted"
    assert opt.best.step_id == "elements_per_thread" and "elements_per_thread" in opt.best.candidate.source
    assert opt.best.time_ms == pytest.approx(scripted_time_ms(256, 16))
    assert opt.best.params["elements_per_thread"] == 16 and opt.best.params["block_size_x"] == 256
    # Every generated candidate was verified before it was tuned; a winner differing from the verified
    # default configuration was verified again.
    generated = [e.candidate_id for e in history if isinstance(e, CandidateGenerated)]
    verified = {e.candidate_id for e in history if isinstance(e, CandidateVerified)}
    assert set(generated) <= verified and "elements_per_thread" + TUNED_SUFFIX in verified
    tuned = {e.candidate_id for e in history if isinstance(e, TuningCompleted)}
    assert set(generated) == tuned
    assert all(e.provider == "rules" for e in history if isinstance(e, GeneratorCalled))
    (completed,) = [e for e in history if isinstance(e, JobCompleted)]
    assert "through elements_per_thread" in completed.summary


def test_a_candidate_the_verifier_rejects_is_discarded_with_the_reason(store, gpu, tmp_path, vector_add_spec):
    spec = rules_job(vector_add_spec, name="one_prompt")
    spec = spec.model_copy(update={"source": spec.source.replace("one element per thread", "REJECT_ME")})
    job_id = submit(store, spec)

    run_until_quiet(store, gpu, tmp_path)

    history = store.read_stream(job_stream(job_id))
    (discarded,) = [e for e in history if isinstance(e, StepDiscarded)]
    assert discarded.stage == "verify" and discarded.reason.startswith("out_of_bounds: changed 4 guard bytes")
    assert not any(isinstance(e, TuningCompleted) for e in history)  # a rejected candidate is never tuned
    assert project_job(history).status == "completed"
    assert project_optimisation(history).best.step_id is None  # the submitted kernel stays the best


def test_multiturn_with_the_rules_stops_on_a_plateau(store, gpu, tmp_path, vector_add_spec):
    job_id = submit(store, rules_job(vector_add_spec, name="multiturn", max_iterations=8, patience=2,
                                     target_speedup=3.0))

    run_until_quiet(store, gpu, tmp_path)

    history = store.read_stream(job_stream(job_id))
    opt = project_optimisation(history)
    assert project_job(history).status == "completed"
    turns = [r.step.id for r in opt.steps]
    assert turns[0] == "iteration-1" and len(turns) <= 8
    assert any(r.status == "accepted" for r in opt.steps)
    focus = [e.focus for e in history if getattr(e, "kind", None) == "rewrite" and hasattr(e, "focus")]
    assert focus[0] == "MODERATE"
    (completed,) = [e for e in history if isinstance(e, JobCompleted)]
    assert "plateau" in completed.summary or "iterations done" in completed.summary


def test_a_restarted_planner_repeats_nothing(store, gpu, tmp_path, vector_add_spec):
    job_id = submit(store, rules_job(vector_add_spec, name="explicit", steps=[
        {"id": "elements_per_thread", "skip_evaluation": True}, {"id": "unroll", "depends_on": ["elements_per_thread"]}]))
    run_until_quiet(store, gpu, tmp_path)
    before = [e.event_id for e in store.read_stream(job_stream(job_id))]

    # A planner that lost its position replays the whole log; a generator request delivered twice is answered once.
    with store.consuming("planner") as consumption:
        consumption.advance(0)
    run_until_quiet(store, gpu, tmp_path)
    request = next(e for e in store.read_stream(job_stream(job_id)) if e.type == "GenerationRequested")
    generator.generate(store, RecordingBus(), job_id, request.event_id, Settings(KFORGE_HOME=str(tmp_path)))

    assert [e.event_id for e in store.read_stream(job_stream(job_id))] == before
    assert not [e for e in store.read_stream(job_stream(job_id)) if isinstance(e, StepSkipped)]
    assert any(isinstance(e, StepAccepted) for e in store.read_stream(job_stream(job_id)))
    assert any(isinstance(e, VerificationRequested) for e in store.read_stream(job_stream(job_id)))
