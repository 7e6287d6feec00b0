"""NVRTC compilation for real (no GPU needed): cubins, lowered names, error logs, cache keys, options."""
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from shared.adapters.device.compiler import compile_kernel, parameter_types
from shared.adapters.device.nvrtc import CompileError, cache_key, compile_options

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ELF_MAGIC = b"\x7fELF"
VECTOR_ADD = (EXAMPLES / "vector_add.cu").read_text()


@pytest.mark.parametrize("example", ["vector_add", "matmul", "reduction"])
def test_example_compiles_to_an_elf_cubin_for_sm90(example):
    spec = load_spec(EXAMPLES / f"{example}.cu", EXAMPLES / f"{example}.yaml")
    assert spec.params, "each example's yaml gives the defines its kernel needs"

    kernel = compile_kernel(spec.source, spec.kernel_name, spec.params, spec.compiler_options, "sm_90")

    assert kernel.arch == "sm_90"
    assert len(kernel.cubin) > len(ELF_MAGIC)
    assert kernel.cubin.startswith(ELF_MAGIC)
    # extern "C": no mangling, and the symbol the loader will look up is in the cubin
    assert kernel.lowered_name == spec.kernel_name
    assert kernel.lowered_name.encode() in kernel.cubin
    assert kernel.compile_ms > 0
    flags = compile_options(spec.params, spec.compiler_options, "sm_90")
    assert kernel.cache_key == cache_key(spec.source, spec.kernel_name, flags)


def test_compiles_for_another_arch_too():
    kernel = compile_kernel(VECTOR_ADD, "vector_add", {"block_size_x": 128}, [], "sm_80")
    assert kernel.arch == "sm_80"
    assert kernel.cubin.startswith(ELF_MAGIC)


TEMPLATED = """
template <typename T>
__global__ void scale(T *x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""

OVERLOADED = """
__global__ void fill(float *x) { x[threadIdx.x] = 1.0f; }
__global__ void fill(int *x) { x[threadIdx.x] = 1; }
"""


def test_templated_cpp_kernel_gets_a_mangled_lowered_name():
    kernel = compile_kernel(TEMPLATED, "scale<float>", {}, [], "sm_90")
    assert kernel.lowered_name.startswith("_Z")
    assert "scale" in kernel.lowered_name
    assert kernel.lowered_name != "scale<float>"
    assert kernel.lowered_name.encode() in kernel.cubin
    assert kernel.cubin.startswith(ELF_MAGIC)
    # a different instantiation is a different symbol
    assert compile_kernel(TEMPLATED, "scale<double>", {}, [], "sm_90").lowered_name != kernel.lowered_name


def test_a_template_instance_takes_the_parameters_of_its_own_type():
    assert parameter_types(TEMPLATED, "scale<float>", {}, [], "sm_90") == ["u64", "f32", "u32"]
    assert parameter_types(TEMPLATED, "scale<double>", {}, [], "sm_90") == ["u64", "f64", "u32"]


def test_a_namespaced_template_instance_with_a_value_argument_compiles():
    source = "namespace ns {\ntemplate <typename T, int N>\n__global__ void k(T *x) { x[0] = N; }\n}\n"
    kernel = compile_kernel(source, "ns::k<float, 4>", {}, [], "sm_90")
    assert kernel.lowered_name.startswith("_ZN2ns1k") and kernel.lowered_name.encode() in kernel.cubin


def test_plain_cpp_kernel_is_mangled():
    kernel = compile_kernel("__global__ void plain(float *x) { x[0] = 1.0f; }\n", "plain", {}, [], "sm_90")
    assert kernel.lowered_name.startswith("_Z")
    assert kernel.lowered_name != "plain"
    assert kernel.lowered_name.encode() in kernel.cubin


def test_overloaded_kernels_are_told_apart_by_name_expression():
    as_float = compile_kernel(OVERLOADED, "static_cast<void(*)(float*)>(fill)", {}, [], "sm_90")
    as_int = compile_kernel(OVERLOADED, "static_cast<void(*)(int*)>(fill)", {}, [], "sm_90")
    assert as_float.lowered_name.startswith("_Z") and as_int.lowered_name.startswith("_Z")
    assert as_float.lowered_name != as_int.lowered_name
    assert as_float.lowered_name.encode() in as_float.cubin


def test_syntax_error_raises_compile_error_with_nvrtc_log_and_line():
    source = (
        'extern "C" __global__ void broken(float *x) {\n'
        "    int i = threadIdx.x;\n"
        "    x[i] = 1.0f\n"  # line 3: missing semicolon
        "}\n"
    )
    with pytest.raises(CompileError) as caught:
        compile_kernel(source, "broken", {}, [], "sm_90")
    error = caught.value
    assert "broken" in str(error) and "sm_90" in str(error)
    assert "NVRTC_ERROR_COMPILATION" in str(error)
    # NVRTC names the file and the line; it notices the missing ';' at the token after it, on line 4
    assert 'broken.cu(4): error: expected a ";"' in error.log
    assert "1 error detected" in error.log


def test_missing_define_fails_with_log_naming_it():
    with pytest.raises(CompileError) as caught:
        compile_kernel(VECTOR_ADD, "vector_add", {}, [], "sm_90")
    log = caught.value.log
    assert "block_size_x" in log
    assert "undefined" in log
    assert "vector_add.cu(3)" in log  # the line that uses block_size_x


def test_ambiguous_overload_without_name_expression_is_a_compile_error():
    with pytest.raises(CompileError) as caught:
        compile_kernel(OVERLOADED, "fill", {}, [], "sm_90")
    assert "overloaded" in caught.value.log


# --- cache keys ---------------------------------------------------------------------------------

def _key(source=VECTOR_ADD, name="vector_add", defines=None, options=None, arch="sm_90"):
    defines = {"block_size_x": 256} if defines is None else defines
    return cache_key(source, name, compile_options(defines, options or [], arch))


def test_cache_key_is_stable_for_identical_inputs():
    assert _key() == _key()
    assert len(_key()) == 64 and int(_key(), 16) >= 0  # a sha256 hex digest
    # define order does not matter: the same -D flags give the same compilation
    assert _key(defines={"a": 1, "b": 2}) == _key(defines={"b": 2, "a": 1})


def test_cache_key_of_two_real_compilations_matches():
    first = compile_kernel(VECTOR_ADD, "vector_add", {"block_size_x": 64}, [], "sm_90")
    second = compile_kernel(VECTOR_ADD, "vector_add", {"block_size_x": 64}, [], "sm_90")
    assert first.cache_key == second.cache_key
    assert first.cubin == second.cubin


@pytest.mark.parametrize("change", [
    {"source": VECTOR_ADD + "\n// a comment\n"},
    {"name": "other_kernel"},
    {"defines": {"block_size_x": 128}},
    {"defines": {"block_size_x": 256, "extra": 1}},
    {"options": ["-lineinfo"]},
    {"options": ["--std=c++14"]},
    {"arch": "sm_80"},
])
def test_cache_key_changes_with_any_input(change):
    assert _key(**change) != _key()


# --- options ------------------------------------------------------------------------------------

def test_compile_options_defines_and_default_std():
    flags = compile_options({"block_size_x": 256, "alpha": 0.5, "mode": "fast"}, ["-lineinfo"], "sm_90")
    assert flags[0] == "--gpu-architecture=sm_90"
    assert {"-Dblock_size_x=256", "-Dalpha=0.5", "-Dmode=fast"} <= set(flags)
    assert "-lineinfo" in flags
    assert "--std=c++17" in flags
    assert sum(f.startswith(("--std", "-std")) for f in flags) == 1


@pytest.mark.parametrize("std", ["-std=c++14", "--std=c++20"])
def test_compile_options_keep_a_user_given_std(std):
    flags = compile_options({"block_size_x": 32}, [std], "sm_90")
    assert std in flags
    assert "--std=c++17" not in flags
    assert "-Dblock_size_x=32" in flags


def test_user_given_std_reaches_nvrtc():
    # C++17's `if constexpr` needs -std=c++17 or later; asking for C++14 must really compile as C++14
    source = ('extern "C" __global__ void k(int *x) {\n'
              "    if constexpr (sizeof(int) == 4) { x[0] = 1; }\n"
              "}\n")
    assert compile_kernel(source, "k", {}, [], "sm_90").cubin.startswith(ELF_MAGIC)
    with pytest.raises(CompileError) as caught:
        compile_kernel(source, "k", {}, ["-std=c++14"], "sm_90")
    assert "k.cu(2): error" in caught.value.log


def test_a_clean_compile_leaves_the_interpreters_shared_bytes_alone():
    """NVRTC writes its log into the buffer it is handed. An empty log is one NUL byte; written into an
    immutable `b" " * 1`, that is CPython's shared one-byte b" ", and every b" " in the process became NUL:
    on the GPU machine this silently removed spaces from generated kernels."""
    from shared.adapters.device.nvrtc import build_cubin, compile_options, ptx_parameter_types

    source = 'extern "C" __global__ void k(float *a) { a[0] = 1.0f; }'
    kernel = build_cubin(source, "k", compile_options({}, [], "sm_90"), "sm_90", log_limit=1024)
    assert ptx_parameter_types(source, "k", compile_options({}, [], "compute_90"), "compute_90", 1024)[0] == ["u64"]

    assert kernel.log == "" and kernel.cubin.startswith(b"\x7fELF")
    assert b" " == bytes([32]) and " ".join(["int", "i"]) == "int i"
