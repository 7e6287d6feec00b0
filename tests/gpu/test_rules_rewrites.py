"""The offline rules' rewrites of vector_add proven on a real GPU by the verifier, against the submitted kernel.

Every rule, a few compositions and the one_prompt fold are verified at n = 2**20 + 3 (then at n-1 and at a
prime below it, as the verifier always does) for the candidate's default configuration and for the smallest
and largest value of every tune parameter:
- as the verifier launches a candidate in a job (the submitted kernel's geometry, one thread per element);
- and, where the candidate's grid_div_x shrinks the grid, at that geometry too, so that each thread loops
  over several elements or vectors. There the reference is the corpus's hand-written grid-stride vector_add
  (proven equal to the example by the corpus test), since the one-element-per-thread original would not
  cover n with so small a grid.
"""
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.answers import parse
from services.generator.providers.base import Prompt
from services.generator.providers.rules import RulesProvider
from services.verifier import handlers
from services.verifier.session import VerifierSession
from shared.adapters.device.process import GpuProcess
from shared.domain.events import CandidateVerified, VerificationRequested
from shared.domain.spec import CandidateSpec, KernelSpec, TuningStep
from tests.conftest import EXAMPLES
from tests.corpus_cases import CORPUS

pytestmark = pytest.mark.gpu
N = 2 ** 20 + 3
GRID_STRIDE_REFERENCE = (CORPUS / "vector_add" / "good_grid_stride.cu").read_text()


def _vector_add() -> KernelSpec:
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml")
    return spec.model_validate({**spec.model_dump(), "sizes": {"n": N}, "strategy": {"name": "baseline"},
                                "verify": {"timeout_s": 10}})


VECTOR_ADD = _vector_add()
# As first written: blockDim.x and no tune space, so that block_size applies as well.
UNTUNED = VECTOR_ADD.model_validate({
    **VECTOR_ADD.model_dump(), "tune_params": {}, "params": {},
    "source": VECTOR_ADD.source.replace("blockIdx.x * block_size_x", "blockIdx.x * blockDim.x")})


def _applied(spec: KernelSpec, *rule_ids: str) -> CandidateSpec:
    candidate = spec.as_candidate()
    for rule_id in rule_ids:
        candidate = rules.apply(rule_id, spec, candidate)
    return candidate


def _one_prompt(spec: KernelSpec) -> CandidateSpec:
    """The fold as the planner receives it: through the provider's answer text."""
    prompt = Prompt(kind="rewrite", system="", text="", spec=spec, current=spec.as_candidate(),
                    step=TuningStep(id="one_prompt"))
    rewrite = parse("rewrite", RulesProvider().complete(prompt).text)
    return CandidateSpec(source=rewrite.source, **rewrite.settings)


CASES = {
    "restrict": (VECTOR_ADD, lambda: _applied(VECTOR_ADD, "restrict")),
    "launch_bounds": (VECTOR_ADD, lambda: _applied(VECTOR_ADD, "launch_bounds")),
    "elements_per_thread": (VECTOR_ADD, lambda: _applied(VECTOR_ADD, "elements_per_thread")),
    "vectorize": (VECTOR_ADD, lambda: _applied(VECTOR_ADD, "vectorize")),
    "vectorize+unroll": (VECTOR_ADD, lambda: _applied(VECTOR_ADD, "vectorize", "unroll")),
    "elements_per_thread+vectorize+restrict": (
        VECTOR_ADD, lambda: _applied(VECTOR_ADD, "elements_per_thread", "vectorize", "restrict")),
    "block_size": (UNTUNED, lambda: _applied(UNTUNED, "block_size")),
    "one_prompt": (VECTOR_ADD, lambda: _one_prompt(VECTOR_ADD)),
    "one_prompt_untuned": (UNTUNED, lambda: _one_prompt(UNTUNED)),
}


def configurations(candidate: CandidateSpec) -> list[dict]:
    """The default configuration, then every parameter at its smallest value, then at its largest."""
    space = candidate.tune_params or {}
    return [dict(candidate.params), {**candidate.params, **{k: v[0] for k, v in space.items()}},
            {**candidate.params, **{k: v[-1] for k, v in space.items()}}]


def own_geometry_job(spec: KernelSpec, candidate: CandidateSpec) -> KernelSpec:
    """A job whose launch geometry is the candidate's, with a reference correct under any grid."""
    return spec.model_validate({**spec.model_dump(), "source": GRID_STRIDE_REFERENCE,
                                "params": {**spec.params, **candidate.params},
                                "grid_div_x": candidate.grid_div_x})


@pytest.fixture(scope="module")
def process():
    process = GpuProcess(0, VerifierSession)
    yield process
    process.close()


@pytest.mark.parametrize("case", list(CASES))
def test_the_rewrite_is_verified_against_the_submitted_kernel(process, case):
    spec, make = CASES[case]
    candidate = make()
    failures = []
    for params in configurations(candidate):
        configured = candidate.model_copy(update={"params": params})
        geometries = [("job geometry", spec)]
        if candidate.grid_div_x is not None:
            geometries.append(("own geometry", own_geometry_job(spec, candidate)))
        for geometry, job in geometries:
            job = job.model_validate({**job.model_dump(), "strategy": {"name": "verify",
                                                                       "candidate": configured.model_dump()}})
            request = VerificationRequested(stream_id="job-rules", queue="verifier.0", candidate_id=case,
                                            candidate=configured)
            answer = handlers._verify("job-rules", job, request, lambda: process, "sm_90")
            if not isinstance(answer, CandidateVerified):
                failures.append(f"{params} at {geometry}: {answer.type} {getattr(answer, 'check', '')} "
                                f"{getattr(answer, 'reason', '')} [{getattr(answer, 'trial', '')}]")
            else:
                assert {t.sizes["n"] for t in answer.trials} >= {N, N - 1}
    assert not failures, f"{case}:\n" + "\n".join(failures) + f"\n{candidate.source}"
