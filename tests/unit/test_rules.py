"""The offline rule engine: which kernels each rule takes (and why not), that every rewrite compiles with NVRTC
for the configurations of its tune parameters in every order the rules compose in, that the vectorized
geometry covers odd sizes, and that the provider answers every request kind in the format the planner reads."""
import itertools
import math
import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.answers import parse
from services.generator.providers.base import Attempt, Prompt, ProviderFailed
from services.generator.providers.rules import RulesProvider
from services.generator.rules.cuda_text import IDENTIFIER, mask, normalised
from services.generator.rules.elementwise import NotElementwise, model
from shared.adapters.device.compiler import compile_kernel
from shared.domain.spec import CandidateSpec, KernelSpec, TuningStep
from tests.conftest import EXAMPLES
from tests.corpus_kernels import corpus
from tests.unit.test_rules_shapes import assert_compiles_and_keeps_signature

ARCH = "sm_90"
# The rules an elementwise kernel takes (the default explicit steps); tests/unit/test_rules_shapes.py covers the rest.
FIRST_RULES = ("block_size", "restrict", "elements_per_thread", "vectorize", "unroll", "launch_bounds")
SIGNATURE = 'extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {\n'


def example(name: str) -> KernelSpec:
    spec = load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml")
    return spec.model_validate({**spec.model_dump(), "strategy": {"name": "baseline"}})


def variant(spec: KernelSpec, body: str, **fields) -> KernelSpec:
    """vector_add's arguments with another kernel body (and other spec fields)."""
    return spec.model_validate({**spec.model_dump(), "source": SIGNATURE + body + "}\n", **fields})


VECTOR_ADD, MATMUL, REDUCTION = example("vector_add"), example("matmul"), example("reduction")
# vector_add as it is often first written: blockDim.x and no tune space, so block_size applies too.
UNTUNED = VECTOR_ADD.model_validate({
    **VECTOR_ADD.model_dump(), "tune_params": {}, "params": {},
    "source": VECTOR_ADD.source.replace("blockIdx.x * block_size_x", "blockIdx.x * blockDim.x")})


@cache
def _compile(source: str, kernel_name: str, defines: tuple) -> None:
    compile_kernel(source, kernel_name, dict(defines), [], ARCH)


def compiles(spec: KernelSpec, candidate: CandidateSpec, configurations: list[dict]) -> None:
    """NVRTC compiles the candidate with each configuration (each distinct kernel once: the header is a comment)."""
    for params in configurations:
        defines = {**spec.baseline_params(), **candidate.params, **params}
        _compile(normalised(candidate.source), spec.kernel_name, tuple(sorted(defines.items())))


def every_configuration(candidate: CandidateSpec) -> list[dict]:
    names = list(candidate.tune_params)
    return [dict(zip(names, values)) for values in itertools.product(*candidate.tune_params.values())]


def assert_consistent(candidate: CandidateSpec, carried: tuple[str, ...]) -> None:
    """The header lists the rules, the code reads every tune parameter by its exact name, and the default
    configuration is a point of the space."""
    assert candidate.source.startswith(f"// kforge rules: {', '.join(carried)}\n")
    assert rules.applied(candidate.source) == carried
    code = set(IDENTIFIER.findall(mask(candidate.source)))
    assert set(candidate.tune_params) <= code, set(candidate.tune_params) - code
    assert all(candidate.params[name] in values for name, values in candidate.tune_params.items())


# --- which kernels are elementwise ---------------------------------------------------------------------
def test_vector_add_is_elementwise():
    kernel = model(VECTOR_ADD)
    assert (kernel.index, kernel.index_type, kernel.bound, kernel.block_x) == ("i", "int", "n", "block_size_x")
    assert kernel.body == "c[i] = a[i] + b[i];"
    assert kernel.arrays == {"c": "float32", "a": "float32", "b": "float32"}


@pytest.mark.parametrize("spec", [MATMUL, REDUCTION], ids=["matmul", "reduction"])
def test_matmul_and_reduction_are_not_elementwise(spec):
    with pytest.raises(NotElementwise, match="does not start with an index definition"):
        model(spec)
    for rule_id in ("elements_per_thread", "vectorize"):
        reason = rules.check(rule_id, spec, spec.as_candidate())
        assert f"{rule_id} takes an elementwise kernel" in reason and "and this one is not" in reason


@pytest.mark.parametrize("body", [
    "    int i = threadIdx.x + blockDim.x * blockIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n",
    "    const size_t i = (blockIdx.x * blockDim.x) + threadIdx.x;\n    if (i < n) {\n        c[i] = a[i] + b[i];\n    }\n",
    "    unsigned i = block_size_x * blockIdx.x + threadIdx.x; // one element\n    if (i < n) { c[i] = a[i] + b[i]; }\n",
])
def test_spellings_of_the_elementwise_pattern(body):
    assert model(variant(VECTOR_ADD, body)).body == "c[i] = a[i] + b[i];"


@pytest.mark.parametrize("body, reason", [
    ("int i = blockIdx.x * blockDim.x + threadIdx.x * 2;\n if (i < n) c[i] = a[i];", "the index i is"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n c[i] = a[i];", "not followed by a guard"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i <= n) c[i] = a[i];", "not `if (i < bound)`"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i < n) c[i] = a[i + 1];", "subscript [i + 1]"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i < n) c[i] = a[i];\n b[0] = 0;", "code follows"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i < n) { if (a[i] < 0) return; c[i] = a[i]; }", "uses return"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i < n) c[i] = *(a + i);", "uses a other than as a[i]"),
    ("int i = blockIdx.x * blockDim.x + threadIdx.x;\n if (i < n) { c[i] = a[i]; i++; }", "changes the index i"),
])
def test_what_is_not_elementwise_and_why(body, reason):
    with pytest.raises(NotElementwise, match=re.escape(reason)):
        model(variant(VECTOR_ADD, body + "\n"))


# --- check: when a rule applies, and the reason when not -------------------------------------------------
def test_check_on_the_vector_add_example():
    current = VECTOR_ADD.as_candidate()
    reasons = {rule.id: rules.check(rule.id, VECTOR_ADD, current) for rule in rules.CATALOG}
    assert {rule_id: reasons.pop(rule_id) for rule_id in FIRST_RULES} == {
        "block_size": "block_size_x is already a tune parameter of the current kernel",
        "restrict": None, "elements_per_thread": None, "vectorize": None,
        "unroll": "the kernel has no loops", "launch_bounds": None}
    for rule_id in (r for r in rules.STRUCTURAL if rules.RULES[r].rendered):  # they name the shape they found
        assert reasons.pop(rule_id).endswith("(it is an elementwise kernel)")
    assert reasons == {"shuffle_reduction": "the kernel has no shared-memory tree reduction (a loop halving s from "
                                            "the block size, `if (tid < s) red[tid] += red[tid + s]; __syncthreads();`)",
                       "scan_vectors": "the kernel has no shared-memory block scan inside a loop over a row's chunks "
                                       "of the block's width (load buf[tid], barrier, scan, store carry + buf[tid], "
                                       "carry += buf[width - 1], barrier)",
                       "shuffle_scan": "the kernel has no shared-memory block scan (a loop doubling offset from 1 to "
                                       "the block size, `t = tid >= offset ? buf[tid - offset] : 0; __syncthreads(); "
                                       "buf[tid] += t; __syncthreads();`)",
                       "vectorize_loops": "the kernel is elementwise: the vectorize rule widens it, with a grid to "
                                          "match",
                       "batch_loads": "the kernel has no loop a thread walks a step at a time (`for (int i = a; "
                                      "i < b; i += s)`)"}
    assert rules.check("tiling", VECTOR_ADD, current).startswith("no offline rule is named tiling")
    with pytest.raises(rules.RuleNotApplicable, match="block_size_x is already a tune parameter"):
        rules.apply("block_size", VECTOR_ADD, current)


def test_rules_are_refused_once_carried_or_written_by_hand():
    restricted = rules.apply("restrict", VECTOR_ADD, VECTOR_ADD.as_candidate())
    assert rules.check("restrict", VECTOR_ADD, restricted) == "the current kernel already carries restrict"
    by_hand = CandidateSpec(source=rules.apply("launch_bounds", VECTOR_ADD, restricted).source.split("\n", 1)[1])
    assert rules.applied(by_hand.source) == ()
    assert rules.check("restrict", VECTOR_ADD, by_hand) == "every pointer parameter already carries __restrict__"
    assert rules.check("launch_bounds", VECTOR_ADD, by_hand) == "the kernel already declares __launch_bounds__"


def test_elementwise_rules_refuse_a_kernel_the_rules_did_not_write():
    rewritten_elsewhere = CandidateSpec(source=(EXAMPLES.parent / "tests/corpus/vector_add/good_grid_stride.cu").read_text())
    assert "neither the submitted one nor an offline-rules rewrite" in rules.check(
        "elements_per_thread", VECTOR_ADD, rewritten_elsewhere)
    assert rules.check("restrict", VECTOR_ADD, rewritten_elsewhere) is None  # textual rules edit any kernel


def test_vectorize_takes_8_byte_elements_two_a_vector():
    doubles = VECTOR_ADD.model_validate({
        **VECTOR_ADD.model_dump(), "source": VECTOR_ADD.source.replace("float", "double"),
        "args": [{**a.model_dump(), "dtype": "float64"} if a.is_array else a.model_dump() for a in VECTOR_ADD.args]})
    candidate = rules.apply("vectorize", doubles, doubles.as_candidate())
    assert "struct __align__(16) double_x2 { double lane[2]; };" in candidate.source
    assert candidate.grid_div_x[-1] == 2
    assert rules.check("elements_per_thread", doubles, doubles.as_candidate()) is None


def test_block_size_needs_a_kernel_that_reads_its_block_width():
    fixed = variant(UNTUNED, "    int i = blockIdx.x * 256 + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n")
    assert "never reads its block width" in rules.check("block_size", fixed, fixed.as_candidate())


# --- the rewrites --------------------------------------------------------------------------------------
def test_restrict_follows_the_roles():
    source = rules.apply("restrict", VECTOR_ADD, VECTOR_ADD.as_candidate()).source
    assert ("vector_add(float *__restrict__ c, const float *__restrict__ a, const float *__restrict__ b, int n)"
            in source)


# An input the body uses otherwise than read through subscripts keeps its declared constness: a const there would
# not compile (found by review: each compiled as submitted and failed under NVRTC after restrict).
NOT_CONST = {
    "passed to a helper": ("__device__ float fetch(float *p, int i) { return p[i]; }\n", "out[i] = fetch(in, i) * 2.0f;"),
    "a row pointer": ("", "float *row = in + i; out[i] = row[0] + 1.0f;"),
    "a pointer chosen": ("", "float *src = i % 2 ? in : out; out[i] = src[i];"),
    "a reference to an element": ("", "float &r = in[i]; out[i] = r * 2.0f;"),
    "an element's address passed on": ("__device__ float twice(float *p) { return 2.0f * *p; }\n",
                                       "out[i] = twice(&in[i]);"),
    "a cast": ("", "out[i] = reinterpret_cast<float2 *>(in)[i / 2].x;"),
}


def one_input_kernel(body: str, helper: str = "") -> KernelSpec:
    """`k(float *out, float *in, int n)` running `body` for each i below n, `helper` defined before it."""
    source = (f'{helper}extern "C" __global__ void k(float *out, float *in, int n)\n{{\n'
              f'    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) {{ {body} }}\n}}\n')
    return KernelSpec.model_validate({
        "kernel_name": "k", "source": source, "sizes": {"n": 1000}, "problem_size": ["n"],
        "args": [{"name": "out", "dtype": "float32", "shape": ["n"], "role": "out"},
                 {"name": "in", "dtype": "float32", "shape": ["n"]}, {"name": "n", "dtype": "int32", "value": "n"}],
        "params": {"block_size_x": 256}, "tune_params": {"block_size_x": [128, 256]}})


@pytest.mark.parametrize("case", list(NOT_CONST))
def test_restrict_leaves_an_input_used_otherwise_than_read_as_declared(case):
    helper, body = NOT_CONST[case]
    spec_ = one_input_kernel(body, helper)
    candidate = rules.apply("restrict", spec_, spec_.as_candidate())
    assert "k(float *__restrict__ out, float *__restrict__ in, int n)" in candidate.source
    assert_compiles_and_keeps_signature(spec_, candidate)


def test_restrict_makes_an_input_read_through_ldg_or_a_const_pointer_const():
    spec_ = one_input_kernel("const float *p = &in[i]; out[i] = __ldg(&in[i]) + *p;")
    candidate = rules.apply("restrict", spec_, spec_.as_candidate())
    assert "k(float *__restrict__ out, const float *__restrict__ in, int n)" in candidate.source
    assert_compiles_and_keeps_signature(spec_, candidate)


def test_block_size_keeps_a_2d_block_within_1024_threads():
    """A 2D kernel's tuned width times its height stays a block that launches (found by review: widths of 256 to
    1,024 were offered beside a height of 8)."""
    spec_ = KernelSpec.model_validate({
        "kernel_name": "t", "source": 'extern "C" __global__ void t(float *out, const float *in, int w, int h)\n{\n'
        "    int x = blockIdx.x * blockDim.x + threadIdx.x;\n    int y = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "    if (x < w && y < h) out[x * h + y] = in[y * w + x];\n}\n",
        "sizes": {"w": 100, "h": 60}, "problem_size": ["w", "h"], "params": {"block_size_x": 32, "block_size_y": 8},
        "tune_params": {},
        "args": [{"name": "out", "dtype": "float32", "shape": ["w", "h"], "role": "out"},
                 {"name": "in", "dtype": "float32", "shape": ["h", "w"]},
                 {"name": "w", "dtype": "int32", "value": "w"}, {"name": "h", "dtype": "int32", "value": "h"}]})
    assert rules.apply("block_size", spec_, spec_.as_candidate()).restrictions == ["block_size_x * 8 <= 1024"]
    assert rules.apply("block_size", UNTUNED, UNTUNED.as_candidate()).restrictions == []  # 1D: none needed


def test_block_size_makes_blockdim_a_tuned_constant():
    candidate = rules.apply("block_size", UNTUNED, UNTUNED.as_candidate())
    assert "blockDim" not in candidate.source and "blockIdx.x * block_size_x + threadIdx.x" in candidate.source
    assert candidate.tune_params == {"block_size_x": [32, 64, 128, 256, 512, 1024]}
    assert candidate.params == {"block_size_x": 256}


def test_vectorize_with_elements_per_thread_geometry_and_defaults():
    candidate = rules.apply("vectorize", VECTOR_ADD, rules.apply("elements_per_thread", VECTOR_ADD,
                                                                  VECTOR_ADD.as_candidate()))
    assert candidate.grid_div_x == ["block_size_x", "elements_per_thread", 4]
    assert candidate.params == {"block_size_x": 256, "elements_per_thread": 4}
    assert "reinterpret_cast<const float_x4 *>(c)" not in candidate.source  # the pure output is never read
    assert "reinterpret_cast<float_x4 *>(c)[v] = c4;" in candidate.source
    assert ("if ((reinterpret_cast<unsigned long long>(c) & 15) == 0 && (reinterpret_cast<unsigned long long>(a) & 15)"
            " == 0 && (reinterpret_cast<unsigned long long>(b) & 15) == 0) {") in candidate.source  # else one by one
    assert "for (int i = 4 * vectors + blockIdx.x * block_size_x + threadIdx.x; i < n;" in candidate.source


@pytest.mark.parametrize("n", [1, 3, 5, 4099, 999_983, 2 ** 20 + 3])
def test_the_vectorized_grid_covers_every_element_once_at_odd_sizes(n):
    """Emulates the two loops' index sets at the candidate's own launch geometry: each element is handled
    exactly once and no thread runs more than elements_per_thread iterations."""
    candidate = rules.apply("vectorize", VECTOR_ADD, rules.apply("elements_per_thread", VECTOR_ADD,
                                                                  VECTOR_ADD.as_candidate()))
    at_size = VECTOR_ADD.with_sizes({"n": n}).for_candidate(candidate)
    vectors = n // 4
    for params in every_configuration(candidate):
        (grid, _, _), block = at_size.launch_geometry({**candidate.params, **params})
        bs, ept = params["block_size_x"], params["elements_per_thread"]
        assert block == (bs, 1, 1) and grid == math.ceil(n / (bs * ept * 4))
        threads = np.arange(grid * bs)
        handled = np.zeros(n, dtype=np.int64)
        for k in range(ept + 1):  # one more round than allowed: it must find nothing left
            v = threads + k * grid * bs
            v = v[v < vectors]
            assert k < ept or v.size == 0
            for lane in range(4):
                np.add.at(handled, 4 * v + lane, 1)
        tail = 4 * vectors + threads
        np.add.at(handled, tail[tail < n], 1)
        assert (handled == 1).all()


@pytest.mark.parametrize("spec, rule_id", [
    (VECTOR_ADD, "restrict"), (VECTOR_ADD, "elements_per_thread"), (VECTOR_ADD, "vectorize"),
    (VECTOR_ADD, "launch_bounds"), (UNTUNED, "block_size"), (UNTUNED, "elements_per_thread"),
    (REDUCTION, "restrict"), (REDUCTION, "unroll"), (REDUCTION, "launch_bounds"),
], ids=lambda value: value if isinstance(value, str) else "untuned" if value is UNTUNED else value.kernel_name)
def test_each_rule_compiles_for_every_configuration(spec, rule_id):
    candidate = rules.apply(rule_id, spec, spec.as_candidate())
    assert_consistent(candidate, (rule_id,))
    compiles(spec, candidate, every_configuration(candidate))


@pytest.mark.parametrize("rule_id", ["restrict", "unroll", "launch_bounds"])
def test_generic_rules_compile_on_matmul(rule_id):
    """matmul's space is large: its default configuration, and the corpus's with every value of what the rule
    adds."""
    candidate = rules.apply(rule_id, MATMUL, MATMUL.as_candidate())
    assert_consistent(candidate, (rule_id,))
    added = rules.RULES[rule_id].tune_params(MATMUL)
    corpus = {"block_size_x": 32, "block_size_y": 8, "tile_size_x": 4, "tile_size_y": 2}
    compiles(MATMUL, candidate, [{}, *({**corpus, **dict(zip(added, values))}
                                       for values in itertools.product(*added.values()))])


def compositions(spec: KernelSpec) -> tuple[dict[str, CandidateSpec], list[CandidateSpec]]:
    """Every order of applying the rules, each rule taken as soon as it applies or later: the distinct
    kernels met on the way, and the kernels at which no rule was left to apply. Orders that reach the same
    kernel with the same rules (in another order) go on alike, so each such state is extended once."""
    met, ends, extended = {}, [], set()

    def extend(current: CandidateSpec, remaining: tuple[str, ...]) -> None:
        state = (normalised(current.source), frozenset(rules.applied(current.source)))
        if state in extended:
            return
        extended.add(state)
        applicable = [rule_id for rule_id in remaining if rules.check(rule_id, spec, current) is None]
        if not applicable:
            ends.append(current)
        for rule_id in applicable:
            following = rules.apply(rule_id, spec, current)
            assert_consistent(following, (*rules.applied(current.source), rule_id))
            met.setdefault(normalised(following.source), following)
            extend(following, tuple(r for r in remaining if r != rule_id))

    extend(spec.as_candidate(), FIRST_RULES)
    return met, ends


@pytest.mark.parametrize("spec", [VECTOR_ADD, UNTUNED], ids=["vector_add", "vector_add_untuned"])
def test_every_composition_order_compiles_and_agrees(spec):
    met, ends = compositions(spec)
    by_rules = {}
    for end in ends:  # the same rules in any order give the same kernel (headers aside)
        by_rules.setdefault(frozenset(rules.applied(end.source)), {})[normalised(end.source)] = end
    assert all(len(kernels) == 1 for kernels in by_rules.values())
    everything = set(FIRST_RULES) - ({"block_size"} if spec is VECTOR_ADD else set())
    assert frozenset(everything) in by_rules  # unroll only applies once vectorize made a tail loop
    for candidate in met.values():
        compiles(spec, candidate, [{}])
    for kernels in by_rules.values():
        for end in kernels.values():
            compiles(spec, end, every_configuration(end))


def test_a_vectorized_body_with_several_statements_and_an_inout_array():
    saxpy = variant(VECTOR_ADD, "    int i = blockIdx.x * block_size_x + threadIdx.x;\n    if (i < n) {\n"
                                "        float t = a[i] * b[i];  // scaled\n        c[i] += t + i;\n    }\n",
                    args=[{**a.model_dump(), "role": "inout"} if a.name == "c" else a.model_dump()
                          for a in VECTOR_ADD.args])
    candidate = rules.apply("vectorize", saxpy, rules.apply("elements_per_thread", saxpy, saxpy.as_candidate()))
    assert "float_x4 c4 = reinterpret_cast<const float_x4 *>(c)[v];" in candidate.source  # read before written
    assert "const int i = 4 * v + k;" in candidate.source and "c4.lane[k] += t + i;" in candidate.source
    compiles(saxpy, candidate, [{"block_size_x": 128, "elements_per_thread": ept} for ept in (1, 16)])


# --- the provider ---------------------------------------------------------------------------------------
def prompt(kind: str, spec: KernelSpec = VECTOR_ADD, current: CandidateSpec | None = None, step: str | None = None,
           focus: str | None = None, history: tuple[Attempt, ...] = ()) -> Prompt:
    return Prompt(kind=kind, system="", text="", spec=spec, current=current or spec.as_candidate(),
                  step=TuningStep(id=step) if step else None, focus=focus, history=history)


def answer(p: Prompt):
    reply = RulesProvider().complete(p)
    assert (reply.model, reply.input_tokens, reply.output_tokens, reply.cost_usd) == ("kforge-rules", 0, 0, 0.0)
    return parse(p.kind, reply.text)


@pytest.mark.parametrize("focus, order", [
    (None, ["restrict", "elements_per_thread", "vectorize", "launch_bounds"]),
    ("SLOW", ["vectorize", "elements_per_thread", "restrict", "launch_bounds"]),
    ("MODERATE", ["elements_per_thread", "vectorize", "restrict", "launch_bounds"]),
    ("GOOD", ["launch_bounds", "restrict", "elements_per_thread", "vectorize"]),
])
def test_plan_lists_the_applicable_rules_in_focus_order(focus, order):
    plan = answer(prompt("plan", focus=focus))
    assert [step.id for step in plan.steps] == order
    assert plan.steps[order.index("elements_per_thread")].tune_params == {"elements_per_thread": [1, 2, 4, 8, 16]}
    assert all(step.description == rules.RULES[step.id].description for step in plan.steps)


def test_replan_leaves_out_what_the_kernel_carries_and_what_was_tried():
    current = rules.apply("restrict", VECTOR_ADD, VECTOR_ADD.as_candidate())
    discarded = rules.apply("vectorize", VECTOR_ADD, current)
    history = (Attempt("restrict", "", "accepted", "0.30 ms -> 0.29 ms", current.source),
               Attempt("iteration-2", "", "discarded", "slower", discarded.source),
               Attempt("launch_bounds", "", "invalid", "", None))
    plan = answer(prompt("replan", current=current, focus="SLOW", history=history))
    assert [step.id for step in plan.steps] == ["elements_per_thread"]
    history += (Attempt("elements_per_thread", "", "discarded", "slower", None),)
    assert answer(prompt("replan", current=current, history=history)).steps == []


def test_an_untried_alternative_is_planned_validated_and_applied_in_place_of_the_one_kept():
    """layernorm kept row_in_registers; row_in_shared, planned with it and not tried yet, rewrites the same parent
    (the kernel without the registers), so the planner compares the two ways head to head."""
    layernorm = next(kernel for kernel in corpus() if kernel.name == "layernorm").spec()
    kept = rules.apply("row_in_registers", layernorm, layernorm.as_candidate())
    history = (Attempt("row_in_registers", "", "accepted", "faster", kept.source),)
    plan = answer(prompt("replan", spec=layernorm, current=kept, history=history))
    assert [step.id for step in plan.steps][:2] == ["row_in_shared", "shuffle_reduction"]
    assert "vectorize_loops" in [step.id for step in plan.steps]
    assert answer(prompt("validate", spec=layernorm, current=kept, step="row_in_shared")).valid
    reply = RulesProvider().complete(prompt("rewrite", spec=layernorm, current=kept, step="row_in_shared"))
    assert "Applied the offline rule row_in_shared in place of row_in_registers" in reply.text
    assert rules.applied(parse("rewrite", reply.text).source) == ("row_in_shared",)
    history += (Attempt("row_in_shared", "", "discarded", "slower", parse("rewrite", reply.text).source),
                Attempt("vectorize_loops", "", "discarded", "slower", None))
    assert "row_in_shared" not in [s.id for s in answer(prompt("replan", spec=layernorm, current=kept,
                                                                     history=history)).steps]


def test_a_replacing_rewrite_arrives_without_the_replaced_kernels_restrictions_or_shared_memory():
    """The generator takes what an answer leaves out from the best kernel so far: the answer states every setting,
    so row_in_shared in place of row_in_registers does not inherit row_chunks' restrictions (which name a parameter
    it no longer has), nor row_in_registers in place of row_in_shared the shared memory it no longer needs."""
    from types import SimpleNamespace

    from services.generator.handlers import _candidate

    layernorm = next(kernel for kernel in corpus() if kernel.name == "layernorm").spec()
    for kept_rule, rule_id in (("row_in_registers", "row_in_shared"), ("row_in_shared", "row_in_registers")):
        kept = rules.apply(kept_rule, layernorm, layernorm.as_candidate())
        reply = RulesProvider().complete(prompt("rewrite", spec=layernorm, current=kept, step=rule_id))
        expected = rules.apply(rule_id, layernorm, kept, replacing=True)
        best = SimpleNamespace(best=SimpleNamespace(candidate=kept, params=kept.params))
        arrived, _ = _candidate(parse("rewrite", reply.text), TuningStep(id=rule_id), layernorm, best)
        assert (arrived.restrictions, arrived.smem_args, arrived.tune_params) == (
            expected.restrictions, expected.smem_args, expected.tune_params), rule_id
    assert kept.smem_args is not None and arrived.smem_args is None  # the registers need no shared memory


def test_one_prompt_keeps_the_first_of_two_alternatives():
    layernorm = next(kernel for kernel in corpus() if kernel.name == "layernorm").spec()
    rewrite = answer(prompt("rewrite", spec=layernorm, step="one_prompt"))
    assert "row_in_registers" in rules.applied(rewrite.source)
    assert not {"row_in_shared", "vectorize_loops"} & set(rules.applied(rewrite.source))


def test_validate_and_breakdown():
    assert answer(prompt("validate", step="vectorize")).valid
    verdict = answer(prompt("validate", step="block_size"))
    assert not verdict.valid and verdict.reason == "block_size_x is already a tune parameter of the current kernel"
    verdict = answer(prompt("validate", step="use_shared_memory"))
    assert not verdict.valid and "no offline rule implements step use_shared_memory" in verdict.reason
    assert "ANTHROPIC_API_KEY" in verdict.reason
    assert answer(prompt("breakdown", step="vectorize")).steps == []


def test_rewrite_of_a_rule_round_trips_through_the_answer_format():
    rewrite = answer(prompt("rewrite", step="vectorize"))
    candidate = CandidateSpec(source=rewrite.source, **rewrite.settings)
    assert rules.applied(candidate.source) == ("vectorize",)
    assert rewrite.settings["grid_div_x"] == ["block_size_x", 4]
    # the parsed answer is the next current kernel, and the engine still recognises it as its own
    rewrite = answer(prompt("rewrite", current=candidate, step="elements_per_thread"))
    assert rules.applied(rewrite.source) == ("vectorize", "elements_per_thread")
    assert rewrite.settings["grid_div_x"] == ["block_size_x", "elements_per_thread", 4]


def test_one_prompt_applies_everything_that_applies():
    rewrite = answer(prompt("rewrite", step="one_prompt"))
    assert rules.applied(rewrite.source) == ("restrict", "elements_per_thread", "vectorize", "unroll", "launch_bounds")
    assert set(rewrite.settings["tune_params"]) == {"block_size_x", "elements_per_thread", "loop_unroll_factor"}
    candidate = CandidateSpec(source=rewrite.source, **rewrite.settings)
    with pytest.raises(ProviderFailed, match="no offline rule applies"):
        RulesProvider().complete(prompt("rewrite", current=candidate, step="one_prompt"))


def test_a_refinement_step_takes_the_first_untried_rule_in_focus_order():
    tried = (Attempt("iteration-1", "", "discarded", "slower",
                     rules.apply("vectorize", VECTOR_ADD, VECTOR_ADD.as_candidate()).source),)
    rewrite = answer(prompt("rewrite", step="iteration-2", focus="SLOW", history=tried))
    assert rules.applied(rewrite.source) == ("elements_per_thread",)


def test_a_rewrite_nothing_applies_to_fails_with_the_reasons():
    with pytest.raises(ProviderFailed, match="rule block_size does not apply: block_size_x is already"):
        RulesProvider().complete(prompt("rewrite", step="block_size"))
    everything = answer(prompt("rewrite", step="one_prompt"))
    done = CandidateSpec(source=everything.source, **everything.settings)
    with pytest.raises(ProviderFailed, match="no offline rule is left .* restrict: the current kernel already carries"):
        RulesProvider().complete(prompt("rewrite", current=done, step="iteration-3"))



def test_a_textual_rule_whose_code_a_later_edit_replaced_leaves_with_its_parameter():
    """unroll's pragma on the one loop, a shared-memory tree, which shuffle_reduction then rewrites: unroll leaves
    the header and loop_unroll_factor the space, as where a rendering replaces it (review, helper-98). The style's
    block_sum writing its block's sum to a slot of its own, so no reading takes the tree away first."""
    styles = Path(__file__).resolve().parent.parent / "corpus" / "styles"
    block_sum = load_spec(styles / "block_sum.cu", styles / "block_sum.yaml")
    per_block = block_sum.model_validate({
        **block_sum.model_dump(),
        "source": block_sum.source.replace("atomicAdd(total, cache[0]);", "total[blockIdx.x] = cache[0];"),
        "args": [{**a.model_dump(), "shape": ["n / 32"]} if a.name == "total" else a.model_dump()
                 for a in block_sum.args]})
    unrolled = rules.apply("unroll", per_block, per_block.as_candidate())
    assert rules.applied(unrolled.source) == ("unroll",) and "loop_unroll_factor" in unrolled.tune_params
    shuffled = rules.apply("shuffle_reduction", per_block, unrolled)
    assert rules.applied(shuffled.source) == ("shuffle_reduction",)
    assert "loop_unroll_factor" not in shuffled.tune_params and "loop_unroll_factor" not in shuffled.params
