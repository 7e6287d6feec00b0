"""The sanitizer gate's runner under the real compute-sanitizer: a correct kernel passes all four checks, and
faults the verifier's own checks may miss are reported by the tool that sees them."""
import pytest

from kforge.specfile import load_spec
from services.verifier.sanitizer import TOOLS, SanitisedRun, check_all, find_tool, small_sizes
from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.probe import probe
from tests.conftest import EXAMPLES
from tests.corpus_cases import CORPUS

pytestmark = pytest.mark.gpu
MATMUL_PARAMS = {"block_size_x": 32, "block_size_y": 8, "tile_size_x": 4, "tile_size_y": 2}


def verdicts(example: str, source: str, params: dict | None = None) -> dict[str, tuple[str, str]]:
    tool = find_tool()
    if tool is None:
        pytest.skip("compute-sanitizer not installed")
    spec = load_spec(EXAMPLES / f"{example}.cu", EXAMPLES / f"{example}.yaml")
    candidate = spec.as_candidate().model_copy(update={"source": source, "params": params or {}})
    defines = {**spec.baseline_params(), **candidate.params}
    compiled = compile_kernel(source, spec.kernel_name, defines, spec.compiler_options, probe(0).arch)
    run = SanitisedRun(spec.for_candidate(candidate).with_sizes(small_sizes(spec, 4096)), 1, compiled.cubin,
                       compiled.lowered_name, defines, 0)
    return {c.tool: (c.verdict, c.first_error) for c in check_all(tool, run, 120)}


@pytest.mark.parametrize("example, params", [("vector_add", None), ("matmul", MATMUL_PARAMS), ("reduction", None)])
def test_the_examples_pass_every_check(example, params):
    found = verdicts(example, (EXAMPLES / f"{example}.cu").read_text(), params)
    assert found == {tool: ("passed", "") for tool in TOOLS}


def test_an_overrun_is_a_memcheck_error():
    found = verdicts("vector_add", (CORPUS / "vector_add" / "off_by_one.cu").read_text())
    verdict, first_error = found["memcheck"]
    assert verdict == "failed" and first_error.startswith("Invalid __global__")


def test_a_missing_barrier_is_a_racecheck_error():
    source = (EXAMPLES / "matmul.cu").read_text().replace("__syncthreads();", "/* no barrier */", 1)
    verdict, first_error = verdicts("matmul", source, MATMUL_PARAMS)["racecheck"]
    assert verdict == "failed" and "RAW hazard" in first_error, first_error
