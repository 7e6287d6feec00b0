"""The cheat catalogue on a machine without a GPU: every scripted answer goes through the generator as Claude's
answer over the loopback Messages API, becomes a candidate, compiles in the sandbox for sm_90 and matches the
kernel's signature, so that on the GPU each one reaches the checks it is there to test. The one answer whose
catch is the compile itself (a device-side launch) must fail to compile, saying why."""

import pytest

from shared.adapters.device.compiler import compile_kernel, parameter_types
from shared.adapters.device.nvrtc import CompileError
from shared.adapters.settings import Settings
from shared.domain.signature import mismatches
from tests.cheat_cases import load_cheats
from tests.messages_api import messages_api  # noqa: F401  (fixture)
from tests.one_prompt_answers import generated

CHEATS = load_cheats()
ARCH = "sm_90"


def test_the_catalogue_covers_every_family_and_both_examples():
    families = {c.family for c in CHEATS if not c.honest}
    assert len(families) == 15
    assert {c.spec.kernel_name for c in CHEATS if c.honest} == {"vector_add", "matmul"}
    assert {c.spec.kernel_name for c in CHEATS if not c.honest} == {"vector_add", "matmul"}
    assert all("accepted" not in c.expect for c in CHEATS if not c.honest)


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda c: c.id)
def test_the_answer_becomes_a_candidate_that_compiles_and_matches_the_signature(cheat, store, messages_api, tmp_path):
    settings = Settings(KFORGE_HOME=str(tmp_path), ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=messages_api.url,
                        KFORGE_LLM_MAX_RETRIES=0)
    messages_api.answer(cheat.answer)

    candidate = generated(store, settings, cheat.spec).candidate

    assert messages_api.requests[0].body["messages"][0]["content"].count("__global__") == 1  # the example, asked about
    spec, params = cheat.spec, {**cheat.spec.baseline_params(), **candidate.params}
    name = candidate.kernel_name or spec.kernel_name
    if cheat.expect == ("verify:compile",):
        with pytest.raises(CompileError) as refused:
            compile_kernel(candidate.source, name, params, spec.compiler_options, ARCH)
        assert "device-side kernel launch" in refused.value.log
        return
    compiled = compile_kernel(candidate.source, name, params, spec.compiler_options, ARCH)
    assert compiled.cubin and compiled.arch == ARCH
    assert mismatches(spec.args, parameter_types(candidate.source, name, params, spec.compiler_options, ARCH)) == []
    # The candidate runs in its own configuration: every value of its space is the one the answer chose.
    assert all(candidate.params[k] == v[0] for k, v in candidate.tune_params.items() if len(v) == 1)
