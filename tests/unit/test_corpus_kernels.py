"""The kernel corpus (examples/corpus) on a machine without a GPU: every spec loads, every kernel compiles in the
sandbox for sm_90 in every configuration of its space and takes the arguments its spec lists, and every
scripted rewrite goes through the generator as Claude's answer over the loopback Messages API, becomes a
candidate, and compiles and matches the signature in every configuration of its own space. A kernel that
needs a feature kforge lacks (tests/corpus_kernels.py PENDING) is marked xfail with that feature named."""
import itertools
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared.adapters.device.compiler import compile_kernel, parameter_types
from shared.adapters.settings import Settings
from shared.domain.signature import mismatches
from shared.domain.spec import KernelSpec
from tests.corpus_kernels import PATHS, corpus
from tests.messages_api import messages_api  # noqa: F401  (fixture)
from tests.one_prompt_answers import generated

ARCH = "sm_90"
KERNELS = corpus()
# What the corpus must cover (issue 19): a name for each, and the kernels that cover it.
COVERAGE = {
    "blockDim instead of kforge's defines": [k.name for k in KERNELS if "blockDim" in k.source_path.read_text()],
    "2D grid": ["transpose", "jacobi2d", "conv2d", "bias_gelu", "rgba_to_gray"],
    "3D grid": ["laplace3d"],
    "grid-stride loop": ["saxpy", "scale", "dot", "histogram", "int_stats"],
    "template through a name expression": ["scale"],
    "dynamic shared memory": ["row_sum"],
    "in-place (inout)": ["saxpy", "relu_inplace", "haxpy"],
    "several outputs": ["segmented_scan", "layernorm", "int_stats"],
    "half precision": ["haxpy"],
    "bfloat16": ["bf16_axpy"],
    "index arrays with ranges": ["gather", "spmv_csr", "histogram"],
    "float atomics": ["dot"],
    "integer atomics": ["histogram", "int_stats"],
    "warp shuffles": ["dot", "int_stats"],
    "output partly untouched": ["jacobi2d", "laplace3d"],
    "reduction": ["dot", "row_sum", "int_stats"],
    "scan": ["segmented_scan"],
    "transpose": ["transpose"],
    "row-wise softmax and layernorm": ["softmax", "layernorm"],
    "GEMV": ["gemv"],
    "2D convolution": ["conv2d"],
}


def marked(kernels, stages: tuple[str, ...]):
    """Each kernel as a test parameter, xfail (naming the feature) where it waits on one at one of `stages`."""
    return [pytest.param(k, id=k.name, marks=[pytest.mark.xfail(reason=f"needs {k.pending.feature}", strict=False)]
                         if k.pending and k.pending.stage in stages else []) for k in kernels]


def configurations(spec: KernelSpec) -> list[dict]:
    """Every configuration of the spec's space that meets its restrictions, over its submitted defines."""
    names = list(spec.tune_params)
    every = [dict(zip(names, values)) for values in itertools.product(*spec.tune_params.values())]
    return [{**spec.baseline_params(), **config} for config in every if spec.restrictions_hold(config)]


def compiles_everywhere(spec: KernelSpec) -> None:
    """The spec's kernel compiles in every configuration and its PTX parameters fit the spec's args."""
    def compile_one(params: dict) -> str:
        compiled = compile_kernel(spec.source, spec.kernel_name, params, spec.compiler_options, ARCH)
        assert compiled.cubin, params
        return ""

    configs = configurations(spec) or [spec.baseline_params()]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(compile_one, configs))
    types = parameter_types(spec.source, spec.kernel_name, spec.baseline_params(), spec.compiler_options, ARCH)
    assert mismatches(spec.args, types) == []


def test_the_corpus_has_twenty_kernels_and_covers_every_kind_asked_for():
    names = {k.name for k in KERNELS}
    assert len(names) >= 20
    for kind, covering in COVERAGE.items():
        assert covering and set(covering) <= names, kind
    assert len(COVERAGE["blockDim instead of kforge's defines"]) >= len(names) - 1
    for k in KERNELS:
        assert k.source_path.is_file() and k.rewrite_path.is_file(), k.name


@pytest.mark.parametrize("kernel", marked(KERNELS, ("load",)))
def test_the_spec_loads_on_every_path(kernel):
    spec = kernel.spec()
    assert spec.tune_params and any(a.is_output for a in spec.args)
    for path in PATHS:
        assert kernel.job(path).strategy.name == path


@pytest.mark.parametrize("kernel", marked(KERNELS, ("load", "compile")))
def test_the_kernel_compiles_in_every_configuration_and_matches_its_signature(kernel):
    compiles_everywhere(kernel.spec())


@pytest.mark.parametrize("kernel", marked(KERNELS, ("load", "compile")))
def test_the_rewrite_becomes_a_candidate_that_compiles_in_every_configuration(kernel, store, messages_api, tmp_path):
    settings = Settings(KFORGE_HOME=str(tmp_path), ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=messages_api.url,
                        KFORGE_LLM_MAX_RETRIES=0)
    messages_api.answer(kernel.rewrite())
    spec = kernel.job("one_prompt")

    generated_event = generated(store, settings, spec)
    candidate = generated_event.candidate

    assert not any("dropped" in why for why in generated_event.renames.values()), generated_event.renames
    assert candidate.source.strip() != spec.source.strip()
    compiles_everywhere(spec.for_candidate(candidate))
