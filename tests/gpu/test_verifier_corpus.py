"""The verifier on a real GPU: every corpus candidate rejected for its reason, the correct ones proven.
Prints the catch table (`make test-gpu` with -s shows it; KFORGE_CATCH_TABLE=path writes it too)."""
import os
import time

import pytest

from services.verifier import handlers
from services.verifier.session import VerifierSession
from shared.adapters.device.process import GpuProcess
from shared.domain.events import CandidateRejected, CandidateVerified, VerificationRequested
from tests.corpus_cases import load_cases

pytestmark = pytest.mark.gpu
CASES = load_cases()


@pytest.fixture(scope="module")
def process():
    process = GpuProcess(0, VerifierSession)
    yield process
    process.close()


def test_the_corpus_is_caught_for_the_right_reasons(process):
    rows, wrong = [], []
    for case in CASES:
        # A short hang limit: the infinite loop costs its process this long before it is replaced.
        spec = case.spec.model_validate({**case.spec.model_dump(), "verify": {"timeout_s": 10}})
        request = VerificationRequested(stream_id="job-corpus", queue="verifier.0", candidate_id=case.file,
                                        candidate=spec.strategy.candidate)
        started = time.perf_counter()
        answer = handlers._verify("job-corpus", spec, request, lambda: process, "sm_90")
        seconds = time.perf_counter() - started
        if isinstance(answer, CandidateVerified):
            got, detail = "pass", f"{len(answer.trials)} trials, max abs error {answer.max_abs_error:.2g}"
        elif isinstance(answer, CandidateRejected):
            got, detail = answer.check, f"{answer.reason[:150]} [{answer.trial or 'before running'}]"
        else:
            got, detail = answer.type, getattr(answer, "reason", "")
        caught = got in case.accept
        rows.append(f"| {case.id} | {'/'.join(case.accept)} | {got} | {'yes' if caught else 'NO'} | {seconds:.1f} | "
                    f"{detail.replace('|', '/')} |")
        if not caught:
            wrong.append(f"{case.id}: expected {case.accept}, got {got}: {detail}")
    table = "\n".join(["| candidate | expected | verdict | right | s | evidence |", "|---|---|---|---|---|---|", *rows])
    print("\n" + table)
    if os.environ.get("KFORGE_CATCH_TABLE"):
        with open(os.environ["KFORGE_CATCH_TABLE"], "w") as out:
            out.write(table + "\n")
    assert not wrong, "\n".join(wrong)
    assert process.replacements >= 1  # the infinite loop cost a process, and the next candidate ran on a new one
