"""The CUDA headers kforge ships (nvidia-cuda-runtime, nvidia-cuda-cccl, and its own stand-ins for the C headers
NVRTC lacks): half and bfloat16 kernels, and kernels written for nvcc with C headers and math macros, compile for
real through the sandbox (no GPU needed), a `__half` parameter reads as a float16 one, and an include is allowed
only when its header is there and safe."""
import math
import os
import re
import struct

import pytest

from shared.adapters.device import compiler
from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.nvrtc import CompileError
from shared.domain.compile_policy import (C_HEADERS, Headers, PolicyViolation, check_macro_names, check_options,
                                          check_source, option_macros, vetted_headers)
from shared.domain.signature import mismatches
from shared.domain.spec import ArgSpec

HALF = """#include <cuda_fp16.h>
extern "C" __global__ void axpy_half(__half *y, const __half *x, __half a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __hadd(__hmul(a, x[i]), y[i]) + __float2half(0.5f * __half2float(x[i]));
}
"""
BF16 = """#include <cuda_bf16.h>
extern "C" __global__ void scale_bf16(__nv_bfloat16 *y, const __nv_bfloat16 *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __hadd(__float2bfloat16(a * __bfloat162float(x[i])), y[i]);
}
"""
CCCL = """#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void largest(cuda::std::int32_t *out) {
    cg::thread_block block = cg::this_thread_block();
    block.sync();
    out[block.thread_rank()] = cuda::std::numeric_limits<cuda::std::int32_t>::max();
}
"""
HALF_ARGS = [ArgSpec(name="y", dtype="float16", shape=["n"], role="inout"),
             ArgSpec(name="x", dtype="float16", shape=["n"]),
             ArgSpec(name="a", dtype="float16", value=2.0, role="scalar"),
             ArgSpec(name="n", dtype="int32", value="n", role="scalar")]


@pytest.mark.parametrize("source, name", [(HALF, "axpy_half"), (BF16, "scale_bf16"), (CCCL, "largest")])
def test_half_bfloat16_and_cccl_kernels_compile(source, name):
    kernel = compile_kernel(source, name, {}, ["--use_fast_math"], "sm_90")
    assert kernel.cubin.startswith(b"\x7fELF") and kernel.lowered_name == name


def test_a_half_parameter_reads_as_a_float16_argument():
    types = compiler.parameter_types(HALF, "axpy_half", {}, [], "sm_90")
    assert types == ["u64", "u64", "b16", "u32"]  # __half by value is a 2-byte struct: .align 2 .b8 [2] in PTX
    assert mismatches(HALF_ARGS, types) == []
    wider = [*HALF_ARGS[:2], ArgSpec(name="a", dtype="float32", value=2.0, role="scalar"), HALF_ARGS[3]]
    assert [m.field for m in mismatches(wider, types)] == ["args[2].dtype"]


def test_the_headers_are_found_where_pip_installed_them():
    dirs = vetted_headers().dirs
    assert any(d.endswith("/include") for d in dirs) and any(d.endswith("/include/cccl") for d in dirs)
    for header in ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cooperative_groups.h", "mma.h", "cuda/std/cstdint",
                   "cuda/std/complex", "nv/target", "cub/block/block_reduce.cuh", "math.h", "cfloat", "stdint.h",
                   "climits", "stdio.h", "cassert", "cstddef", "cstdlib", "cstring", "limits", "type_traits", "utility",
                   "algorithm", "array"):
        assert vetted_headers().refusal(header, angled=True) == "", header
    assert dirs[-1] == C_HEADERS  # kforge's own C headers last: a CUDA header of the same name comes first


# Kernels as users write them for nvcc: C headers NVRTC lacks, and the macros nvcc's implicit <cuda_runtime.h>
# brings in through the host's <math.h>, used without an include.
ORDINARY = {
    "row_max": 'extern "C" __global__ void row_max(float *out, const float *x, int n) {\n'
               '    float m = -INFINITY;\n    for (int i = 0; i < n; i++) m = fmaxf(m, x[i]);\n'
               '    out[0] = isinf(m) ? NAN : m;\n}\n',
    "softmax_flt_max": '#include <cfloat>\n#include <math.h>\nextern "C" __global__ void softmax_flt_max(float *y, '
                       'const float *x, int n) {\n    float m = -FLT_MAX;\n    for (int i = 0; i < n; i++) m = '
                       'fmaxf(m, x[i]);\n    for (int i = 0; i < n; i++) y[i] = expf(x[i] - m);\n}\n',
    "phase": '#include <cmath>\nextern "C" __global__ void phase(float *y, const float *x, int n) {\n'
             '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = sinf(2.0f * (float)M_PI * x[i]);\n}\n',
    "clamp_ids": '#include <stdint.h>\n#include <limits.h>\n#include <float.h>\nextern "C" __global__ void clamp_ids('
                 'int32_t *ids, uint64_t n) {\n    uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;\n'
                 '    if (i < n && ids[i] == INT_MAX) ids[i] = INT32_MAX - (int)DBL_EPSILON;\n}\n',
    "checked": '#include <cstdio>\n#include <cassert>\n#include <cstdint>\n#include <climits>\nextern "C" __global__ '
               'void checked(int *v, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n'
               '    assert(n < INT_MAX);\n    if (i < n && v[i] < 0) printf("negative at %d\\n", i);\n}\n',
    # std's math and C++ library names, as nvcc kernels use them (nvcc's implicit <cmath>; CCCL's C++ library)
    "gelu_std": 'extern "C" __global__ void gelu_std(float *y, const float *x, int n) {\n'
                '    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 0.5f * x[i] * (1.0f + '
                'std::tanh(0.79788456f * (x[i] + 0.044715f * std::pow(x[i], 3.0f))));\n}\n',
    "clip_using_std": '#include <cmath>\n#include <algorithm>\nusing namespace std;\nextern "C" __global__ void '
                      'clip_using_std(float *y, const float *x, int n) {\n    int i = blockIdx.x * blockDim.x + '
                      'threadIdx.x;\n    if (i < n) y[i] = isnan(x[i]) ? 0.f : min(max(sqrt(fabs(x[i])), 0.f), 1.f)'
                      ' + std::clamp(x[i], -1.f, 1.f);\n}\n',
    "limits_max": '#include <limits>\n#include <type_traits>\n#include <utility>\ntemplate <typename T>\n'
                  '__device__ T lowest() {\n    static_assert(std::is_arithmetic<T>::value, "numbers only");\n'
                  '    return std::numeric_limits<T>::lowest();\n}\nextern "C" __global__ void limits_max(float *out, '
                  'const float *x, int n) {\n    float m = lowest<float>(), other = 0.f;\n    for (int i = 0; i < n; '
                  'i++) m = std::max(m, x[i]);\n    std::swap(m, other);\n    out[0] = other;\n}\n',
    "clip_algorithm": '#include <cuda_fp16.h>\n#include <algorithm>\nusing namespace std;\nextern "C" __global__ void '
                      'clip_algorithm(float *y, __half *h, const float *x, int n) {\n'
                      '    float w[3] = {x[0], x[1], x[2]};\n    y[0] = std::max<float>(x[0], x[1]) + '
                      'std::max({w[0], w[1], w[2]}) + *std::max_element(w, w + 3) + abs(n) + sqrt(x[2]);\n'
                      '    h[0] = std::max(h[1], h[2]);\n}\n',
    "window_copy": '#include <array>\n#include <cstring>\n#include <cstddef>\n#include <cstdlib>\n'
                   'extern "C" __global__ void window_copy(float *out, const float *x, std::size_t n) {\n    std::array<float, 4> w{};\n'
                   '    std::memcpy(w.data(), x, sizeof(float) * w.size());\n'
                   '    if (n > 3) out[0] = w[std::abs(-3)] + (x == NULL);\n}\n',
    # CUB's block-level primitives (BlockLoad reaches thrust's macro-built includes) and WMMA's tensor cores
    "cub_block_load_sum": '#include <cub/block/block_load.cuh>\n#include <cub/block/block_reduce.cuh>\n'
                          'extern "C" __global__ void cub_block_load_sum(float *out, const float *in, int n) {\n'
                          '    typedef cub::BlockLoad<float, 128, 4, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;\n'
                          '    typedef cub::BlockReduce<float, 128> Reduce;\n'
                          '    __shared__ union { typename Load::TempStorage load; typename Reduce::TempStorage '
                          'reduce; } temp;\n    float items[4];\n'
                          '    Load(temp.load).Load(in + blockIdx.x * 512, items, n - blockIdx.x * 512, 0.0f);\n'
                          '    __syncthreads();\n    float sum = Reduce(temp.reduce).Sum(items);\n'
                          '    if (threadIdx.x == 0) atomicAdd(out, sum);\n}\n',
    "wmma_tile": '#include <mma.h>\n#include <cuda_fp16.h>\nusing namespace nvcuda;\n'
                 'extern "C" __global__ void wmma_tile(float *c, const half *a, const half *b) {\n'
                 '    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n'
                 '    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n'
                 '    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n    wmma::fill_fragment(fc, 0.0f);\n'
                 '    wmma::load_matrix_sync(fa, a, 16);\n    wmma::load_matrix_sync(fb, b, 16);\n'
                 '    wmma::mma_sync(fc, fa, fb, fc);\n'
                 '    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);\n}\n',
}


@pytest.mark.parametrize("name", ORDINARY)
def test_a_kernel_written_for_nvcc_with_c_headers_and_math_macros_compiles(name):
    assert check_source(ORDINARY[name])
    kernel = compile_kernel(ORDINARY[name], name, {}, [], "sm_90")
    assert kernel.cubin.startswith(b"\x7fELF") and kernel.lowered_name == name


def test_the_implicit_macros_have_their_values():
    """-INFINITY is -inf, NAN a quiet NaN and M_PI pi, in the PTX NVRTC makes of them."""
    from tests.unit.test_rules_vectorize_aligned import ptx

    source = ('#include <math.h>\nextern "C" __global__ void k(float *o, double *d) {\n    o[0] = -INFINITY;\n'
              '    o[1] = NAN;\n    d[0] = M_PI;\n    d[1] = HUGE_VAL;\n}\n')
    stored = re.findall(r"mov\.u(?:32|64)\s+%\w+, (-?\d+);", ptx(source, "k", {}, []))
    bits = [struct.unpack("<f", struct.pack("<i", int(stored[0])))[0], struct.pack("<i", int(stored[1])),
            *(struct.unpack("<d", struct.pack("<q", int(value)))[0] for value in stored[2:])]
    assert bits == [-math.inf, b"\xff\xff\xff\x7f", math.pi, math.inf]  # NAN: CUDA's canonical quiet NaN


def test_what_every_compile_includes_first_leaves_kernels_written_for_nvrtc_as_they_were():
    """The infinities are constant expressions, and names NVRTC kernels declare for themselves (M_PI, since NVRTC
    has none) stay theirs: only an include of <math.h> defines them."""
    source = ('__device__ const float M_PI = 3.14159265f;\nconstexpr float LOWEST = -INFINITY;\n'
              '__constant__ float bounds[2] = {-HUGE_VALF, INFINITY};\n'
              'extern "C" __global__ void k(float *o) {\n    o[0] = fmaxf(LOWEST, M_PI) + bounds[1] + NAN;\n}\n')
    assert compile_kernel(source, "k", {}, [], "sm_90").cubin.startswith(b"\x7fELF")


def test_an_angle_include_must_be_among_the_headers():
    with pytest.raises(PolicyViolation, match="line 1: <my_utils.h> is not among the CUDA headers"):
        check_source("#include <my_utils.h>\n" + HALF)
    assert check_source('#include "my_utils.h"\n' + HALF)  # quoted: NVRTC looks in the empty directory only
    with pytest.raises(CompileError, match="not among the CUDA headers"):
        compile_kernel("#include <unistd.h>\n" + HALF, "axpy_half", {}, [], "sm_90")


# kforge's stand-ins for C++ library headers: each is CCCL's own, with its names also in std.
CPP_LIBRARY = {"limits", "type_traits", "utility", "algorithm", "array"}


def test_kforge_c_headers_include_only_each_other():
    """A CUDA header that includes <climits> or <cstdint> on a host-only branch reaches kforge's stand-in: were
    that to include CCCL's, every such header would reach CCCL's internals, so the C headers stay
    self-contained; each C++ library stand-in includes CCCL's header of its name, and nothing else."""
    for header in sorted(os.listdir(C_HEADERS)):
        text = open(os.path.join(C_HEADERS, header)).read()
        included = re.findall(r"#\s*include\s*<([^>]+)>", text)
        if header in CPP_LIBRARY:
            assert included == [f"cuda/std/{header}"], header
            continue
        for name in included:
            assert os.path.isfile(os.path.join(C_HEADERS, name)), (header, name)


def test_the_c_stand_ins_compile_as_cpp03():
    source = ('#include <cstddef>\n#include <cstdlib>\n#include <cstring>\nstruct P { float a; int b; };\n'
              'extern "C" __global__ void k(float *o) {\n    std::ptrdiff_t d = o - o;\n'
              '    o[0] = sizeof(std::size_t) + d + offsetof(P, b) + (o == NULL);\n}\n')
    assert compile_kernel(source, "k", {}, ["--std=c++03"], "sm_90").cubin.startswith(b"\x7fELF")


def test_std_math_calls_keep_their_float_overloads():
    """std::sqrt(float) is sqrt.rn.f32, not a sqrt in double: std gets NVRTC's own global overloads."""
    from tests.unit.test_rules_vectorize_aligned import ptx

    source = ('extern "C" __global__ void k(float *o, const float *x, double *d) {\n    o[0] = std::sqrt(x[0]);\n'
              '    o[1] = std::max(x[1], x[2]);\n    o[2] = std::abs(x[3]);\n    d[0] = std::sqrt(d[1]);\n}\n')
    code = ptx(source, "k", {}, [])
    assert all(op in code for op in ("sqrt.rn.f32", "max.f32", "abs.f32", "sqrt.rn.f64"))
    assert "cvt.f64.f32" not in code


@pytest.mark.parametrize("option, fix", [("--expt-relaxed-constexpr",
                                          "lets device code call constexpr functions without it"),
                                         ("--extended-lambda", "no host lambdas"), ("-O3", "-Xptxas=-O3"),
                                         ("-Xcompiler=-fopenmp", "no host compiler")])
def test_nvcc_only_options_are_refused_naming_what_to_do(option, fix):
    with pytest.raises(PolicyViolation, match=rf"{re.escape(option)}' is an nvcc option; .*{re.escape(fix)}"):
        check_options([option])


def test_asking_whether_has_include_exists_opens_nothing_and_is_allowed(tmp_path):
    """`#ifdef __has_include` (as some CCCL versions write on cuda_bf16.h's path) is no include; naming a header
    by a macro through it still is refused."""
    (tmp_path / "probe.h").write_text("#ifdef __has_include\n#  if __has_include(<cuda_fp16.h>)\n#  endif\n#endif\n"
                                      "#if defined(__has_include) && defined __has_include\n#endif\n")
    (tmp_path / "aimed.h").write_text("#if defined(__has_include) && __has_include(HEADER)\n#endif\n")
    headers = Headers((str(tmp_path),))
    assert check_source("#include <probe.h>\n#ifndef __has_include\n#endif\n", headers)
    with pytest.raises(PolicyViolation, match="aimed.h"):
        check_source("#include <aimed.h>\n", headers)
    with pytest.raises(PolicyViolation, match="must name a header literally"):
        check_source("#if defined(__has_include) && __has_include(HEADER)\n#endif\n", headers)


def test_cccl_before_13_3_is_refused_with_the_fix_named(tmp_path):
    """CCCL 13.0 to 13.2 ask __has_include through a macro, whose arguments a source's #defines can rewrite (the
    H100 machine's CUDA 13.0 toolkit holds one): every header reaching it is refused, naming the package to
    install."""
    (tmp_path / "cuda" / "std" / "__cccl").mkdir(parents=True)
    (tmp_path / "cuda" / "std" / "__cccl" / "preprocessor.h").write_text(
        "#ifdef __has_include\n#  define _CCCL_HAS_INCLUDE(_X) __has_include(_X)\n#endif\n")
    (tmp_path / "cuda" / "std" / "cstdint").write_text("#include <cuda/std/__cccl/preprocessor.h>\n"
                                                       "#if _CCCL_HAS_INCLUDE(<cuda_fp16.h>)\n#endif\n")
    with pytest.raises(PolicyViolation, match=rf"found that CCCL at {re.escape(str(tmp_path))}: install "
                                              r"nvidia-cuda-cccl>=13\.3"):
        check_source("#include <cuda/std/cstdint>\n", Headers((str(tmp_path),)))


def test_the_headers_of_the_packages_on_sys_path_come_before_a_toolkits(tmp_path, monkeypatch):
    """A worker whose packages are on PYTHONPATH (as on the H100 machine, beside an older toolkit that
    cuda.pathfinder would find) compiles with those packages' headers."""
    include = tmp_path / "nvidia" / "cu13" / "include" / "cccl"
    (include / "cuda" / "std").mkdir(parents=True)
    (include / "cuda" / "std" / "version").write_text("")
    info = tmp_path / "nvidia_cuda_cccl-13.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cuda-cccl\nVersion: 13.9.0\n")
    (info / "RECORD").write_text("nvidia/cu13/include/cccl/cuda/std/version,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    vetted_headers.cache_clear()
    try:
        assert vetted_headers().dirs[1] == str(include)
    finally:
        vetted_headers.cache_clear()


def test_a_header_that_includes_by_macro_is_followed_through_the_headers_definitions(tmp_path):
    """As thrust's do: `DETAIL_HEADER(impl.h)` is <lib/detail/impl.h> or <lib/alt/detail/impl.h>, by the branch
    that defined ROOT, and both files are vetted like any other: the second reaches an #include_next, so everything
    reaching it is refused, whether or not the source defines ALT."""
    (tmp_path / "lib" / "detail").mkdir(parents=True)
    (tmp_path / "lib" / "alt" / "detail").mkdir(parents=True)
    (tmp_path / "wrapper.h").write_text('// #include SOMETHING in a comment is no include\n#include "inner.h"\n')
    (tmp_path / "inner.h").write_text("#ifdef ALT\n#define ROOT lib/alt\n#else\n#define ROOT lib\n#endif\n"
                                      "#define DETAIL_HEADER(f) <ROOT/detail/f>\n#include DETAIL_HEADER(impl.h)\n")
    (tmp_path / "lib" / "detail" / "impl.h").write_text("int impl;\n")
    (tmp_path / "lib" / "alt" / "detail" / "impl.h").write_text("#include_next <impl.h>\n")
    headers = Headers((str(tmp_path),))
    for source in ("#include <wrapper.h>\n", '#include "wrapper.h"\n', "#define ALT\n#include <inner.h>\n"):
        with pytest.raises(PolicyViolation, match=r"cannot be included: it reaches lib/alt/detail/impl\.h, which has "
                                                  r"'#include_next <impl\.h>'"):
            check_source(source, headers)


@pytest.mark.parametrize("name", ["impl", "h", "detail", "ROOT", "DETAIL_HEADER"])
def test_no_source_option_or_tune_parameter_may_redefine_a_name_an_include_path_is_built_from(tmp_path, name):
    (tmp_path / "lib" / "detail").mkdir(parents=True)
    (tmp_path / "inner.h").write_text("#define ROOT lib\n#define DETAIL_HEADER(f) <ROOT/detail/f>\n"
                                      "#include DETAIL_HEADER(impl.h)\n")
    (tmp_path / "lib" / "detail" / "impl.h").write_text("int impl;\n")
    headers = Headers((str(tmp_path),))
    assert check_source("#define ALT\n#include <inner.h>\n", headers)
    assert headers.built_from("inner.h", angled=True) == {"DETAIL_HEADER", "ROOT", "lib", "detail", "impl", "h"}
    aimed = f"#define {name} /etc/passwd\n#include <inner.h>\n"
    with pytest.raises(PolicyViolation, match=rf"source line 1: #define {name}: inner\.h includes headers whose names "
                                              rf"its macros build from {name} .*: rename the macro"):
        check_source(aimed, headers)
    with pytest.raises(PolicyViolation, match=rf"#undef {name}"):
        check_source(f"#include <inner.h>\n#undef {name}\n", headers)
    with pytest.raises(PolicyViolation, match=rf"compiler_options: '-D{name}=x': inner\.h includes"):
        check_macro_names("#include <inner.h>\n", option_macros([f"-D{name}=x", "-DTILE=4"]), headers)
    with pytest.raises(PolicyViolation, match=rf"tune parameter {name}: "):
        check_macro_names("#include <inner.h>\n", {name: f"tune parameter {name}"}, headers)
    check_macro_names("#include <other.h>\n", {name: f"tune parameter {name}"}, headers)  # no such include


@pytest.mark.parametrize("inner, why", [
    ("#define P </etc/passwd>\n#include P\n", "it can expand to '</etc/passwd>', which is not a relative header"),
    ("#define P(d) <d/../secret.h>\n#include P(lib)\n", "which is not a relative header name"),
    ("#define CAT(a, b) <a##b>\n#include CAT(x, .h)\n", "CAT quotes or pastes tokens"),
    ("#define CAT(a, b) <a%:%:b>\n#include CAT(x, .h)\n", "CAT quotes or pastes tokens"),
    ("#define V(...) <__VA_ARGS__>\n#include V(x.h)\n", "V takes variable arguments"),
    ("#define L L\n#define M(x) <x.h>\n#include M(L)\n", ""),
])
def test_a_macro_built_include_that_cannot_be_followed_to_plain_headers_is_refused(tmp_path, inner, why):
    (tmp_path / "inner.h").write_text(inner)
    headers = Headers((str(tmp_path),))
    if not why:  # a self-referring macro is not expanded again, as in C: it ends
        assert check_source("#include <inner.h>\n", headers)
        return
    with pytest.raises(PolicyViolation, match=re.escape(why)):
        check_source("#include <inner.h>\n", headers)


@pytest.mark.parametrize("inner, target", [
    ("#define J <lib/impl.h> extra tokens\n#include J\n", "lib/impl.h"),  # NVRTC opens it and warns of the rest
    ("#define f(a) a/g\n#define g(a) f(a)\n#define H <f(lib)(x)>\n#include H\n", "lib/x/g"),  # g rescans f
])
def test_every_header_a_macro_built_include_can_open_is_vetted(tmp_path, inner, target):
    """The expansion is followed as C follows it (a call's result rescanned with what follows it), and a header name
    followed by more tokens still names its header: each file reached is vetted (here, one with #include_next)."""
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text("#include_next <impl.h>\n")
    (tmp_path / "inner.h").write_text(inner)
    with pytest.raises(PolicyViolation, match=rf"reaches {re.escape(target)}, which has '#include_next <impl\.h>'"):
        check_source("#include <inner.h>\n", Headers((str(tmp_path),)))


@pytest.mark.parametrize("source", [
    "constexpr long n = 1'000'000; // C++14 digit separators\n",
    'const char *s = R"(raw /* not a comment )"; const char c = \'"\';\n',
    "__device__ const char *w = u8R\"x(a)\" \")x\";\n",
])
def test_ordinary_literals_pass_in_every_reading(source):
    assert check_source(source + "#include <cuda_fp16.h>\n")


def test_a_source_is_read_in_the_mode_of_its_std():
    """A raw string's lines are no directives from C++11 on, and a digit separator opens no literal from C++14 on:
    read as C++03, the same text holds an #include of a header kforge lacks."""
    source = ('__device__ const char *doc = R"(\n#include <unistd.h>\n)";\nconstexpr int n = 1\'000; /*\n'
              '#include <sys/mman.h>\n*/\n')
    assert check_source(source, options=[]) and check_source(source, options=["--std=c++20"])
    with pytest.raises(PolicyViolation, match="unistd.h"):
        check_source(source, options=["--std=c++03"])
    with pytest.raises(PolicyViolation, match="sys/mman.h"):
        check_source(source, options=["--std=c++11"])


def test_cub_block_load_is_included_and_the_names_thrust_builds_its_includes_from_are_kept():
    """BlockLoad reaches thrust's `#include __THRUST_DEVICE_SYSTEM_ALGORITH_DETAIL_HEADER_INCLUDE(...)`."""
    built = vetted_headers().built_from("cub/block/block_load.cuh", angled=True)
    assert {"__THRUST_DEVICE_SYSTEM_ROOT", "cuda", "detail", "h"} <= built
    with pytest.raises(PolicyViolation, match="source line 1: #define detail: cub/block/block_load.cuh includes"):
        check_source("#define detail ../../../etc\n" + ORDINARY["cub_block_load_sum"])
    with pytest.raises(CompileError, match="tune parameter h: cub/block/block_load.cuh includes"):
        compile_kernel(ORDINARY["cub_block_load_sum"], "cub_block_load_sum", {"h": 1}, [], "sm_90")


def test_a_header_linked_outside_the_directories_is_refused(tmp_path):
    (tmp_path / "inside").mkdir()
    (tmp_path / "outside.h").write_text("int secret;\n")
    (tmp_path / "inside" / "escape.h").symlink_to(tmp_path / "outside.h")
    with pytest.raises(PolicyViolation, match="outside the CUDA headers' directories"):
        check_source("#include <escape.h>\n", Headers((str(tmp_path / "inside"),)))


def test_with_no_headers_installed_every_angle_include_is_refused():
    with pytest.raises(PolicyViolation, match="found no CUDA headers"):
        check_source("#include <cuda_fp16.h>\n", Headers(()))
