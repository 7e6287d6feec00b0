"""The verifier's rules on CPU: trial planning, signatures from real NVRTC PTX, the judge's order of
checks on crafted outputs, the corpus's compile and signature rejections, and the job flow."""
import numpy as np
import pytest
from pydantic import ValidationError

from services.planner import handlers as planner
from services.verifier import handlers
from services.verifier.cache import TrialCache
from services.verifier.compare import Difference, OutputCheck, example
from services.verifier.judge import CHECKS, Run, Verdict, judge
from services.verifier.trials import plan_trials, prime_below
from shared.adapters.device.compiler import parameter_types
from shared.adapters.device.probe import DeviceInfo
from shared.adapters.device.process import NoDevice
from shared.adapters.inputs import SPECIAL_STRIDE, make_arrays
from shared.domain.contracts import VerifyCandidate
from shared.domain.events import (CandidateRejected, CandidateVerified, JobSubmitted, TrialPassed,
                                  VerificationIncomplete, VerificationRequested)
from shared.domain.signature import mismatches
from shared.domain.spec import KernelSpec
from shared.domain.tolerance import Observed, derive
from tests.corpus_cases import CPU_CHECKS, load_cases
from tests.fakes import RecordingBus

CASES = load_cases()


def spec_of(case_file: str) -> KernelSpec:
    return next(c.spec for c in CASES if c.file == case_file)


def no_device():
    raise NoDevice("no CUDA device: the NVIDIA driver (libcuda.so) is not installed on this machine")


def request_for(spec: KernelSpec) -> VerificationRequested:
    return VerificationRequested(stream_id="job-v", queue="verifier.0", candidate_id="candidate",
                                 candidate=spec.strategy.candidate)


# --- trials ---------------------------------------------------------------------------------------------
def test_trials_cover_fresh_seeds_and_sizes_that_are_no_multiple_of_a_block():
    spec = spec_of("good_grid_stride.cu")  # n = 2^20, two seeds
    trials = plan_trials(spec)
    assert [t.sizes["n"] for t in trials] == [1 << 20, 1 << 20, (1 << 20) - 1, 1048573]
    assert len({t.seed for t in trials}) == len(trials)  # every trial draws fresh inputs
    assert plan_trials(spec) == trials  # and the same spec always gets the same ones
    assert prime_below(1048575) == 1048573 and prime_below(3) == 2 and prime_below(2) is None


def test_odd_sizes_can_be_turned_off():
    spec = spec_of("good_grid_stride.cu")
    spec = spec.model_validate({**spec.model_dump(), "verify": {"odd_sizes": False, "seeds": 3}})
    assert [t.label for t in plan_trials(spec)] == ["spec sizes #1", "spec sizes #2", "spec sizes #3"]


# --- signatures from PTX ----------------------------------------------------------------------------------
def test_the_examples_match_their_args_and_wrong_signatures_are_named():
    spec = spec_of("good_grid_stride.cu")
    assert mismatches(spec.args, parameter_types(spec.source, "vector_add", spec.baseline_params(), [], "sm_90")) == []
    wide = spec_of("wrong_signature.cu").strategy.candidate.source
    [wrong] = mismatches(spec.args, parameter_types(wide, "vector_add", spec.baseline_params(), [], "sm_90"))
    assert wrong.what == "parameter 3 (n) should be a int32 scalar (PTX .b32/.s32/.u32) but the kernel declares .u64"
    assert wrong.field == "args[3]" and "a shape" in wrong.fix and "int64 or uint64" in wrong.fix
    short = spec_of("missing_parameter.cu").strategy.candidate.source
    [wrong] = mismatches(spec.args, parameter_types(short, "vector_add", spec.baseline_params(), [], "sm_90"))
    assert wrong.field == "args"
    assert wrong.what.startswith("the kernel takes 3 parameters (u64, u64, u32) but args lists 4 (c, a, b, n)")


# --- the judge, on the device's findings -------------------------------------------------------------------------
SIZE = 1000
NONE = Difference(0, SIZE)


@pytest.fixture
def small():
    return spec_of("good_grid_stride.cu").with_sizes({"n": SIZE})


DEFAULT = {"c": derive("c", "float32", {}, Observed(spread=0.0, spread_rel=0.0, runs=3, terms=2 * SIZE, largest=1.0))}


def found(count: int, first: int = 0, max_abs: float = 0.0, max_rel: float = 0.0) -> Difference:
    return Difference(count, SIZE, first, max_abs, max_rel, f"c[{first}]: 1.5 instead of 2.0")


def run(unwritten=NONE, not_finite=NONE, mismatch=NONE, guards=(), modified=()):
    return Run(guard_violations=list(guards), inputs_modified=list(modified),
               outputs={"c": OutputCheck(unwritten, not_finite, mismatch)})


def test_a_faithful_candidate_passes_with_its_largest_error(small):
    close = Difference(0, SIZE, None, 1e-6, 2e-6)
    verdict = judge(small, [run(mismatch=close), run(mismatch=close)], {"c": NONE}, DEFAULT)
    assert verdict.passed and verdict.max_abs_error == 1e-6 and verdict.max_rel_error == 2e-6
    assert verdict.tolerances == (DEFAULT["c"],)  # what the output was judged with comes with the verdict


def test_checks_come_in_their_order(small):
    every = dict(unwritten=found(2), not_finite=found(1, 7), mismatch=found(SIZE, 0, 1.0, 1.0))
    disagree = {"c": found(SIZE, 0, 1.0)}
    assert judge(small, [run(**every), run(**every, guards=["changed 4 guard bytes after the end of c"])],
                 disagree, DEFAULT).check == "out_of_bounds"
    modified = judge(small, [run(**every, modified=["a (4 bytes changed, the first at byte 0)"]), run()], disagree,
                     DEFAULT)
    assert modified.check == "input_modified" and "a (4 bytes changed" in modified.reason
    unwritten = judge(small, [run(**every), run(**every)], disagree, DEFAULT)
    assert unwritten.check == "unwritten" and "2 of 1000 elements of c unwritten" in unwritten.reason
    cached = judge(small, [run(), run(unwritten=found(2))], {"c": NONE}, DEFAULT)
    assert cached.check == "unwritten" and cached.reason.startswith("run 2 left")
    race = judge(small, [run(not_finite=found(1, 7)), run()], disagree, DEFAULT)
    assert race.check == "nondeterministic" and "1000 of 1000" in race.reason and "c[0]: 1.5" in race.reason
    nan = judge(small, [run(not_finite=found(1, 7), mismatch=found(1, 7)), run()], {"c": NONE}, DEFAULT)
    assert nan.check == "not_finite" and "the first c[7]" in nan.reason
    mismatch = judge(small, [run(mismatch=found(SIZE, 0, 1.0, 1.0)), run()], {"c": NONE}, DEFAULT)
    assert mismatch.check == "mismatch" and "c[0]: " in mismatch.reason and mismatch.max_abs_error == 1.0
    assert "beyond atol 0.0001 + rtol 0.0001 x |ref| (the float32 default: the reference repeats" in mismatch.reason
    assert set(CHECKS) >= {"out_of_bounds", "input_modified", "unwritten", "nondeterministic", "not_finite", "mismatch"}


def test_a_tolerance_widened_by_the_references_spread_is_named_in_the_verdict(small):
    widened = {"c": derive("c", "float32", {}, Observed(spread=0.5, spread_rel=1e-4, runs=3, terms=SIZE, largest=1.0))}
    mismatch = judge(small, [run(mismatch=found(3, 0, 9.0, 1.0)), run()], {"c": NONE}, widened)
    assert mismatch.check == "mismatch" and mismatch.tolerances == (widened["c"],)
    assert "beyond atol 2 + rtol 0.0001 x |ref| (the reference differs from itself by up to 0.5 over 3 runs" in \
        mismatch.reason
    race = judge(small, [run(), run()], {"c": found(1, 0, 5.0)}, widened)
    assert race.check == "nondeterministic" and "beyond atol 2 + rtol 0.0001 x |run 1|" in race.reason


def test_examples_quote_elements_in_the_arrays_own_dimensions():
    assert example("c", (1000,), 7, np.float32(1.5), np.float32(2)) == "c[7]: 1.5 instead of 2.0"
    assert example("m", (4, 8), 10, np.int32(3), np.int32(-1)) == "m[1,2]: 3 instead of -1"


# --- the trial cache's budget ----------------------------------------------------------------------------------
def test_the_cache_keeps_trials_within_its_budget_oldest_out_first():
    released = []
    cache = TrialCache(100, released.append)
    for key, nbytes in (("t1", 40), ("t2", 40)):
        cache.make_room(nbytes)
        cache.add(key, f"trial {key}", nbytes)
    assert cache.keys() == ["t1", "t2"] and cache.total_bytes == 80 and cache.get("t1") == "trial t1"
    cache.make_room(40)  # before allocating t3: t1 goes, so the device never holds all three
    assert released == ["trial t1"] and cache.get("t1") is None
    cache.add("t3", "trial t3", 40)
    assert cache.keys() == ["t2", "t3"] and cache.total_bytes == 80
    cache.add("huge", "trial huge", 500)  # alone over budget: kept, since the candidate about to run needs it
    assert released == ["trial t1", "trial t2", "trial t3"] and cache.keys() == ["huge"]
    cache.add("t4", "trial t4", 10)
    assert released[-1] == "trial huge" and cache.keys() == ["t4"] and cache.total_bytes == 10


def test_no_budget_keeps_only_the_trial_in_use():
    released = []
    cache = TrialCache(0, released.append)
    cache.add("t1", 1, 8)
    cache.add("t2", 2, 8)
    assert cache.keys() == ["t2"] and released == [1]


# --- the corpus, as far as a machine without a GPU can go ------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_without_a_gpu(case):
    answer = handlers._verify("job-v", case.spec, request_for(case.spec), no_device, "sm_90")
    cpu_check = CPU_CHECKS.intersection(case.accept)
    if cpu_check:
        assert isinstance(answer, CandidateRejected) and answer.check in cpu_check, answer
        assert answer.check != "compile" or "identifier \"j\" is undefined" in answer.log
    else:  # compiles, fits the signature; proving it needs the GPU
        assert isinstance(answer, VerificationIncomplete) and answer.passed == ["compile", "signature"], answer
        assert "no CUDA device" in answer.reason


# --- spec fields --------------------------------------------------------------------------------------------------
def test_verify_needs_a_candidate_that_defines_the_kernel():
    data = spec_of("good_grid_stride.cu").model_dump()
    with pytest.raises(ValidationError, match="strategy verify takes a candidate"):
        KernelSpec.model_validate({**data, "strategy": {"name": "verify"}})
    with pytest.raises(ValidationError, match="strategy.candidate: kernel_name: 'vector_add' is not defined"):
        KernelSpec.model_validate({**data, "strategy": {"name": "verify", "candidate": {
            "source": 'extern "C" __global__ void other(float *c) {}'}}})
    with pytest.raises(ValidationError, match="specials apply to float input arrays only"):
        KernelSpec.model_validate({**data, "args": [{**data["args"][0], "specials": ["nan"]}, *data["args"][1:]]})


def test_specials_land_every_stride_in_the_inputs_that_ask():
    data = spec_of("good_grid_stride.cu").model_dump()
    data["args"][1]["specials"] = ["nan", "-inf", "denormal"]
    spec = KernelSpec.model_validate(data).with_sizes({"n": 1000})
    a, b = make_arrays(spec, 3)["a"], make_arrays(spec, 3)["b"]
    assert np.isnan(a[0]) and a[SPECIAL_STRIDE] == -np.inf and 0 < a[2 * SPECIAL_STRIDE] < 1e-37
    assert np.isfinite(b).all() and np.isfinite(np.delete(a, np.arange(0, 1000, SPECIAL_STRIDE))).all()


# --- the job: planner to verifier and back -------------------------------------------------------------------------
def test_a_verify_job_asks_the_verifier_and_ends_with_its_answer(store):
    spec = spec_of("wrong_signature.cu")
    job = JobSubmitted(stream_id="job-sig", spec=spec)
    store.append(job.stream_id, [job], expected_version=0)
    bus = RecordingBus()
    planner.catch_up(store, bus, ["0", "1"])
    request = store.read_stream(job.stream_id)[1]
    assert isinstance(request, VerificationRequested) and request.queue.startswith("verifier.")
    [message] = bus.messages
    assert message.task == VerifyCandidate.task and message.kwargs["request_id"] == str(request.event_id)

    handlers.verify_candidate(store, bus, "sig", request.event_id, no_device, "sm_90")
    handlers.verify_candidate(store, bus, "sig", request.event_id, no_device, "sm_90")  # redelivered: no-op
    planner.catch_up(store, bus, ["0", "1"])
    types = [e.type for e in store.read_stream(job.stream_id)]
    assert types == ["JobSubmitted", "VerificationRequested", "CandidateRejected", "JobFailed"]
    failed = store.read_stream(job.stream_id)[-1]
    assert failed.stage == "verify: signature" and "parameter 3 (n)" in failed.reason


def test_an_unrelated_event_landing_while_it_verifies_costs_no_second_verification(store):
    """shared/application/requests.py's rule: the answer goes after whatever the stream gained meanwhile (here another task's
    TaskProfiled), instead of the task failing and verifying again."""
    from datetime import UTC, datetime
    from uuid import uuid4

    from shared.domain.events import TaskProfiled

    spec = spec_of("good_grid_stride.cu")
    job = JobSubmitted(stream_id="job-busy", spec=spec)
    request = request_for(spec).model_copy(update={"stream_id": job.stream_id})
    store.append(job.stream_id, [job, request], expected_version=0)
    asked = []

    def device_while_the_stream_moves():
        asked.append(1)
        store.append(job.stream_id, [TaskProfiled(stream_id=job.stream_id, request_id=uuid4(), task="benchmark.tune",
                                                  worker="elsewhere:1", started_at=datetime.now(UTC), wall_s=1.0,
                                                  peak_rss_mb=1.0)], expected_version=None)
        no_device()

    bus = RecordingBus()
    handlers.verify_candidate(store, bus, "busy", request.event_id, device_while_the_stream_moves, "sm_90")
    handlers.verify_candidate(store, bus, "busy", request.event_id, device_while_the_stream_moves, "sm_90")

    assert len(asked) == 1
    assert [e.type for e in store.read_stream(job.stream_id)] == ["JobSubmitted", "VerificationRequested",
                                                                 "TaskProfiled", "VerificationIncomplete"]
    assert len(bus.messages) == 2


def test_a_verified_candidate_completes_its_job(store):
    from services.planner.policy import react
    from shared.domain.projections import project_job

    spec = spec_of("good_grid_stride.cu")
    job = JobSubmitted(stream_id="job-ok", spec=spec)
    request = request_for(spec).model_copy(update={"stream_id": "job-ok"})
    verified = CandidateVerified(stream_id="job-ok", request_id=request.event_id, candidate_id="candidate",
                                 device="NVIDIA H100", max_abs_error=0.0, max_rel_error=0.0,
                                 trials=[TrialPassed(label="spec sizes #1", sizes={"n": 4}, seed=1, max_abs_error=0,
                                                     max_rel_error=0)])
    [completed] = react(verified, project_job([job, request, verified]), ["0"]).events
    assert completed.type == "JobCompleted" and "candidate verified on NVIDIA H100: 1 trials" in completed.summary


class ScriptedTrials:
    """The verifier's GPU process as the handler sees it: each trial's reference serves, and the candidate's
    verdicts come from a script, in turn."""

    device = DeviceInfo(index=0, name="Scripted GPU", arch="sm_90")

    def __init__(self, verdicts: list[Verdict]):
        self.verdicts = verdicts

    def call(self, op: str, request, timeout_s: float, limit_name: str):
        return 0.1 if op == "reference" else self.verdicts.pop(0)


def test_the_answer_records_the_tolerance_each_trial_was_judged_with():
    spec = spec_of("good_grid_stride.cu")
    widened = derive("c", "float32", {}, Observed(spread=0.5, spread_rel=1e-4, runs=3, terms=2 << 20, largest=1.0))
    trials = len(plan_trials(spec))
    passing = Verdict(None, "matches the reference", 0.25, 1e-5, (widened,))
    verified = handlers._verify("job-v", spec, request_for(spec), lambda: ScriptedTrials([passing] * trials), "sm_90")
    assert isinstance(verified, CandidateVerified) and all(t.tolerances == [widened] for t in verified.trials)
    wrong = Verdict("mismatch", "3 of 1048576 elements of c differ", 9.0, 1.0, (widened,))
    rejected = handlers._verify("job-v", spec, request_for(spec), lambda: ScriptedTrials([passing, wrong]), "sm_90")
    assert isinstance(rejected, CandidateRejected) and rejected.check == "mismatch"
    assert rejected.tolerances == [widened] and rejected.trial.startswith("spec sizes #2")
