"""A spec inferred from a kernel's signature: pointer roles, sizes, scalar values, dtypes, which kernel, and the
YAML written to edit. Pure: nothing compiles or runs."""
from pathlib import Path

import pytest
import yaml

from kforge.api import KforgeError, build_spec
from kforge.infer_spec import BLOCK_SIZES, DEFAULT_SIZE, InferenceError, infer_spec
from shared.application.kernel_admission import kernel_errors
from shared.domain.spec import KernelSpec

VECTOR_ADD_SOURCE = (Path(__file__).resolve().parents[2] / "examples" / "vector_add.cu").read_text()


def args_of(signature: str) -> list[dict]:
    return infer_spec(f"__global__ void k({signature}) {{}}").data["args"]


def test_vector_add_gets_the_spec_a_person_would_write():
    data = infer_spec(VECTOR_ADD_SOURCE).data

    assert data["kernel_name"] == "vector_add"
    assert data["sizes"] == {"n": DEFAULT_SIZE} and data["problem_size"] == ["n"]
    assert data["args"] == [{"name": "c", "dtype": "float32", "shape": ["n"], "role": "out"},
                            {"name": "a", "dtype": "float32", "shape": ["n"], "role": "in"},
                            {"name": "b", "dtype": "float32", "shape": ["n"], "role": "in"},
                            {"name": "n", "dtype": "int32", "value": "n"}]
    assert data["tune_params"] == {"block_size_x": BLOCK_SIZES}


@pytest.mark.parametrize("signature", ["const float *__restrict__ a, float* out, int n",
                                       "const float*a,float *out,int n",
                                       "float const * __restrict a, float *__restrict__ out, int n"])
def test_const_restrict_and_pointer_spacing_read_alike(signature):
    assert [(a["name"], a.get("role")) for a in args_of(signature)] == [("a", "in"), ("out", "out"), ("n", None)]


def test_a_const_pointer_to_writable_data_is_an_output():
    assert args_of("float *const out, int n")[0]["role"] == "out"


def test_every_integer_scalar_is_a_size_and_the_first_shapes_the_arrays():
    inferred = infer_spec("__global__ void k(float *out, unsigned int rows, int cols, size_t stride) {}")

    assert inferred.data["sizes"] == {"rows": DEFAULT_SIZE, "cols": 1, "stride": 1}
    assert [a.get("value") for a in inferred.data["args"]] == [None, "rows", "cols", "stride"]
    assert [a["dtype"] for a in inferred.data["args"]] == ["float32", "uint32", "int32", "uint64"]
    assert inferred.data["args"][0]["shape"] == ["rows"]
    assert any("cols, stride = 1" in note for note in inferred.notes)


def test_float_scalars_are_one_and_the_notes_say_so():
    inferred = infer_spec("__global__ void k(float *y, const double *x, float alpha, double beta, int n) {}")

    assert [(a["name"], a["dtype"], a.get("value")) for a in inferred.data["args"][2:4]] == [
        ("alpha", "float32", 1.0), ("beta", "float64", 1.0)]
    assert any("alpha, beta = 1.0" in note for note in inferred.notes)


def test_half_pointers_and_fixed_width_integers_have_their_dtypes():
    args = args_of("__half *o, const __half* i, const int* __restrict__ idx, uint8_t *mask, long long m")

    assert [a["dtype"] for a in args] == ["float16", "float16", "int32", "uint8", "int64"]


def test_a_pointer_to_a_vector_type_is_an_array_of_its_elements_with_a_dimension_of_lanes():
    """As kernels written for 128-bit accesses take them; the spec compiles and matches the kernel's parameters."""
    source = ('#include <cuda_fp16.h>\nextern "C" __global__ void k(float4 *out, const float4 *__restrict__ in, '
              'const __half2 *h, uchar4 *rgba, int n4) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
              '    if (i < n4) { out[i] = in[i]; rgba[i].x = (unsigned char)__low2float(h[i]); }\n}\n')
    inferred = infer_spec(source)

    assert [(a["dtype"], a["shape"], a["role"]) for a in inferred.data["args"][:4]] == [
        ("float32", ["n4", 4], "out"), ("float32", ["n4", 4], "in"), ("float16", ["n4", 2], "in"),
        ("uint8", ["n4", 4], "out")]
    assert any("out (float32 x 4), in (float32 x 4), h (float16 x 2), rgba (uint8 x 4): a pointer to a vector type"
               in note for note in inferred.notes)
    spec = KernelSpec.model_validate({**inferred.data, "source": source})
    assert kernel_errors(spec, "sm_90") == []


def test_constant_arrays_the_host_fills_are_constant_args_after_the_parameters():
    source = ("__constant__ float taps[9];\n// __constant__ float commented_out[4];\n"
              "__constant__ unsigned int lut[2][4];\n"
              "__constant__ float preset[2] = {1.0f, 2.0f};\n__global__ void k(float *y, const float *x, int n) {}")
    inferred = infer_spec(source)

    assert inferred.data["args"][3:] == [{"name": "taps", "dtype": "float32", "shape": [9], "role": "constant"},
                                         {"name": "lut", "dtype": "uint32", "shape": [2, 4], "role": "constant"}]
    assert any(note.startswith("taps, lut: __constant__ arrays") for note in inferred.notes)
    assert any(note.startswith("preset: __constant__ declarations whose type or extent kforge could not read")
               for note in inferred.notes)
    KernelSpec.model_validate({**inferred.data, "source": source})


def test_without_an_integer_parameter_a_size_n_shapes_the_arrays():
    inferred = infer_spec("__global__ void k(float *out, const float *in) {}")

    assert inferred.data["sizes"] == {"n": DEFAULT_SIZE}
    assert {tuple(a["shape"]) for a in inferred.data["args"]} == {("n",)}
    assert any("no integer size" in note for note in inferred.notes)


def test_sizes_replace_the_defaults_and_an_unknown_size_is_named():
    assert infer_spec(VECTOR_ADD_SOURCE, sizes={"n": 4096}).data["sizes"] == {"n": 4096}
    with pytest.raises(InferenceError, match="vector_add has no size m; its sizes are n") as caught:
        infer_spec(VECTOR_ADD_SOURCE, sizes={"m": 4096})
    assert caught.value.field == "sizes"


def test_several_kernels_need_a_name_and_the_error_lists_them():
    source = ("__global__ void first(float *x, int n) {}\n"
              "__global__ void __launch_bounds__(128) second(float *y, int m) {}\n")

    with pytest.raises(InferenceError, match=r"defines 2 kernels \(first, second\)") as caught:
        infer_spec(source)
    assert caught.value.field == "kernel_name"
    assert infer_spec(source, "second").data["sizes"] == {"m": DEFAULT_SIZE}
    with pytest.raises(InferenceError, match="'third' is not defined in the source; it defines first, second"):
        infer_spec(source, "third")


@pytest.mark.parametrize("source, message", [
    ("template <typename T> __global__ void k(T *x, int n) {}", "k is a template"),
    ("__global__ void k(float4 x, int n) {}", r"parameter 0 \(float4 x\): float4 has no kforge dtype"),
    ("__global__ void k(float4 **x, int n) {}", r"float4\*\* has no kforge dtype"),
    ("__global__ void k(float **x, int n) {}", r"float\*\* has no kforge dtype"),
    ("__device__ void k(float *x) {}", "no __global__ function"),
])
def test_what_no_dtype_describes_is_refused_naming_it(source, message):
    with pytest.raises(InferenceError, match=message):
        infer_spec(source)


def test_the_yaml_loads_back_as_the_inferred_spec_with_the_notes_as_comments():
    inferred = infer_spec("__global__ void k(float *y, const float *x, float a, int n) {}")
    text = inferred.to_yaml()

    assert yaml.safe_load(text) == inferred.data
    assert text.startswith("# inferred by kforge from the signature of k")
    assert "  - {name: y, dtype: float32, shape: [n], role: out}" in text.splitlines()
    KernelSpec.model_validate({**yaml.safe_load(text), "source": "__global__ void k(float *y, const float *x, "
                                                               "float a, int n) {}"})


def test_build_spec_infers_from_source_text_with_kernel_name_and_sizes():
    seen = []
    spec = build_spec(VECTOR_ADD_SOURCE, on_inferred=seen.append, sizes={"n": 4096}, kernel_name="vector_add",
                      strategy="baseline")

    assert spec.sizes == {"n": 4096} and spec.strategy.name == "baseline"
    assert [a.name for a in spec.output_args] == ["c"]
    assert seen and seen[0].data["kernel_name"] == "vector_add"


def test_build_spec_infers_for_a_cu_file_with_no_spec_beside_it(tmp_path):
    kernel = tmp_path / "lonely.cu"
    kernel.write_text(VECTOR_ADD_SOURCE)

    assert build_spec(kernel).tune_params == {"block_size_x": BLOCK_SIZES}
    with pytest.raises(KforgeError, match="kernel_name: 'nope' is not defined"):
        build_spec(kernel, kernel_name="nope")
