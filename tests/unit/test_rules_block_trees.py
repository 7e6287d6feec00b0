"""A block's shared-memory tree sum handed to one atomic, read as the accumulation it computes
(services/generator/rules/block_trees.py): hierarchical_reduction then renders it, and nothing is read so where the
tree could add other values than each of its block's once. The emulation (test_rules_reduction_emulated.py) and the
GPU (tests/gpu/test_rules_shapes_verified.py) check the rewrites' sums."""
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.block_trees import atomic_form
from services.generator.rules.canonical import canonical
from services.generator.rules.shapes import recognise
from tests.unit.rules_variants import (BLOCK_TREE_COUNT, BLOCK_TREE_DYNAMIC, BLOCK_TREE_MSE, DOT_BY_EXAMPLE,
                                       HARRIS_STRIDED_ATOMIC, REDUCE_INTERLEAVED, edited)

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
BLOCK_SUM = load_spec(STYLES / "block_sum.cu", STYLES / "block_sum.yaml")


def squeezed(text: str) -> str:
    return " ".join(text.split())


def test_a_tree_sum_handed_to_one_atomic_is_read_as_the_accumulation_it_computes():
    read = atomic_form(canonical(BLOCK_SUM))
    assert squeezed("{ int i = blockIdx.x * blockDim.x + threadIdx.x; "  # tid, read by the tree alone, goes
                    "if (i < n) atomicAdd(total, (float)(in[i])); }") in squeezed(read.source)
    assert "__shared__" not in read.source and "__syncthreads" not in read.source
    counted = atomic_form(canonical(BLOCK_TREE_COUNT))
    assert "if (i < n) atomicAdd(count, (unsigned int)(v[i] & 1));" in counted.source
    for spec in (BLOCK_SUM, BLOCK_TREE_COUNT):
        assert recognise(spec)[0].name == "atomic_accumulation"
        candidate = rules.apply("hierarchical_reduction", spec, spec.as_candidate())
        assert "elements_per_thread" in candidate.tune_params and "__shfl_down_sync" in candidate.source


LOADS = {
    "ternary": "partial[t] = (i < n) ? v[i] & 1 : 0u;",
    "zero_then_if": "partial[t] = 0;\n    if (i < n) partial[t] = v[i] & 1;",
    "through_a_local": "int odd = 0;\n    if (i < n) { odd = v[i] & 1; }\n    partial[t] = odd;",
}


@pytest.mark.parametrize("load", list(LOADS))
def test_a_threads_value_is_read_however_the_kernel_puts_it_in_the_array(load):
    spec = edited(BLOCK_TREE_COUNT, "if (i < n) partial[t] = v[i] & 1; else partial[t] = 0;", LOADS[load])
    value = "(int)(v[i] & 1)" if load == "through_a_local" else "v[i] & 1"
    assert f"if (i < n) atomicAdd(count, (unsigned int)({value}));" in atomic_form(canonical(spec)).source
    assert rules.check("hierarchical_reduction", spec, spec.as_candidate()) is None


def test_a_tree_in_dynamic_shared_memory_is_read_where_every_launch_gives_it_a_block_of_entries():
    read = atomic_form(canonical(BLOCK_TREE_DYNAMIC))
    assert "if (i < n) atomicAdd(g_odata, (float)(g_idata[i]));" in read.source
    assert rules.check("hierarchical_reduction", BLOCK_TREE_DYNAMIC, BLOCK_TREE_DYNAMIC.as_candidate()) is None
    for size in ("block_size_x * 2", "256 * 4"):  # half a block of floats; a fixed 256, which 512 threads pass
        short = BLOCK_TREE_DYNAMIC.model_validate({**BLOCK_TREE_DYNAMIC.model_dump(), "smem_args": {"size": size}})
        assert atomic_form(canonical(short)) is None
    bare = BLOCK_TREE_DYNAMIC.model_validate({**BLOCK_TREE_DYNAMIC.model_dump(), "smem_args": None})
    assert atomic_form(canonical(bare)) is None  # no dynamic shared memory at all


def test_a_value_computed_in_a_block_and_a_scaled_sum_are_read():
    """The square through a local of the if's own; the block's sum times 1/n, each value scaled so as it is added."""
    read = atomic_form(canonical(BLOCK_TREE_MSE))
    assert "if (i < n) { float e = a[i] - b[i]; atomicAdd(out, (float)((float)(e * e)) * (inv_n)); }" in read.source
    for factor in ("2.0f * cache[0]", "cache[0] / (float)n", "cache[0] / n", "cache[0] * (1.0f / n)"):
        scaled = edited(BLOCK_TREE_MSE, "cache[0] * inv_n", factor)
        assert rules.check("hierarchical_reduction", scaled, scaled.as_candidate()) is None, factor
    for other in ("cache[0] * inv_n + 1.0f", "cache[0] * a[0]", "cache[0] * cache[1]", "2.0f * cache[0] / n"):
        assert atomic_form(canonical(edited(BLOCK_TREE_MSE, "cache[0] * inv_n", other))) is None, other
    counted = edited(BLOCK_TREE_COUNT, "atomicAdd(count, partial[0]);", "atomicAdd(count, partial[0] / 2);")
    assert atomic_form(canonical(counted)) is None  # an integer sum halved is not the sum of the halves
    within = edited(BLOCK_TREE_MSE, "float e = a[i] - b[i];", "float e = a[i] - cache[0];")
    assert atomic_form(canonical(within)) is None  # the block's computation reads the tree's array


def test_trees_doubling_their_stride_are_read_as_the_halving_ones():
    """Harris's interleaved (`tid % (2 * s) == 0`) and strided (`index = 2 * s * tid`) addressing: each adds a
    block of a power of two threads into entry 0."""
    strided = atomic_form(canonical(HARRIS_STRIDED_ATOMIC))
    assert "if (i < n) atomicAdd(g_odata, (float)(g_idata[i]));" in strided.source
    interleaved = edited(REDUCE_INTERLEAVED, "g_odata[blockIdx.x] = sdata[0];", "atomicAdd(g_odata, sdata[0]);")
    assert "if (i < n) atomicAdd(g_odata, (int)(g_idata[i]));" in atomic_form(canonical(interleaved)).source
    for other in ("if (index <= blockDim.x)", "if (index < blockDim.x - 1)"):  # a step past the block, or short
        assert atomic_form(canonical(edited(HARRIS_STRIDED_ATOMIC, "if (index < blockDim.x)", other))) is None
    for other in ("int index = 2 * tid;", "int index = s * tid;", "int index = 2 * s * i;"):
        assert atomic_form(canonical(edited(HARRIS_STRIDED_ATOMIC, "int index = 2 * s * tid;", other))) is None
    for other in ("tid % s == 0", "tid % (2 * s) == 1", "tid % (4 * s) == 0"):
        assert atomic_form(canonical(edited(interleaved, "tid % (2 * s) == 0", other))) is None
    assert atomic_form(canonical(edited(interleaved, "s *= 2", "s *= 3"))) is None


def test_the_thread_index_may_be_spelled_both_ways_and_the_array_sized_by_the_block_size():
    """`tid` for the tree and threadIdx.x for the load or the atomic (review, helper-100); Kernel Tuner's
    `__shared__ float red[block_size_x];`, a block's entries whatever it tunes."""
    mixed = edited(edited(BLOCK_TREE_MSE, "if (tid == 0) atomicAdd", "if (threadIdx.x == 0) atomicAdd"),
                   "cache[tid] = d;", "cache[threadIdx.x] = d;")
    assert "atomicAdd(out, (float)((float)(e * e)) * (inv_n));" in atomic_form(canonical(mixed)).source
    sized = edited(edited(BLOCK_TREE_MSE, "__shared__ float cache[BLOCK];", "__shared__ float cache[block_size_x];"),
                   "#define BLOCK 256\n", "")
    sized = sized.model_validate({**sized.model_dump(), "tune_params": {"block_size_x": [64, 128, 512, 1024]}})
    assert rules.check("hierarchical_reduction", sized, sized.as_candidate()) is None


def test_a_load_reading_its_own_local_or_hiding_a_parameter_is_each_threads_value_handed_on():
    """Review, helper-100: `d = e * e + d` reads the local d, and a local of the load's block may hide the scale's
    parameter: neither is a value read into the atomic inside the block (which no longer declared d, or saw the
    local), so each thread hands its value on after the block, as it computed it."""
    for load in ("float e = a[i] - b[i]; d = e * e + d;", "float e = a[i] - b[i]; d = e * d;",
                 "float inv_n = 2.0f; float e = a[i] - b[i]; d = e * e;"):
        read = atomic_form(canonical(edited(BLOCK_TREE_MSE, "float e = a[i] - b[i];\n        d = e * e;", load)))
        assert squeezed(f"float d = 0.0f; if (i < n) {{ {load} }} atomicAdd(out, d * (inv_n)); }}") in \
            squeezed(read.source), load


def test_a_maximum_per_block_added_up_keeps_the_block_size_under_shuffles():
    """The blocks' maxima summed: another block size takes other maxima (review, helper-100), so the shuffles keep
    the submitted one, as for a result per block."""
    spec = edited(edited(REDUCE_INTERLEAVED, "sdata[tid] += sdata[tid + s];",
                         "sdata[tid] = max(sdata[tid], sdata[tid + s]);"),
                  "g_odata[blockIdx.x] = sdata[0];", "atomicAdd(g_odata, sdata[0]);")
    assert rules.apply("shuffle_reduction", spec, spec.as_candidate()).tune_params["block_size_x"] == [256]
    summed = edited(REDUCE_INTERLEAVED, "g_odata[blockIdx.x] = sdata[0];", "atomicAdd(g_odata, sdata[0]);")
    assert rules.apply("shuffle_reduction", summed, summed.as_candidate()).tune_params["block_size_x"] == [64, 128, 256]


def test_a_value_each_thread_computes_and_hands_to_the_tree_is_handed_to_the_atomic():
    """CUDA by Example's dot product: a grid-stride sum into a local, the tree a while loop on `i != 0`."""
    read = atomic_form(canonical(DOT_BY_EXAMPLE))
    assert squeezed("float temp = 0; for (int tid = threadIdx.x + blockIdx.x * blockDim.x; tid < N; "
                    "tid += blockDim.x * gridDim.x) { temp += a[tid] * b[tid]; } atomicAdd(c, temp);") in \
        squeezed(read.source)
    assert recognise(DOT_BY_EXAMPLE)[0].name == "warp_atomics"
    candidate = rules.apply("hierarchical_reduction", DOT_BY_EXAMPLE, DOT_BY_EXAMPLE.as_candidate())
    assert "elements_per_thread" not in candidate.tune_params  # its grid is fixed (grid_div_x: []): kept so


@pytest.mark.parametrize("change", [
    ("temp += a[tid] * b[tid];", "temp += a[tid] * b[tid] + cache[0];"),  # the loop reads the array
    ("    cache[cacheIndex] = temp;", "    __syncthreads();\n    cache[cacheIndex] = temp;"),  # a barrier before
    ("    cache[cacheIndex] = temp;", "    cache[cacheIndex] = temp + cache[1];"),  # the value reads it
], ids=["a_loop_reading_the_array", "a_barrier_among_the_threads_statements", "a_value_reading_the_array"])
def test_a_handed_value_that_may_see_other_threads_is_not_read_so(change):
    assert atomic_form(canonical(edited(DOT_BY_EXAMPLE, *change))) is None


def _tuned(spec, values):
    return spec.model_validate({**spec.model_dump(), "tune_params": {"block_size_x": values}, "restrictions": []})


@pytest.mark.parametrize("spec", [
    _tuned(BLOCK_TREE_COUNT, [32, 96, 128]),  # 96 threads: the tree halves 48, 24, 12, 6, 3, 1 and drops some
    _tuned(BLOCK_TREE_COUNT, [128, 256]),  # more threads than the array holds
    edited(BLOCK_TREE_COUNT, "partial[t] += partial[t + s];", "partial[t] = max(partial[t], partial[t + s]);"),
    edited(BLOCK_TREE_COUNT, "atomicAdd(count, partial[0]);", "count[blockIdx.x] = partial[0];"),  # per block
    edited(BLOCK_TREE_COUNT, "atomicAdd(count, partial[0]);", "atomicAdd(&count[blockIdx.x % 1], partial[0]);"),
    edited(BLOCK_TREE_COUNT, "if (0 == t) atomicAdd", "if (t == 1) atomicAdd"),  # another thread's entry
    edited(BLOCK_TREE_COUNT, "partial[t] = v[i] & 1; else", "partial[t] = v[i] & partial[0]; else"),
    edited(BLOCK_TREE_COUNT, "else partial[t] = 0;", "else partial[t] = 1;"),  # not the sum's identity
    edited(BLOCK_TREE_COUNT, "    __syncthreads();\n    for", "    for"),  # the load not behind a barrier
    # a tree of bytes wraps at 256, where the total does not (review, helper-97)
    edited(BLOCK_TREE_COUNT, "__shared__ unsigned int partial", "__shared__ unsigned char partial"),
    # its own block size of 96, which it tunes no more (review, helper-97)
    BLOCK_TREE_COUNT.model_validate({**BLOCK_TREE_COUNT.model_dump(), "params": {"block_size_x": 96}}),
    edited(BLOCK_TREE_COUNT, "    if (0 == t)", "    partial[t] = 0;\n    if (0 == t)"),  # more after the tree
], ids=["not_a_power_of_two", "beyond_the_array", "a_maximum", "a_result_per_block", "an_address_of_the_block",
        "another_thread", "a_value_reading_the_array", "another_identity", "no_barrier", "more_after",
        "a_narrower_tree", "its_own_block_not_a_power_of_two"])
def test_a_tree_that_may_add_otherwise_is_not_read_so(spec):
    assert atomic_form(canonical(spec)) is None
    assert rules.check("hierarchical_reduction", spec, spec.as_candidate()) is not None
