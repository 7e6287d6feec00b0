"""What a rewrite request tells the model about the kernel's arguments: an index array's valid values decide
which accesses a rewrite may make, so they are in the prompt."""
from uuid import uuid4

from kforge.specfile import load_spec
from services.generator import prompts
from services.planner.strategies.one_prompt import STEP
from shared.domain.events import BaselineMeasured, GenerationRequested, JobSubmitted
from shared.domain.steps import project_optimisation
from tests.conftest import EXAMPLES


def test_the_prompt_names_each_arguments_valid_values():
    spec = load_spec(EXAMPLES / "corpus" / "spmv_csr.cu", EXAMPLES / "corpus" / "spmv_csr.yaml")
    stream = "job-prompt0000001"
    events = [JobSubmitted(stream_id=stream, spec=spec),
              BaselineMeasured(stream_id=stream, request_id=uuid4(), device="GPU", params=spec.baseline_params(),
                               grid=(1, 1, 1), block=(128, 1, 1), samples_ms=[1.0], median_ms=1.0)]
    request = GenerationRequested(stream_id=stream, queue="generator", kind="rewrite", step=STEP, candidate_id=STEP.id)

    text = prompts.build(request, spec, project_optimisation(events), []).text

    assert "row_ptr: int32['rows + 1'] in (values in [0, nnz + 1), sorted)" in text
    assert "col_idx: int32['nnz'] in (values in [0, cols))" in text
    assert "vals: float32['nnz'] in," in text  # drawn from the dtype's default range: nothing to add
