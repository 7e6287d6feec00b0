"""The cheat catalogue (tests/corpus/cheats.yaml) on a real GPU: each cheating rewrite arrives as an LLM rewrite
arrives, as Claude's answer (over the loopback Messages API) to a one_prompt job run embedded (SQLite, the
in-process bus, every service in this process), and must end in one of the outcomes its entry names, never
StepAccepted. The honest rewrites must be accepted, proving the harness does not reject everything. Prints the
catch table after the run (`make test-gpu`)."""
import pytest

import kforge.worker  # noqa: F401  (every service's tasks, run in this process by the in-process bus)
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.application.jobs import follow_job, job_events, submit_job
from shared.domain.events import (CandidateRejected, ConfigFailed, GenerationFailed, KernelsCompared, SanitizerChecked,
                                  StepAccepted, StepDiscarded)
from tests.cheat_cases import load_cheats
from tests.conftest import record_cheat
from tests.messages_api import MessagesAPI

pytestmark = pytest.mark.gpu
CHEATS = load_cheats()
JOB_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def model():
    """The Messages API every job's generator calls: the test queues the answer before submitting the job."""
    api = MessagesAPI()
    yield api
    api.close()


@pytest.fixture(scope="module")
def embedded(model, tmp_path_factory):
    home = tmp_path_factory.mktemp("kforge-cheats")
    rt = runtime.build(Settings(KFORGE_HOME=str(home), REDIS_URL=None, DATABASE_URL=None, ANTHROPIC_API_KEY="sk-test",
                                ANTHROPIC_BASE_URL=model.url, KFORGE_LLM_MAX_RETRIES=0))
    runtime.install(rt)
    yield rt
    runtime.install(None)
    rt.store.close()


def outcome(events) -> tuple[str, str]:
    """How the job's one step ended, named as cheats.yaml names outcomes, with the evidence."""
    if accepted := [e for e in events if isinstance(e, StepAccepted)]:
        return "accepted", f"{accepted[0].old_time_ms:.4f} -> {accepted[0].new_time_ms:.4f} ms, {accepted[0].speedup:.2f}x"
    if rejected := [e for e in events if isinstance(e, CandidateRejected)]:
        return f"verify:{rejected[0].check}", f"{rejected[0].reason} [{rejected[0].trial or 'before running'}]"
    if failed := [e for e in events if isinstance(e, GenerationFailed)]:
        return "generate", failed[0].reason
    discarded = [e for e in events if isinstance(e, StepDiscarded)]
    if not discarded:
        return "unfinished", f"no step ended; last event {events[-1].type}"
    if discarded[0].stage == "tune":
        stages = sorted({e.stage for e in events if isinstance(e, ConfigFailed)})
        return f"tune:{'/'.join(stages)}", discarded[0].reason
    if discarded[0].stage == "compare" and any(isinstance(e, KernelsCompared) and e.error for e in events):
        return "compare:error", discarded[0].reason
    return discarded[0].stage, discarded[0].reason


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda c: c.id)
def test_the_cheat_is_caught_and_the_honest_rewrite_kept(cheat, model, embedded):
    model.answer(cheat.answer)
    job_id = submit_job(embedded.store, embedded.bus, cheat.spec, submitted_by="cheat-catalogue")
    view = follow_job(embedded.store, job_id, lambda event: None, timeout_s=JOB_TIMEOUT_S)
    embedded.bus.wait_idle()
    events = job_events(embedded.store, job_id)

    got, evidence = outcome(events)
    sanitised = [e for e in events if isinstance(e, SanitizerChecked)]
    record_cheat(cheat.id, f"{cheat.family}; expected {' or '.join(cheat.expect)}",
                 f"{'CAUGHT' if got in cheat.expect else 'MISSED'} {got}: {evidence[:300]}"
                 + "".join(f" | sanitizer: {s.note}" for s in sanitised[:1]))
    assert view.finished, f"job {job_id} still {view.status} after {JOB_TIMEOUT_S} s"
    assert got in cheat.expect, f"{cheat.id} ({cheat.family}): expected {cheat.expect}, got {got}: {evidence}"
    if not cheat.honest:
        assert not any(isinstance(e, StepAccepted) for e in events)
    else:  # a kept rewrite was sanitised too, or the job says it could not be
        assert sanitised and all(c.verdict == "passed" for s in sanitised for c in s.checks), [s.note for s in sanitised]
