"""Dynamic shared memory (smem_args) on a real GPU, with the corpus's row_sum, whose block reduces through
`extern __shared__ float partial[]`: every launch must pass its bytes, or the kernel reads and writes past
the block's shared memory."""
from uuid import uuid4

import pytest

from services.benchmark.compile_pool import CompilePool
from services.benchmark.process import BenchmarkProcess
from services.benchmark.tuning import SetupFailed, SpaceEvaluator, search
from services.generator.answers import parse
from services.verifier import handlers as verifier
from services.verifier.session import VerifierSession
from shared.adapters.device.process import GpuProcess
from shared.domain.events import BaselineMeasured, CandidateVerified, ConfigMeasured, VerificationRequested
from shared.domain.spec import CandidateSpec
from tests.corpus_kernels import CorpusKernel
from tests.gpu.baselines import baseline_events

pytestmark = pytest.mark.gpu
ROW_SUM = CorpusKernel("row_sum")


@pytest.fixture
def spec():
    return ROW_SUM.spec().with_sizes({"rows": 4096, "cols": 1000})


def with_shared_size(spec, size: str):
    return spec.model_validate({**spec.model_dump(), "smem_args": {"size": size}})


def test_the_baseline_of_row_sum_is_measured(tmp_path, spec):
    events = baseline_events(tmp_path, spec)
    measured = [e for e in events if isinstance(e, BaselineMeasured)]
    assert len(measured) == 1, [(e.type, getattr(e, "reason", "")) for e in events]


def test_every_block_size_runs_with_its_shared_memory_and_beyond_48_kib_after_opting_in(spec):
    beyond = with_shared_size(spec, "block_size_x * 4 + 64 * 1024")  # more than a block gets without opting in
    too_much = with_shared_size(spec, "block_size_x * 4 + 1024 * 1024")  # more than any device allows a block
    with CompilePool(4) as pool:
        process = BenchmarkProcess(0)
        try:
            for tuned in (spec, beyond):
                outcomes = search(tuned, SpaceEvaluator(tuned, process, pool, process.device.arch, "job-gpu", uuid4(),
                                                        lambda batch: None))
                assert all(isinstance(o, ConfigMeasured) for o in outcomes), outcomes
                assert len(outcomes) == len(spec.tune_params["block_size_x"])
            # The submitted kernel itself asks more than any block gets: its reference run fails, and with it the
            # search (the tune handler records the reason as the shard's error).
            with pytest.raises(SetupFailed) as failed:
                search(too_much, SpaceEvaluator(too_much, process, pool, process.device.arch, "job-gpu", uuid4(),
                                                lambda batch: None))
        finally:
            process.close()
    assert "more than the" in str(failed.value) and "lower smem_args.size" in str(failed.value)


def test_the_verifier_proves_row_sum_and_its_rewrite_without_dynamic_shared_memory(spec):
    rewrite = parse("rewrite", ROW_SUM.rewrite())
    assert rewrite.settings["smem_args"] == {"size": 0}
    candidates = {"the kernel itself": spec.as_candidate(),
                  "the rewrite": CandidateSpec(source=rewrite.source, **rewrite.settings)}
    process = GpuProcess(0, VerifierSession)
    try:
        for name, candidate in candidates.items():
            request = VerificationRequested(stream_id="job-smem", queue="verifier.0", candidate_id=name,
                                            candidate=candidate)
            answer = verifier._verify("job-smem", spec, request, lambda: process, "sm_90")
            assert isinstance(answer, CandidateVerified), (name, answer)
    finally:
        process.close()
