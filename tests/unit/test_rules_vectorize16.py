"""vectorize on elementwise kernels of 2-byte, 1-byte and 8-byte elements (issue 21): half and bfloat16 kernels
(haxpy, bf16_axpy and variants written otherwise), bytes, doubles, and kernels mixing widths take 16 bytes of
their widest array per vector (as many elements of the narrower, aligned to what they move), each lane running
the body as written (so each element rounds as it did), with a scalar tail and, when an array is not aligned to its vector at
run time, the element loop alone. Every rewrite compiles with NVRTC for every configuration of its space and keeps
the signature; the rewrites run on the CPU (g++, the kernel body
as written over stand-ins of the fp16/bf16 intrinsics, every thread of the launch in turn) and match the
submitted kernel bit for bit at sizes no vector divides, at every configuration, aligned and misaligned (built
with UBSan's alignment check, so a 16-byte access through a misaligned pointer stops the run as ld.global.v4 faults
on the GPU). tests/unit/test_rules_vectorize_aligned.py holds the 4-byte kernels to the same checks with these
helpers. The GPU verifies them too (tests/gpu/test_rules_shapes_verified.py)."""
import ctypes
import itertools
import math
import os
import pickle
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from services.generator import rules
from services.generator.rules.cuda_text import IDENTIFIER, find_kernel, mask, normalised, template_types
from services.generator.rules.elementwise import lanes, model
from shared.domain.dtypes import host_dtype, to_bfloat16
from shared.domain.spec import CandidateSpec, KernelSpec, kernel_base_name
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import DAXPY, array, sample, scalar, spec
from tests.unit.test_rules_shapes import _compile, _types, signature

ARCH = "sm_90"
CORPUS = {kernel.name: kernel for kernel in corpus()}

# --- kernels of narrow elements written otherwise than the corpus's -------------------------------------
HSCALE_ADD = spec(r"""
#include <cuda_fp16.h>
// out = s * in + bias in half precision, computed in float: a grid-stride loop over unsigned indices, the
// `half` spelling, restrict, two statements and a pure output.
extern "C" __global__ void hscale_add(half *__restrict__ out, const half *__restrict__ in, const half *bias, float s,
                                      unsigned int count)
{
    for (unsigned int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < count; idx += blockDim.x * gridDim.x) {
        float t = __half2float(in[idx]) * s;  // in float
        out[idx] = __float2half(t + __half2float(bias[idx]));
    }
}
""", "hscale_add", [array("out", ["count"], "float16", "out"), array("in", ["count"], "float16"),
                    array("bias", ["count"], "float16"), scalar("s", 1.5, "float32"),
                    scalar("count", "count", "uint32")], {"count": 1 << 20}, ["count"],
    tune_params={"block_size_x": [64, 128, 256]})

BF16_RAMP = spec(r"""
#include <cuda_bf16.h>
// bfloat16 weights widened to float plus a ramp in the index: 2- and 4-byte arrays together, the block size a
// define, the guarded statement without braces.
extern "C" __global__ void bf16_ramp(float *wide, const __nv_bfloat16 *w, float step, int len)
{
    const int gid = blockIdx.x * block_size_x + threadIdx.x;
    if (gid < len) wide[gid] = __bfloat162float(w[gid]) + step * gid;
}
""", "bf16_ramp", [array("wide", ["len"], "float32", "out"), array("w", ["len"], "bfloat16"),
                   scalar("step", 0.25, "float32"), scalar("len", "len")], {"len": 1 << 20}, ["len"],
    tune_params={"block_size_x": [128, 256, 512]})

THRESHOLD_U8 = spec(r"""
// A binary mask of an 8-bit image: 255 where a pixel is above the level, else 0.
extern "C" __global__ void threshold_u8(unsigned char *binary, const unsigned char *img, unsigned char level,
                                        int pixels)
{
    int p = threadIdx.x + blockIdx.x * blockDim.x;
    if (p < pixels) {
        binary[p] = img[p] > level ? 255 : 0;
    }
}
""", "threshold_u8", [array("binary", ["pixels"], "uint8", "out"), array("img", ["pixels"], "uint8"),
                      scalar("level", 128, "uint8"), scalar("pixels", "pixels")], {"pixels": 1920 * 1080},
    ["pixels"], tune_params={"block_size_x": [128, 256]})

DEQUANTIZE = spec(r"""
// int8 weights to float: one byte in, four out, so each vector moves 16 bytes in and 64 out.
extern "C" __global__ void dequantize(float *out, const signed char *q, float scale, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scale * (float)q[i];
}
""", "dequantize", [array("out", ["n"], "float32", "out"), array("q", ["n"], "int8"),
                    scalar("scale", 0.125, "float32"), scalar("n", "n")], {"n": 1 << 20}, ["n"],
    tune_params={"block_size_x": [128, 256]})

# The variants vectorize takes, and the lanes of their vectors (the GPU test verifies them too).
NARROW_VARIANTS = {"hscale_add": HSCALE_ADD, "bf16_ramp": BF16_RAMP, "threshold_u8": THRESHOLD_U8,
                   "dequantize": DEQUANTIZE}
KERNELS = {"haxpy": CORPUS["haxpy"].spec(), "bf16_axpy": CORPUS["bf16_axpy"].spec(), **NARROW_VARIANTS,
           "daxpy": DAXPY}
# 16 bytes of the widest array
LANES = {"haxpy": 8, "bf16_axpy": 8, "hscale_add": 8, "bf16_ramp": 4, "threshold_u8": 16, "dequantize": 4,
         "daxpy": 2}
# What vectorize is applied after: nothing, elements_per_thread, or every rule that applies in the plan's order.
ORDERS = {"alone": ("vectorize",), "ept": ("elements_per_thread", "vectorize"), "plan": None}


def applied(spec_: KernelSpec, order: tuple[str, ...] | None) -> CandidateSpec:
    candidate = spec_.as_candidate()
    if order is not None:
        for rule_id in order:
            candidate = rules.apply(rule_id, spec_, candidate)
        return candidate
    progress = True
    while progress:
        progress = False
        for rule_id in rules.PLAN_ORDER:
            if rules.check(rule_id, spec_, candidate) is None:
                candidate, progress = rules.apply(rule_id, spec_, candidate), True
    return candidate


def every_configuration(candidate: CandidateSpec) -> list[dict]:
    names = list(candidate.tune_params)
    return [dict(zip(names, values)) for values in itertools.product(*candidate.tune_params.values())]


# --- which kernels it takes --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_vectorize_takes_2_1_and_8_byte_elementwise_kernels(name):
    spec_ = KERNELS[name]
    assert rules.check("vectorize", spec_, spec_.as_candidate()) is None
    assert rules.check("elements_per_thread", spec_, spec_.as_candidate()) is None
    assert lanes(model(spec_)) == LANES[name]


def test_vectorize_refuses_arrays_it_cannot_type():
    as_array = HSCALE_ADD.model_validate({**HSCALE_ADD.model_dump(), "source": HSCALE_ADD.source.replace(
        "const half *bias", "const half bias[]")})
    assert rules.check("vectorize", as_array, as_array.as_candidate()) == (
        "bias is not declared as a plain pointer (`const T *bias`), so its element type for the vector of 8 lanes "
        "is unknown")


# --- what the rewrite looks like ---------------------------------------------------------------------------
def test_haxpy_moves_eight_halves_per_access_and_computes_each_as_written():
    haxpy = KERNELS["haxpy"]
    candidate = applied(haxpy, ORDERS["ept"])
    code = candidate.source
    assert "struct __align__(16) half_x8 { __half lane[8]; };" in code
    assert ("if ((reinterpret_cast<unsigned long long>(y) & 15) == 0 && "
            "(reinterpret_cast<unsigned long long>(x) & 15) == 0) {") in code
    assert "half_x8 y8 = reinterpret_cast<const half_x8 *>(y)[v];" in code  # in place: read, then written
    assert "const half_x8 x8 = reinterpret_cast<const half_x8 *>(x)[v];" in code
    assert "y8.lane[k] = __hfma(__float2half(a), x8.lane[k], y8.lane[k]);" in code  # the body, lane by lane
    assert "reinterpret_cast<half_x8 *>(y)[v] = y8;" in code
    assert "for (int i = 8 * vectors + blockIdx.x * blockDim.x + threadIdx.x; i < n;" in code  # the tail
    assert "hfma2" not in code and "half2" not in code  # no paired instructions: each element as the kernel had it
    assert mask(code).count("y[i] = __hfma(__float2half(a), x[i], y[i]);") == 2  # the tail and the fallback
    assert candidate.grid_div_x == ["block_size_x", "elements_per_thread", 8]
    assert candidate.tune_params == {"block_size_x": [128, 256, 512, 1024], "elements_per_thread": [1, 2, 4, 8, 16]}
    assert candidate.params == {"block_size_x": 256, "elements_per_thread": 4}
    assert applied(haxpy, ORDERS["alone"]).grid_div_x == ["block_size_x", 8]


def test_mixed_and_byte_kernels_take_16_bytes_of_their_widest_array():
    """A vector of 4 lanes beside floats: bfloat16s move 8 bytes, aligned to 8, so a warp's stores of floats stay
    contiguous (lanes by the narrowest array had each thread store 32 bytes)."""
    ramp = applied(BF16_RAMP, ORDERS["alone"])
    assert "struct __align__(8) nv_bfloat16_x4 { __nv_bfloat16 lane[4]; };" in ramp.source
    assert "struct __align__(16) float_x4 { float lane[4]; };" in ramp.source
    assert "(reinterpret_cast<unsigned long long>(w) & 7) == 0" in ramp.source
    assert "float_x4 wide4;" in ramp.source  # a pure output is not loaded
    assert "const int gid = 4 * v + k;" in ramp.source  # the body reads the index: each lane has its own
    assert ramp.grid_div_x == ["block_size_x", 4]
    binary = applied(THRESHOLD_U8, ORDERS["alone"])
    assert "struct __align__(16) unsigned_char_x16 { unsigned char lane[16]; };" in binary.source
    assert "binary16.lane[k] = img16.lane[k] > level ? 255 : 0;" in binary.source
    assert binary.grid_div_x == ["block_size_x", 16]


def test_haxpy_and_bf16_axpy_compose_in_plan_order_and_in_reverse():
    for name in ("haxpy", "bf16_axpy"):
        spec_ = KERNELS[name]
        forward = applied(spec_, None)
        candidate = spec_.as_candidate()
        for _ in range(3):
            for rule_id in reversed(rules.PLAN_ORDER):
                if rules.check(rule_id, spec_, candidate) is None:
                    candidate = rules.apply(rule_id, spec_, candidate)
        assert set(rules.applied(forward.source)) == set(rules.applied(candidate.source)) == {
            "restrict", "elements_per_thread", "vectorize", "unroll", "launch_bounds"}
        assert normalised(forward.source) == normalised(candidate.source)
        assert forward.grid_div_x == candidate.grid_div_x == ["block_size_x", "elements_per_thread", 8]


# --- every rewrite compiles and keeps the signature (helpers shared with test_rules_shapes) ---------------


@pytest.mark.parametrize("name, order", [(name, order) for name in KERNELS for order in ORDERS])
def test_each_rewrite_compiles_for_every_configuration_and_keeps_the_signature(name, order):
    assert_compiles_for_every_configuration(KERNELS[name], order)


def assert_compiles_for_every_configuration(spec_: KernelSpec, order: str) -> None:
    """The rewrite after `order` compiles with NVRTC (kforge's compile path) for every configuration of its space
    (a sample of the plan's), and its parameters are the submitted kernel's as PTX declares them."""
    candidate = applied(spec_, ORDERS[order])
    assert "vectorize" in rules.applied(candidate.source)
    source, options = normalised(candidate.source), tuple(spec_.compiler_options)
    assert signature(source, spec_) == signature(spec_.source, spec_)
    original = _types(spec_.source, spec_.kernel_name, tuple(sorted(spec_.baseline_params().items())), options)
    launched = spec_.for_candidate(candidate)
    configurations = [c for c in every_configuration(candidate) if launched.restrictions_hold({**candidate.params, **c})]
    if order == "plan":  # elements_per_thread x loop_unroll_factor x block sizes: a sample
        configurations = sample(candidate, spec_, 8)
    assert configurations
    for params in configurations:
        defines = tuple(sorted({**spec_.baseline_params(), **candidate.params, **params}.items()))
        _compile(source, spec_.kernel_name, defines, options)
        assert _types(source, spec_.kernel_name, defines, options) == original


# --- the vector grid covers every element once ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["haxpy", "threshold_u8"])
@pytest.mark.parametrize("size", [1, 7, 17, 4099, 999_983])
def test_the_vector_grid_covers_every_element_once_at_odd_sizes(name, size):
    """The vector loop's lanes and the tail's elements, at the candidate's own launch geometry: every element
    once, and no thread runs more than elements_per_thread vectors."""
    spec_ = KERNELS[name]
    width = LANES[name]
    candidate = applied(spec_, ORDERS["ept"])
    dimension = spec_.problem_size[0]
    at_size = spec_.with_sizes({dimension: size}).for_candidate(candidate)
    vectors = size // width
    for params in every_configuration(candidate):
        (grid, _, _), (block, _, _) = at_size.launch_geometry({**candidate.params, **params})
        ept = params["elements_per_thread"]
        assert grid == math.ceil(size / (block * ept * width))
        threads = np.arange(grid * block)
        handled = np.zeros(size, dtype=np.int64)
        for round_ in range(ept + 1):
            v = threads + round_ * grid * block
            v = v[v < vectors]
            assert round_ < ept or v.size == 0
            for lane in range(width):
                np.add.at(handled, width * v + lane, 1)
        tail = width * vectors + threads
        np.add.at(handled, tail[tail < size], 1)
        assert (handled == 1).all()


# --- the rewrites run on the CPU and agree with the submitted kernel bit for bit ------------------------------
# The fp16/bf16 types and intrinsics the kernels use, as host code: a stand-in for the device's, the same in the
# submitted kernel and the rewrite, so what differs is only which element each lane, tail and fallback computes.
PRELUDE = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
struct kforge_dim3 { unsigned int x, y, z; };
static kforge_dim3 threadIdx, blockIdx, blockDim, gridDim;
extern "C" { int block_size_x = 1, elements_per_thread = 1, loop_unroll_factor = 1, vectors_in_flight = 1; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
struct __half { uint16_t bits; };
typedef __half half;
struct __nv_bfloat16 { uint16_t bits; };
static inline float __half2float(__half h) { _Float16 f; memcpy(&f, &h.bits, 2); return (float)f; }
static inline __half __float2half(float f) { _Float16 g = (_Float16)f; __half h; memcpy(&h.bits, &g, 2); return h; }
static inline __half __hfma(__half a, __half b, __half c) {
    return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c)));
}
static inline float __bfloat162float(__nv_bfloat16 b) { uint32_t u = (uint32_t)b.bits << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u; memcpy(&u, &f, 4); __nv_bfloat16 b; b.bits = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); return b;
}
// A read through the read-only cache is a read; vectorize_loops's vectors of four.
template <typename T> static inline T __ldg(const T *p) { return *p; }
struct __align__(16) float4 { float x, y, z, w; };
"""
GXX = shutil.which("g++")
needs_gxx = pytest.mark.skipif(GXX is None, reason="no g++ to run the kernels on the CPU")
# A 16-byte vector is a struct aligned to 16, which a misaligned pointer breaks: UBSan stops the emulated kernel at
# such an access (and x86's aligned moves trap), as ld.global.v4 faults on the GPU; run() reports it as a failure.
SANITIZE = ("-fsanitize=alignment", "-fno-sanitize-recover=alignment")


def launched_parameters(source: str, kernel_name: str) -> list[str]:
    """The kernel's parameter declarations as a host launcher declares them: a template's type parameters spelled
    as the instance `kernel_name` names them (`const T *x` of `row_dot<double>` as `const double *x`)."""
    kernel = find_kernel(source, kernel_name)
    types = template_types(kernel, kernel_name)
    return [re.sub(r"[A-Za-z_]\w*", lambda word: types.get(word[0], word[0]), source[a:b].strip())
            for a, b in kernel.parameters(source)]


def threaded_library(code: str, directory: Path, stem: str, defines: dict) -> ctypes.CDLL:
    """C++ of kernels emulated a host thread per CUDA thread, built into a library of `directory` (a name of its
    own per build) with the tune parameters as defines and the alignment check on; a template instance's static
    locals kept to its library (-fno-gnu-unique: unique, they would be one object across the libraries loaded)."""
    path = directory / f"{kernel_base_name(stem)}{len(list(directory.iterdir()))}"
    path.with_suffix(".cpp").write_text(code)
    flags = [f"-D{name}={value}" for name, value in defines.items()]
    subprocess.run([GXX, "-std=c++17", "-O1", "-pthread", "-fno-gnu-unique", *SANITIZE, "-Wno-unknown-pragmas",
                    *flags, "-shared", "-fPIC", "-o", str(path.with_suffix(".so")), str(path.with_suffix(".cpp"))],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(path.with_suffix(".so")))


class Bits16(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_uint16)]


SCALARS = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "float32": ctypes.c_float, "float64": ctypes.c_double,
           "int64": ctypes.c_int64, "uint64": ctypes.c_uint64, "int8": ctypes.c_int8,
           "uint8": ctypes.c_uint8, "int16": ctypes.c_int16, "uint16": ctypes.c_uint16, "float16": Bits16,
           "bfloat16": Bits16}


class HostKernels:
    """Kernels built as host code (g++, into `directory`), one library per distinct source."""

    def __init__(self, directory: Path):
        self.directory, self.built = directory, {}

    def __call__(self, source: str, kernel_name: str) -> ctypes.CDLL:
        """The kernel as a host function, and `kforge_launch(grid, block, args...)` running every thread of a
        1D launch in turn (elementwise kernels share nothing between threads). A template kernel is launched
        as the instance `kernel_name` names (scale<float>)."""
        if source in self.built:
            return self.built[source]
        kernel = find_kernel(source, kernel_name)
        parameters = [_instance_types(source[a:b].strip(), kernel.declaration, kernel_name)
                      for a, b in kernel.parameters(source)]
        names = [IDENTIFIER.findall(mask(p))[-1] for p in parameters]
        launcher = (f'extern "C" void kforge_launch(unsigned int kforge_grid, unsigned int kforge_block'
                    f'{"".join(", " + p for p in parameters)}) {{\n'
                    f"    gridDim = {{kforge_grid, 1, 1}}; blockDim = {{kforge_block, 1, 1}};\n"
                    f"    for (unsigned int kforge_b = 0; kforge_b < kforge_grid; ++kforge_b)\n"
                    f"        for (unsigned int kforge_t = 0; kforge_t < kforge_block; ++kforge_t) {{\n"
                    f"            blockIdx = {{kforge_b, 0, 0}}; threadIdx = {{kforge_t, 0, 0}};\n"
                    f"            {kernel_name}({', '.join(names)});\n"
                    f"        }}\n}}\n")
        code = re.sub(r"^\s*#\s*include\b.*$", "", source, flags=re.M)
        path = self.directory / f"k{len(self.built)}"
        path.with_suffix(".cpp").write_text(PRELUDE + code + launcher)
        subprocess.run([GXX, "-O1", "-fno-strict-aliasing", "-Wno-unknown-pragmas", *SANITIZE, "-shared", "-fPIC",
                        "-o", str(path.with_suffix(".so")), str(path.with_suffix(".cpp"))], check=True,
                       capture_output=True, text=True)
        self.built[source] = ctypes.CDLL(str(path.with_suffix(".so")))
        return self.built[source]


def _instance_types(parameter: str, declaration: str, kernel_name: str) -> str:
    """A parameter of a template kernel with the instance's arguments for the template's type names (`T *out`
    of scale<float>: `float *out`); any other parameter as written."""
    template = re.search(r"template\s*<(?P<names>.*)>", declaration, re.S)
    instance = re.fullmatch(r"[^<]*<(?P<arguments>.*)>\s*", kernel_name, re.S)
    if template is None or instance is None:
        return parameter
    names = [re.findall(r"\w+", name)[-1] for name in template["names"].split(",")]
    for name, argument in zip(names, instance["arguments"].split(",")):
        parameter = re.sub(rf"\b{name}\b", argument.strip(), parameter)
    return parameter


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return HostKernels(tmp_path_factory.mktemp("emulated"))


class EmulatedFault(AssertionError):
    """The emulated kernel stopped (a misaligned 16-byte access, or any other fault) instead of returning."""


def _in_child(work: Callable[[], object]) -> object:
    """work() run in a forked child and its result sent back, so a kernel that faults fails the test (with
    EmulatedFault) instead of ending the test process."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, and end without running the parent's cleanup
        code = 1
        try:
            os.close(read)
            with os.fdopen(write, "wb") as answer:
                answer.write(pickle.dumps(work()))
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise EmulatedFault(f"the emulated kernel stopped ({f'signal {-code}' if code < 0 else f'exit {code}'}); "
                            f"AddressSanitizer or UBSan names the fault in the captured stderr")
    return pickle.loads(data)


def inputs(spec_: KernelSpec, seed: int) -> dict[str, np.ndarray]:
    """Each array's first values: inputs drawn, outputs a pattern a kernel that skips an element leaves."""
    rng = np.random.default_rng(seed)
    values = {}
    for arg in spec_.args:
        if not arg.is_array:
            continue
        shape = spec_.shape_of(arg)
        if arg.effective_role == "out":
            values[arg.name] = rng.integers(0, 256, math.prod(shape) * host_dtype(arg.dtype).itemsize,
                                            dtype=np.uint8).view(host_dtype(arg.dtype))
        elif arg.dtype == "bfloat16":
            values[arg.name] = to_bfloat16(rng.normal(0, 4, shape))
        elif arg.dtype in ("float16", "float32", "float64"):
            values[arg.name] = rng.normal(0, 4, shape).astype(arg.dtype)
        else:
            info = np.iinfo(arg.dtype)
            values[arg.name] = rng.integers(info.min, info.max + 1, shape, dtype=arg.dtype)
    return values


def run(library: ctypes.CDLL, spec_: KernelSpec, params: dict, values: dict[str, np.ndarray],
        misaligned: str | None = None, null: str | None = None) -> dict[str, bytes]:
    """The kernel run on copies of `values` placed 16-byte aligned (the `misaligned` one an element past that,
    the `null` one passed as a null pointer), at the launch geometry of `spec_` (a candidate's spec) for `params`;
    each array's bytes after. The launch runs in a child process: EmulatedFault when the kernel faults."""
    return run_each(library, spec_, [params], values, misaligned, null)[0]


def run_each(library: ctypes.CDLL, spec_: KernelSpec, configurations: list[dict], values: dict[str, np.ndarray],
             misaligned: str | None = None, null: str | None = None) -> list[dict[str, bytes]]:
    """run() for each configuration in turn, each on fresh copies of `values`, all in one child (a fork costs
    more than a launch); a fault is then found again one configuration at a time, to name the one it is at."""
    launches = [_launch(library, spec_, params, values, misaligned, null) for params in configurations]
    try:
        return _in_child(lambda: [launch() for launch in launches])
    except EmulatedFault:
        for params, launch in zip(configurations, launches):
            try:
                _in_child(launch)
            except EmulatedFault as fault:
                raise EmulatedFault(f"{fault}, at {params}") from None
        raise


def _launch(library: ctypes.CDLL, spec_: KernelSpec, params: dict, values: dict[str, np.ndarray],
            misaligned: str | None, null: str | None) -> Callable[[], dict[str, bytes]]:
    """One launch for run_each, run where it is called: its arrays placed afresh, its tune parameters set."""
    (grid, _, _), (block, _, _) = spec_.launch_geometry(params)
    scalars, types = {}, [ctypes.c_uint, ctypes.c_uint]
    for arg in spec_.args:
        if arg.is_array:
            types.append(ctypes.c_void_p)
        else:
            value = spec_.scalar_of(arg, params)
            kind = SCALARS[arg.dtype]
            scalars[arg.name] = kind(int(np.asarray(value).view(np.uint16))) if kind is Bits16 else kind(value.item())
            types.append(kind)

    def launch() -> dict[str, bytes]:
        for name in ("block_size_x", "elements_per_thread", "loop_unroll_factor", "vectors_in_flight"):
            if name in params:
                ctypes.c_int.in_dll(library, name).value = int(params[name])
        held, arguments = {}, []
        for arg in spec_.args:
            if not arg.is_array:
                arguments.append(scalars[arg.name])
                continue
            if arg.name == null:
                arguments.append(None)
                continue
            data = values[arg.name]
            raw = np.zeros(data.nbytes + 32, np.uint8)
            start = (-raw.ctypes.data) % 16 + (data.itemsize if arg.name == misaligned else 0)
            held[arg.name] = raw[start:start + data.nbytes]
            held[arg.name][:] = data.reshape(-1).view(np.uint8)
            arguments.append(held[arg.name].ctypes.data)
        library.kforge_launch.argtypes = types
        library.kforge_launch.restype = None
        library.kforge_launch(grid, block, *arguments)
        return {name: placed.tobytes() for name, placed in held.items()}
    return launch


def assert_computes_every_element_as_submitted(build: HostKernels, spec_: KernelSpec, order: str, width: int) -> None:
    """At sizes below, at and around a vector and a grid's reach, for every configuration (a sample of the
    plan's larger space), with every array aligned and with each one misaligned in turn, the rewrite after
    `order` leaves every array bit for bit as the submitted kernel does, and never faults."""
    candidate = applied(spec_, ORDERS[order])
    dimension = spec_.problem_size[0]
    submitted = build(spec_.source, spec_.kernel_name)
    rewritten = build(normalised(candidate.source), spec_.kernel_name)
    configurations = every_configuration(candidate) if order != "plan" else sample(candidate, spec_, 8)
    arrays = [arg.name for arg in spec_.args if arg.is_array]
    for size in (1, width - 1, width, width + 1, 3 * width * 128 + 5, 2 * 1024 * width + width - 1):
        at_size = spec_.with_sizes({dimension: size})
        values = inputs(at_size, size)
        expected = run(submitted, at_size, at_size.baseline_params(), values)
        configs = [{**at_size.baseline_params(), **candidate.params, **params} for params in configurations]
        for misaligned in (None, *arrays):
            for params, got in zip(configurations, run_each(rewritten, at_size.for_candidate(candidate), configs,
                                                            values, misaligned)):
                assert got == expected, (size, params, misaligned)


EMULATED = [(name, order) for name in KERNELS for order in ORDERS]


@needs_gxx
@pytest.mark.parametrize("name, order", EMULATED)
def test_the_rewrite_computes_every_element_as_the_submitted_kernel_did(build, name, order):
    assert_computes_every_element_as_submitted(build, KERNELS[name], order, LANES[name])


@needs_gxx
def test_the_emulation_runs_the_vector_path_when_aligned_and_the_fallback_when_not(build):
    """A rewrite with its vector lanes mixed up differs from the submitted kernel aligned, not misaligned: the
    emulation above does run both paths."""
    spec_ = KERNELS["haxpy"]
    candidate = applied(spec_, ORDERS["alone"])
    broken = normalised(candidate.source).replace("x8.lane[k]", "x8.lane[7 - k]")
    assert broken != normalised(candidate.source)
    library = build(broken, spec_.kernel_name)
    at_size = spec_.with_sizes({"n": 1001})
    values = inputs(at_size, 3)
    expected = run(build(spec_.source, spec_.kernel_name), at_size, at_size.baseline_params(), values)
    config = {**at_size.baseline_params(), **candidate.params}
    assert run(library, at_size.for_candidate(candidate), config, values) != expected
    assert run(library, at_size.for_candidate(candidate), config, values, misaligned="x") == expected
