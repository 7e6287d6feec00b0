"""The strategies decide from a job's folded events alone: each test writes the history a job would have
and checks the next decision, as a restarted planner would make it."""
from uuid import uuid4

import pytest

from services.planner.strategies import Ask, Finish, Skip, UnknownStrategy, register, registered, strategy_for
from services.planner.strategies.multiturn import category
from shared.domain.events import (BaselineMeasured, CandidateGenerated, GenerationFailed, GenerationRequested,
                                  JobSubmitted, PlanProposed, StepAccepted, StepBrokenDown, StepDiscarded, StepSkipped,
                                  StepValidated)
from shared.domain.spec import DEFAULT_STEPS, TuningStep
from shared.domain.steps import project_optimisation
from shared.domain.strategy_names import unknown_strategy

STREAM = "job-strategy"


class History:
    """Appends the events of one job in the order the services would, and decides with its strategy."""

    def __init__(self, spec, **strategy):
        spec = spec.model_validate({**spec.model_dump(), "strategy": {**strategy}})
        self.spec, self.events = spec, [JobSubmitted(stream_id=STREAM, spec=spec)]
        self.add(BaselineMeasured(stream_id=STREAM, request_id=uuid4(), device="GPU", params={"block_size_x": 256},
                                  grid=(1, 1, 1), block=(256, 1, 1), samples_ms=[1.0], median_ms=1.0))

    def add(self, *events):
        self.events.extend(events)
        return self

    @property
    def optimisation(self):
        return project_optimisation(self.events)

    def decide(self):
        return strategy_for(self.spec.strategy.name).decide(self.optimisation, self.spec.strategy)

    def ask(self, kind, step=None, focus=None):
        request = GenerationRequested(stream_id=STREAM, queue="generator", kind=kind, step=step, focus=focus,
                                      candidate_id=step.id if kind == "rewrite" else None)
        self.add(request)
        return request

    def answer_plan(self, request, *steps):
        return self.add(PlanProposed(stream_id=STREAM, request_id=request.event_id, kind=request.kind, steps=list(steps)))

    def validate(self, step, valid=True, reason="fine"):
        request = self.ask("validate", step)
        return self.add(StepValidated(stream_id=STREAM, request_id=request.event_id, step_id=step.id, valid=valid,
                                      reason=reason))

    def execute(self, step, new_ms=None, focus=None):
        """Rewrite, and accept at new_ms (discard when None)."""
        request = self.ask("rewrite", step, focus)
        candidate = self.spec.as_candidate().model_copy(update={"source": self.spec.source + f"// {step.id}\n"})
        self.add(CandidateGenerated(stream_id=STREAM, request_id=request.event_id, step_id=step.id,
                                    candidate_id=step.id, candidate=candidate, provider="rules"))
        best = self.optimisation.best.time_ms
        if new_ms is not None and new_ms < best:
            return self.add(StepAccepted(stream_id=STREAM, step_id=step.id, candidate_id=step.id, old_time_ms=best,
                                         new_time_ms=new_ms, best_params={"block_size_x": 128},
                                         speedup=best / new_ms, speedup_ci=None))
        return self.add(StepDiscarded(stream_id=STREAM, step_id=step.id, candidate_id=step.id, stage="compare",
                                      reason="not faster", new_time_ms=new_ms))


def step(id, **more):
    return TuningStep(id=id, description=f"do {id}", **more)


def test_builtins_are_registered_and_unknown_names_say_what_is():
    assert {"one_prompt", "autonomous", "explicit", "multiturn"} <= set(registered())
    with pytest.raises(UnknownStrategy, match="registered: autonomous, explicit, multiturn, one_prompt"):
        strategy_for("no_such_strategy")


# --- one prompt ----------------------------------------------------------------------------------------
def test_one_prompt_asks_one_rewrite_then_finishes(vector_add_spec):
    job = History(vector_add_spec, name="one_prompt")
    first = job.decide()
    assert isinstance(first, Ask) and first.kind == "rewrite" and first.step.id == "one_prompt"
    assert "{kernel_string}" in first.step.prompt_template
    job.execute(first.step, new_ms=0.7)
    done = job.decide()
    assert isinstance(done, Finish) and "accepted" in done.reason
    assert job.optimisation.best.time_ms == 0.7 and job.optimisation.best.step_id == "one_prompt"


# --- explicit --------------------------------------------------------------------------------------------
def test_explicit_runs_the_default_steps_in_order_with_evaluation_and_dependencies(vector_add_spec):
    job = History(vector_add_spec, name="explicit")
    assert [s.id for s in job.optimisation.planned] == [s.id for s in DEFAULT_STEPS]
    first = job.decide()  # block_size skips evaluation
    assert (first.kind, first.step.id) == ("rewrite", "block_size")
    job.execute(first.step, new_ms=0.9)
    second = job.decide()
    assert (second.kind, second.step.id) == ("validate", "restrict")
    job.validate(second.step, valid=False, reason="already restrict")
    third = job.decide()
    assert (third.kind, third.step.id) == ("validate", "elements_per_thread")
    job.validate(third.step)
    assert (job.decide().kind, job.decide().step.id) == ("rewrite", "elements_per_thread")
    job.execute(third.step, new_ms=0.95)  # slower than 0.9: discarded
    vectorize = job.decide()
    job.validate(vectorize.step).execute(vectorize.step, new_ms=0.8)
    unroll = job.decide()  # depends on elements_per_thread, which was discarded
    assert isinstance(unroll, Skip) and unroll.step.id == "unroll" and "elements_per_thread" in unroll.reason
    job.add(StepSkipped(stream_id=STREAM, step_id="unroll", reason=unroll.reason))
    bounds = job.decide()
    job.validate(bounds.step).execute(bounds.step)
    done = job.decide()
    assert isinstance(done, Finish) and "2 kept" in done.reason
    statuses = {r.step.id: r.status for r in job.optimisation.steps}
    assert statuses == {"block_size": "accepted", "restrict": "invalid", "elements_per_thread": "discarded",
                        "vectorize": "accepted", "unroll": "skipped", "launch_bounds": "discarded"}
    assert job.optimisation.best.lineage == ("block_size", "vectorize")


def test_explicit_takes_user_steps(vector_add_spec):
    steps = [step("a", skip_evaluation=True, tune_params={"tile": [1, 2]}), step("b", depends_on=["a"])]
    job = History(vector_add_spec, name="explicit", steps=[s.model_dump() for s in steps])
    assert job.decide() == Ask("rewrite", steps[0])
    job.execute(steps[0], new_ms=0.5)
    assert job.decide() == Ask("validate", steps[1])


def test_explicit_steps_are_checked_when_submitted(vector_add_spec):
    with pytest.raises(ValueError, match="b depends on z, which no earlier step is"):
        History(vector_add_spec, name="explicit", steps=[{"id": "a"}, {"id": "b", "depends_on": ["z"]}])
    with pytest.raises(ValueError, match="must contain {kernel_string}"):
        TuningStep(id="x", prompt_template="no placeholder")


# --- autonomous -----------------------------------------------------------------------------------------
def test_autonomous_plans_validates_breaks_down_executes_and_replans(vector_add_spec):
    job = History(vector_add_spec, name="autonomous", max_breakdowns=1, max_replanning=2)
    assert job.decide() == Ask("plan")
    job.answer_plan(job.ask("plan"), step("tile"), step("profile"))
    assert job.decide() == Ask("validate", step("tile"))
    job.validate(step("tile"))
    assert job.decide() == Ask("breakdown", step("tile"))
    request = job.ask("breakdown", step("tile"))
    job.add(StepBrokenDown(stream_id=STREAM, request_id=request.event_id, step_id="tile",
                           substeps=[step("tile_a"), step("tile_b")]))
    assert job.decide() == Ask("validate", step("tile_a"))  # substeps come before the rest of the plan
    job.validate(step("tile_a"))
    assert job.decide() == Ask("rewrite", step("tile_a"))  # depth 1 = max_breakdowns: no further breakdown
    job.execute(step("tile_a"), new_ms=0.6)
    job.validate(step("tile_b")).execute(step("tile_b"))
    assert job.decide() == Ask("validate", step("profile"))
    job.validate(step("profile"), valid=False, reason="profiling changes no code")
    assert job.decide() == Ask("replan")
    job.answer_plan(job.ask("replan"))  # nothing further
    done = job.decide()
    assert isinstance(done, Finish) and "no further step" in done.reason
    assert job.optimisation.record("tile").status == "broken_down"
    assert job.optimisation.record("profile").reason == "profiling changes no code"


def test_autonomous_without_breakdown_or_replanning(vector_add_spec):
    job = History(vector_add_spec, name="autonomous", breakdown_steps=False, with_replanning=False)
    job.answer_plan(job.ask("plan"), step("only"))
    job.validate(step("only"))
    assert job.decide() == Ask("rewrite", step("only"))
    job.execute(step("only"), new_ms=0.5)
    assert job.decide() == Finish("the plan is done (replanning is off)")


def test_autonomous_stops_after_max_replanning(vector_add_spec):
    job = History(vector_add_spec, name="autonomous", breakdown_steps=False, max_replanning=1)
    job.answer_plan(job.ask("plan"))
    assert job.decide() == Ask("replan")
    job.answer_plan(job.ask("replan"), step("late"))
    job.validate(step("late")).execute(step("late"))
    assert "max_replanning" in job.decide().reason


def test_a_failed_first_plan_fails_the_job(vector_add_spec):
    job = History(vector_add_spec, name="autonomous")
    request = job.ask("plan")
    job.add(GenerationFailed(stream_id=STREAM, request_id=request.event_id, kind="plan", step_id=None,
                             reason="429 rate limited, retries exhausted"))
    decision = job.decide()
    assert decision == Finish("no plan: 429 rate limited, retries exhausted", failed=True)


# --- multiturn ----------------------------------------------------------------------------------------------
def test_performance_categories():
    assert [category(s) for s in (0.5, 0.79, 0.8, 1.0, 1.2, 1.21, 3)] == \
        ["SLOW", "SLOW", "MODERATE", "MODERATE", "MODERATE", "GOOD", "GOOD"]


def test_multiturn_refines_until_the_target(vector_add_spec):
    job = History(vector_add_spec, name="multiturn", target_speedup=1.5, max_iterations=5)
    first = job.decide()
    assert (first.kind, first.step.id, first.focus) == ("rewrite", "iteration-1", "MODERATE")
    job.execute(first.step, new_ms=0.8, focus=first.focus)  # 1.25x: GOOD now
    second = job.decide()
    assert (second.step.id, second.focus) == ("iteration-2", "GOOD")
    job.execute(second.step, new_ms=0.6, focus=second.focus)  # 1.67x
    done = job.decide()
    assert isinstance(done, Finish) and done.reason.startswith("target reached: 1.67x")
    assert job.optimisation.best.time_ms == 0.6


def test_multiturn_focus_follows_the_reference_time(vector_add_spec):
    job = History(vector_add_spec, name="multiturn", reference_ms=0.5)  # a library twice as fast as the kernel
    assert job.decide().focus == "SLOW"


def test_multiturn_stops_on_a_plateau_and_keeps_the_best(vector_add_spec):
    job = History(vector_add_spec, name="multiturn", min_improvement=0.05, patience=2, max_iterations=10)
    job.execute(job.decide().step, new_ms=0.9)  # 10%: progress
    job.execute(job.decide().step, new_ms=0.88)  # 2.2%: accepted, but no progress
    job.execute(job.decide().step)  # discarded
    done = job.decide()
    assert isinstance(done, Finish) and "plateau: the last 2 iterations" in done.reason
    assert job.optimisation.best.time_ms == 0.88 and job.optimisation.best.step_id == "iteration-2"


def test_multiturn_stops_at_max_iterations(vector_add_spec):
    job = History(vector_add_spec, name="multiturn", max_iterations=2, patience=5, target_speedup=10)
    job.execute(job.decide().step, new_ms=0.5)
    job.execute(job.decide().step, new_ms=0.25)
    assert job.decide().reason.startswith("2 iterations done (max_iterations), 4.00x")


# --- custom -------------------------------------------------------------------------------------------------
def test_a_custom_strategy_registered_by_name_decides(vector_add_spec):
    @register("twice_then_stop")
    class TwiceThenStop:
        def decide(self, optimisation, spec):
            done = len(optimisation.steps)
            if done < spec.options.get("rounds", 2):
                return Ask("rewrite", TuningStep(id=f"round-{done + 1}", skip_evaluation=True))
            return Finish(f"{done} rounds")

    job = History(vector_add_spec, name="twice_then_stop", options={"rounds": 1})
    assert job.decide().step.id == "round-1"
    job.execute(job.decide().step, new_ms=0.5)
    assert job.decide() == Finish("1 rounds")


def test_an_unknown_strategy_is_named_with_the_nearest_known_one():
    assert unknown_strategy("one_promt").startswith("strategy 'one_promt' is not known: did you mean 'one_prompt'?")
    assert "explicit" in unknown_strategy("no_such_thing") and "did you mean" not in unknown_strategy("no_such_thing")
    # Every strategy the planner can run is known where jobs are admitted, a custom one registered here too.
    register("tested_here")(type("TestedHere", (), {"decide": lambda self, opt, spec: Finish("done")}))
    assert [unknown_strategy(name) for name in ("baseline", "tune", "verify", *registered())] == [None] * (
        3 + len(registered()))
