"""vectorize on elementwise kernels of 4-byte elements (saxpy, scale, relu_inplace, vector_add, an integer
variant, one reading through __ldg and one looping with while) takes the path the 2- and 1-byte kernels take, with
four lanes: 128-bit vectors only when every array is 16-byte aligned at run time, else the element loop as written.
A caller may pass a pointer into the middle of an allocation (a tensor slice from element 1), which the submitted
kernel handles and a float4 access would fault on; the verifier allocates aligned arrays, so only this shows it.
Each lane runs the body as written (the vector loop's arithmetic is the submitted kernel's, instruction for
instruction in the PTX), the accesses are 128 bits (ld.global.v4 / st.global.v4), every rewrite compiles for every
configuration of its space and keeps the signature, and the rewrites run on the CPU
(tests/unit/test_rules_vectorize16.py's emulation, with UBSan's alignment check) bit for bit as the submitted
kernels do, aligned and with each array misaligned in turn."""
import collections
import re

import pytest
from cuda.bindings import nvrtc

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import mask, normalised
from services.generator.rules.elementwise import lanes, model
from shared.adapters.device.nvrtc import compile_options, header_flags
from shared.domain.compile_policy import vetted_headers
from shared.domain.spec import KernelSpec
from tests.conftest import EXAMPLES
from tests.unit.rules_variants import (GAINED_ROWS_INDEX_LOCAL, GRID_STRIDE_ADD_LDG, ROW_ADD_OLD, SAXPY_LDG, SCALE_WHILE,
                                       array, scalar, spec)
from tests.unit.test_rules_vectorize16 import (KERNELS as NARROW, ORDERS, CORPUS, EmulatedFault, HostKernels,
                                               applied, assert_compiles_for_every_configuration,
                                               assert_computes_every_element_as_submitted, inputs, needs_gxx, run)

ARCH = "compute_90"

MIX_KEYS = spec(r"""
// 32-bit keys mixed with a hash of their index and a signed salt: unsigned and int arrays, the index read by the
// body, a local, an in-place array.
extern "C" __global__ void mix_keys(unsigned int *keys, const int *salt, unsigned int seed, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int h = (unsigned int)i * 2654435761u ^ seed;
        keys[i] = (keys[i] ^ h) + (unsigned int)salt[i];
    }
}
""", "mix_keys", [array("keys", ["n"], "uint32", "inout"), array("salt", ["n"], "int32"),
                  scalar("seed", 12345, "uint32"), scalar("n", "n")], {"n": 1 << 20}, ["n"],
    tune_params={"block_size_x": [128, 256]})


def _example(name: str) -> KernelSpec:
    return load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml")


KERNELS = {"saxpy": CORPUS["saxpy"].spec(), "scale": CORPUS["scale"].spec(),
           "relu_inplace": CORPUS["relu_inplace"].spec(), "vector_add": _example("vector_add"), "mix_keys": MIX_KEYS,
           "saxpy_ldg": SAXPY_LDG, "scale_while": SCALE_WHILE}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return HostKernels(tmp_path_factory.mktemp("emulated4"))


# --- which kernels it takes, and the rewrite's shape --------------------------------------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_vectorize_takes_4_byte_elementwise_kernels_with_four_lanes(name):
    spec_ = KERNELS[name]
    assert rules.check("vectorize", spec_, spec_.as_candidate()) is None
    assert lanes(model(spec_)) == 4


def test_saxpy_moves_four_floats_per_access_only_when_every_array_is_aligned():
    saxpy = KERNELS["saxpy"]
    candidate = applied(saxpy, ORDERS["ept"])
    code = candidate.source
    assert "struct __align__(16) float_x4 { float lane[4]; };" in code
    assert ("if ((reinterpret_cast<unsigned long long>(y) & 15) == 0 && "
            "(reinterpret_cast<unsigned long long>(x) & 15) == 0) {") in code
    assert "float_x4 y4 = reinterpret_cast<const float_x4 *>(y)[v];" in code  # in place: read, then written
    assert "const float_x4 x4 = reinterpret_cast<const float_x4 *>(x)[v];" in code
    assert "y4.lane[k] = a * x4.lane[k] + y4.lane[k];" in code  # the body, lane by lane
    assert "reinterpret_cast<float_x4 *>(y)[v] = y4;" in code
    assert "for (int i = 4 * vectors + blockIdx.x * blockDim.x + threadIdx.x; i < n;" in code  # the tail
    assert mask(code).count("y[i] = a * x[i] + y[i];") == 2  # the tail and the fallback
    assert "float4" not in code
    # The tune space and the grid are as before: a quarter of the threads, elements_per_thread times fewer.
    assert candidate.grid_div_x == ["block_size_x", "elements_per_thread", 4]
    assert candidate.tune_params == {"block_size_x": [128, 256, 512, 1024], "elements_per_thread": [1, 2, 4, 8, 16]}
    assert candidate.params == {"block_size_x": 256, "elements_per_thread": 4}
    assert applied(saxpy, ORDERS["alone"]).grid_div_x == ["block_size_x", 4]


def test_integer_and_template_kernels_take_structs_of_their_declared_types():
    keys = applied(MIX_KEYS, ORDERS["alone"]).source
    assert "struct __align__(16) unsigned_int_x4 { unsigned int lane[4]; };" in keys
    assert "struct __align__(16) int_x4 { int lane[4]; };" in keys
    assert "const int i = 4 * v + k;" in keys  # the body reads the index: each lane has its own
    assert "keys4.lane[k] = (keys4.lane[k] ^ h) + (unsigned int)salt4.lane[k];" in keys
    scale = applied(KERNELS["scale"], ORDERS["alone"]).source
    assert "struct __align__(16) T_x4 { T lane[4]; };" in scale  # the template's own element type
    assert "T_x4 out4;" in scale  # a pure output is not loaded
    relu = applied(KERNELS["relu_inplace"], ORDERS["alone"]).source
    assert "if ((reinterpret_cast<unsigned long long>(x) & 15) == 0) {" in relu


def test_reads_through_the_read_only_cache_come_from_the_lanes_and_stay_on_the_element_paths():
    """__ldg(&x[i]) and __ldg(y + i) are reads of x[i] and y[i]: the vector loop takes them from its lanes (an
    __ldg of a lane, a register, would read no global memory); the tail and the fallback keep them as written."""
    code = mask(applied(SAXPY_LDG, ORDERS["alone"]).source)
    assert "y4.lane[k] = a * x4.lane[k] + y4.lane[k];" in code
    assert code.count("y[i] = a * __ldg(&x[i]) + __ldg(y + i);") == 2 and "__ldg(&x4" not in code
    widened = mask(rules.apply("vectorize_loops", GRID_STRIDE_ADD_LDG, GRID_STRIDE_ADD_LDG.as_candidate()).source)
    assert "y4.x = x4.x + y4.x;" in widened and "__ldg(&x4" not in widened
    assert widened.count("y[i] = __ldg(&x[i]) + y[i];") == 2


def test_vectorize_refuses_a_4_byte_array_not_declared_as_a_plain_pointer():
    """The vector's element type is the declared one (a struct of four), so an array parameter written otherwise
    is refused with the reason 2-byte arrays get."""
    vector_add = KERNELS["vector_add"]
    as_array = vector_add.model_validate({**vector_add.model_dump(), "source": vector_add.source.replace(
        "const float *b", "const float b[]")})
    assert rules.check("vectorize", as_array, as_array.as_candidate()) == (
        "b is not declared as a plain pointer (`const T *b`), so its element type for the vector of 4 lanes is "
        "unknown")



SCALE_AND_FLAG = r"""
extern "C" __global__ void scale_and_flag(float *y, const float *x, int *flag, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = 2.0f * x[i];
        if (i == 0) flag[i] = 1;
    }
}
"""


@pytest.mark.parametrize("flag_shape, reason", [
    ([1], "the body touches flag only under a condition, and its shape in args does not hold n elements, so a "
          "vector may reach past it"),
    (["n"], None)])
def test_an_array_touched_only_under_a_condition_takes_vectors_only_where_its_shape_holds_the_bound(flag_shape,
                                                                                                      reason):
    """A vector of flag's elements 4v..4v+3 is loaded and stored back whole, though the kernel touches only
    flag[0]: with one element declared, that would reach past it."""
    flagged = spec(SCALE_AND_FLAG, "scale_and_flag", [array("y", ["n"], role="out"), array("x", ["n"]),
                                                       array("flag", flag_shape, "int32", "out"), scalar("n", "n")],
                   {"n": 1 << 20}, ["n"])
    assert rules.check("vectorize", flagged, flagged.as_candidate()) == reason



@pytest.mark.parametrize("head_shape, admitted", [(["m"], False), (["n"], True)])
def test_a_strided_loop_takes_vectors_of_an_array_touched_under_a_condition_only_where_its_shape_holds_the_loop(
        head_shape, admitted):
    """A grid-stride sum that also copies the first m elements out: `head` has m elements, and a vector of four
    over the loop's n would load and store past them."""
    summed = spec(r"""
extern "C" __global__ void sum_and_head(float *total, float *head, const float *x, int n, int m)
{
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        s += x[i];
        if (i < m) head[i] = x[i];
    }
    atomicAdd(total, s);
}
""", "sum_and_head", [array("total", [1], role="out"), array("head", head_shape, role="out"), array("x", ["n"]),
                       scalar("n", "n"), scalar("m", "m")], {"n": 1 << 20, "m": 1000}, ["n"],
        grid_div_x=["block_size_x", 8])
    reason = rules.check("vectorize_loops", summed, summed.as_candidate())
    assert reason is None if admitted else reason == (
        "no strided loop can be vectorised: the loop over i touches head only under a condition, and its shape in "
        "args does not hold the loop's elements, so a vector of four may reach past it")


def test_a_blocks_loop_storing_under_a_condition_is_not_stored_as_whole_vectors():
    """Every block walks the same features; the block that owns one stores it. A vector stored whole would write
    back the other lanes as its block read them, over another block's store (a review's race, emulated)."""
    owner = spec(r"""
extern "C" __global__ void pick_owner(float *out, const int *owner, const float *x, int n)
{
    const float *row = x + (size_t)blockIdx.x * n;
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        const float v = row[c];
        if (owner[c] == blockIdx.x) out[c] = v;
    }
}
""", "pick_owner", [array("out", ["n"], role="out"), array("owner", ["n"], "int32", range=[0, "batch"]),
                    array("x", ["batch", "n"]), scalar("n", "n")], {"batch": 64, "n": 1024}, ["batch"],
        tune_params={"block_size_x": [128, 256]})
    assert rules.check("vectorize_loops", owner, owner.as_candidate()) == (
        "no strided loop can be vectorised: the loop over c stores into out only under a condition, and every "
        "block walks its elements: a vector stored whole could undo another block's store")
    stored = owner.model_validate({**owner.model_dump(), "source": owner.source.replace(
        "if (owner[c] == blockIdx.x) out[c] = v;", "out[c] = owner[c] == blockIdx.x ? v : out[c];")})
    assert rules.check("vectorize_loops", stored, stored.as_candidate()) is None  # a race as submitted, kept

def test_a_store_under_a_condition_takes_vectors_where_the_array_is_read_wherever_the_body_runs():
    """relu in place written as `if (x[i] < 0) x[i] = 0;`: x is read at every element, so the vector holds
    elements the kernel reads, and its lanes not stored keep what was read (x's shape is declared short here, so
    only the read admits it)."""
    relu = spec(r"""
extern "C" __global__ void relu(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (x[i] < 0.0f) x[i] = 0.0f;
    }
}
""", "relu", [array("x", [1 << 10], role="inout"), scalar("n", "n")], {"n": 1 << 20}, ["n"])
    assert rules.check("vectorize", relu, relu.as_candidate()) is None

# --- every rewrite compiles and keeps the signature; its accesses are 128 bits -----------------------------
@pytest.mark.parametrize("name, order", [(name, order) for name in KERNELS for order in ORDERS])
def test_each_rewrite_compiles_for_every_configuration_and_keeps_the_signature(name, order):
    assert_compiles_for_every_configuration(KERNELS[name], order)


def ptx(source: str, kernel_name: str, defines: dict, options: list[str]) -> str:
    """NVRTC's PTX for the virtual arch (no GPU needed), with kforge's flags and headers."""
    flags = [*compile_options(defines, options, ARCH), *header_flags(vetted_headers().dirs)]
    _, program = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    try:
        nvrtc.nvrtcAddNameExpression(program, kernel_name.encode())
        (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [flag.encode() for flag in flags])
        assert result == nvrtc.nvrtcResult.NVRTC_SUCCESS, result
        _, size = nvrtc.nvrtcGetPTXSize(program)
        text = bytearray(size)
        nvrtc.nvrtcGetPTX(program, text)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return text.decode().rstrip("\0")


# The vector loop's loads and stores, by their bits: one per vector of each array it reads (a pure output is not
# read) and of each it writes, 128 bits for the widest arrays; a narrower array beside them moves as many elements
# (bf16_ramp's bfloat16s 64 bits beside floats, dequantize's int8s 32). The 2- and 1-byte kernels take the same
# path, so they are held to it too.
WHOLE, BF16_BESIDE_FLOATS, INT8_BESIDE_FLOATS = 128, 64, 32
VECTOR_ACCESSES = {"saxpy": ([WHOLE] * 2, [WHOLE]), "scale": ([WHOLE], [WHOLE]), "relu_inplace": ([WHOLE], [WHOLE]),
                   "vector_add": ([WHOLE] * 2, [WHOLE]), "mix_keys": ([WHOLE] * 2, [WHOLE]),
                   "saxpy_ldg": ([WHOLE] * 2, [WHOLE]), "scale_while": ([WHOLE], [WHOLE]),
                   "haxpy": ([WHOLE] * 2, [WHOLE]), "bf16_axpy": ([WHOLE] * 2, [WHOLE]),
                   "hscale_add": ([WHOLE] * 2, [WHOLE]), "bf16_ramp": ([BF16_BESIDE_FLOATS], [WHOLE]),
                   "threshold_u8": ([WHOLE], [WHOLE]), "dequantize": ([INT8_BESIDE_FLOATS], [WHOLE])}


@pytest.mark.parametrize("name", list(VECTOR_ACCESSES))
def test_the_vector_loop_moves_each_array_a_vector_at_a_time(name):
    spec_ = {**KERNELS, **NARROW}[name]
    candidate = applied(spec_, ORDERS["alone"])
    text = ptx(normalised(candidate.source), spec_.kernel_name, {**spec_.baseline_params(), **candidate.params},
               list(spec_.compiler_options))
    vectors = re.findall(r"\b(ld|st)\.global(?:\.nc)?\.v(\d)\.[a-z](\d+)\b", text)
    assert tuple(sorted(int(count) * int(bits) for kind, count, bits in vectors if kind == access)
                 for access in ("ld", "st")) == tuple(sorted(bits) for bits in VECTOR_ACCESSES[name]), vectors
    # The tail and the misaligned fallback access elements one by one.
    assert re.search(r"\bld\.global(?:\.nc)?\.[a-z]\d+\b", text) and re.search(r"\bst\.global\.[a-z]\d+\b", text)


def test_the_vector_loop_does_the_submitted_kernels_arithmetic():
    """saxpy's element is one fma in the submitted kernel; the vector loop does four, the tail and the fallback
    one each: nothing is paired, reassociated or computed otherwise."""
    saxpy = KERNELS["saxpy"]
    candidate = applied(saxpy, ORDERS["alone"])
    params = {**saxpy.baseline_params(), **candidate.params}

    def arithmetic(source: str) -> collections.Counter:
        return collections.Counter(re.findall(r"^\s*((?:fma|mul|add|sub)\.\w+(?:\.f32))\s", ptx(
            source, saxpy.kernel_name, params, list(saxpy.compiler_options)), re.M))
    assert arithmetic(saxpy.source) == {"fma.rn.f32": 1}
    assert arithmetic(normalised(candidate.source)) == {"fma.rn.f32": 6}


# --- the rewrites run on the CPU and agree with the submitted kernel bit for bit ------------------------------
@needs_gxx
@pytest.mark.parametrize("name, order", [(name, order) for name in KERNELS for order in ORDERS])
def test_the_rewrite_computes_every_element_as_the_submitted_kernel_did(build, name, order):
    assert_computes_every_element_as_submitted(build, KERNELS[name], order, 4)


@needs_gxx
def test_float4_accesses_without_the_check_fault_on_a_misaligned_array(build):
    """The 4-byte rewrite as it was before the check (the vector loop whatever the pointers) stops the emulation
    on an array one element past 16-byte alignment, as it faults on the GPU; the rewrite runs it through the
    element loop to the submitted kernel's result. Its lanes mixed up, it differs aligned and not misaligned:
    both paths run."""
    saxpy = KERNELS["saxpy"]
    candidate = applied(saxpy, ORDERS["alone"])
    source = normalised(candidate.source)
    check = re.search(r"if \((\(reinterpret_cast<unsigned long long>\(\w+\) & 15\) == 0(?: && )?)+\)", source)
    unchecked = source.replace(check[0], "if (true)")
    at_size = saxpy.with_sizes({"n": 1001})
    values = inputs(at_size, 5)
    expected = run(build(saxpy.source, saxpy.kernel_name), at_size, at_size.baseline_params(), values)
    config = {**at_size.baseline_params(), **candidate.params}
    launched = at_size.for_candidate(candidate)
    assert run(build(unchecked, saxpy.kernel_name), launched, config, values) == expected
    for misaligned in ("x", "y"):
        with pytest.raises(EmulatedFault):
            run(build(unchecked, saxpy.kernel_name), launched, config, values, misaligned)
        assert run(build(source, saxpy.kernel_name), launched, config, values, misaligned) == expected
    broken = build(source.replace("x4.lane[k]", "x4.lane[3 - k]"), saxpy.kernel_name)
    assert run(broken, launched, config, values) != expected
    assert run(broken, launched, config, values, misaligned="x") == expected


@needs_gxx
@pytest.mark.parametrize("size", [1, 3, 4, 5, 1001, 8 * 256 * 4 + 7])
def test_a_widened_grid_stride_loop_reading_through_the_read_only_cache_computes_as_submitted(build, size):
    """vectorize_loops on a fixed grid's loop that reads x through __ldg: bit for bit as submitted at sizes no
    vector divides, aligned and with each array misaligned (the element loop then)."""
    spec_ = GRID_STRIDE_ADD_LDG
    candidate = rules.apply("vectorize_loops", spec_, spec_.as_candidate())
    at_size = spec_.with_sizes({"n": size})
    values = inputs(at_size, size)
    expected = run(build(spec_.source, spec_.kernel_name), at_size, at_size.baseline_params(), values)
    rewritten = build(normalised(candidate.source), spec_.kernel_name)
    for misaligned in (None, "x", "y"):
        assert run(rewritten, at_size.for_candidate(candidate), at_size.baseline_params(), values,
                   misaligned) == expected, misaligned


def _optional_weights(has_w: int) -> KernelSpec:
    """A copy scaled by weights the caller may leave out: with has_w 0, w is never read and may be null."""
    return spec(r"""
extern "C" __global__ void weighted_copy(float *y, const float *x, const float *w, int has_w, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = x[i];
        if (has_w) v *= w[i];
        y[i] = v;
    }
}
""", "weighted_copy", [array("y", ["n"], role="out"), array("x", ["n"]), array("w", ["n"]), scalar("has_w", has_w),
                       scalar("n", "n")], {"n": 4099}, ["n"], grid_div_x=["block_size_x", 8])


@needs_gxx
@pytest.mark.parametrize("rule", ["vectorize", "vectorize_loops"])
def test_an_array_read_only_under_a_condition_may_be_null_and_is_then_not_read_as_vectors(build, rule):
    """A null pointer is 16-byte aligned: tested for alignment alone, `w` would be loaded as vectors where the
    kernel as written never reads it, and the rewrite would fault on a call the submitted kernel serves."""
    for has_w, null in ((0, "w"), (1, None)):
        submitted = _optional_weights(has_w)
        candidate = rules.apply(rule, submitted, submitted.as_candidate())
        assert "w != nullptr && " in candidate.source
        values = inputs(submitted, seed=has_w)
        expected = run(build(submitted.source, "weighted_copy"), submitted, submitted.baseline_params(), values,
                       null=null)
        got = run(build(normalised(candidate.source), "weighted_copy"), submitted.for_candidate(candidate),
                  {**submitted.baseline_params(), **candidate.params}, values, null=null)
        assert got["y"] == expected["y"] and got["y"] != values["y"].tobytes()


# Loops whose threads take many vectors each, so vectors_in_flight's passes and their last, partial pass all run.
_SPARSE_GRID_ADD = GRID_STRIDE_ADD_LDG.model_validate({**GRID_STRIDE_ADD_LDG.model_dump(),
                                                       "grid_div_x": ["block_size_x", 64]})
_GAINED_ROWS = spec(r"""
// Each block scales its row by a gain per column: a block's loop over its row, one output, two inputs.
extern "C" __global__ void gained_rows(float *out, const float *in, const float *gain, int cols)
{
    const int row = blockIdx.x;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        out[row * cols + c] = in[row * cols + c] * gain[c];
}
""", "gained_rows", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]),
                     array("gain", ["cols"]), scalar("cols", "cols")],
    {"rows": 3, "cols": 1000}, ["rows"], {"block_size_x": 32}, {"block_size_x": [32, 64]}, grid_div_x=[])


@needs_gxx
@pytest.mark.parametrize("submitted, sizes", [(_SPARSE_GRID_ADD, {"n": n}) for n in (3, 4, 4099, 64 * 256 + 13)] +
                         [(_GAINED_ROWS, {"cols": cols}) for cols in (3, 129, 1000, 1027)] +
                         [(GAINED_ROWS_INDEX_LOCAL, {"cols": cols}) for cols in (5, 1027)] +
                         [(ROW_ADD_OLD, {"cols": cols}) for cols in (1000, 1001)])
def test_vectors_loaded_ahead_are_run_in_order_whatever_their_number(build, submitted, sizes):
    """A thread loads its next vectors_in_flight vectors together, then runs them in the loop's order (a
    read-modify-write of y, a block's row, a row whose elements an index local names, one read beside that local):
    at every number in flight, with the last pass partial, and with each array misaligned, every array ends bit for
    bit as the submitted kernel leaves it."""
    candidate = rules.apply("vectorize_loops", submitted, submitted.as_candidate())
    assert candidate.tune_params["vectors_in_flight"] == [1, 2, 4]
    at_size = submitted.with_sizes(sizes)
    values = inputs(at_size, sum(sizes.values()))
    expected = run(build(submitted.source, submitted.kernel_name), at_size, at_size.baseline_params(), values)
    rewritten = build(normalised(candidate.source), submitted.kernel_name)
    for in_flight in (1, 2, 4):
        config = {**at_size.baseline_params(), **candidate.params, "vectors_in_flight": in_flight}
        for misaligned in (None, *[arg.name for arg in submitted.args if arg.is_array]):
            assert run(rewritten, at_size.for_candidate(candidate), config, values, misaligned) == expected, (
                in_flight, misaligned)


@needs_gxx
@pytest.mark.parametrize("submitted, sizes", [(_SPARSE_GRID_ADD, {"n": 18787}), (_GAINED_ROWS, {"cols": 1000})])
def test_a_pass_past_the_last_vector_is_cut_short(build, submitted, sizes):
    """The test above sees a pass that would run past the loop's last vector (at these sizes, into the elements
    the scalar tail or the next row owns): without the rendering's bound on each vector of a pass, the emulated
    rewrite faults or leaves other arrays."""
    candidate = rules.apply("vectorize_loops", submitted, submitted.as_candidate())
    at_size = submitted.with_sizes(sizes)
    values = inputs(at_size, 7)
    expected = run(build(submitted.source, submitted.kernel_name), at_size, at_size.baseline_params(), values)
    config = {**at_size.baseline_params(), **candidate.params, "vectors_in_flight": 4}
    source = normalised(candidate.source)
    assert run(build(source, submitted.kernel_name), at_size.for_candidate(candidate), config, values) == expected
    unbounded = build(source.replace("if (at < vectors) ", ""), submitted.kernel_name)
    try:
        assert run(unbounded, at_size.for_candidate(candidate), config, values) != expected
    except EmulatedFault:
        pass  # it ran past the arrays
