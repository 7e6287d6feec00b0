"""kforge's own kernels, run where the data is: the input generator of shared/adapters/inputs.py and the checks the
verifier makes of a run, so that only a few numbers cross PCIe instead of every array.

One module per dtype, compiled through the compile sandbox like any kernel (kforge's own source is no
exception to the sandbox) and loaded when the GPU process starts.
"""
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.nvrtc import CompileError
from shared.adapters.inputs import FLOAT_BITS, GOLDEN, SPECIAL_STRIDE, Distribution
from shared.domain.dtypes import BFLOAT16, host_dtype
from shared.domain.spec import DTYPES

SOURCE = r"""
typedef unsigned long long u64;

__device__ __forceinline__ u64 mix64(u64 z) {  // splitmix64's finaliser, as shared/adapters/inputs.py has it
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float half_to_float(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short double_to_half(double d) {  // correctly rounded, as numpy's; sm_70+
    unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h;
}
__device__ __forceinline__ float bfloat16_to_float(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }
// Correctly rounded, bit for bit as shared/domain/dtypes.py's to_bfloat16 and without the bfloat16 conversions of sm_80+
// (every module compiles for the device's arch): to float rounded to odd (towards zero, the last bit set when
// inexact), then to nearest even in integer steps; a NaN becomes the canonical 0x7fff.
__device__ __forceinline__ unsigned short double_to_bfloat16(double d) {
    if (isnan(d)) return 0x7fff;
    float f = __double2float_rz(d);
    unsigned int u = __float_as_uint(f) | ((double)f != d);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#define FIRST_THREAD (blockIdx.x * (u64)blockDim.x + threadIdx.x)
#define ALL_THREADS ((u64)gridDim.x * blockDim.x)

// shared/adapters/inputs.py's draw, step by step with the same roundings (no fused multiply-add): the bits b of element
// i become a value in [low, high) as the host's Distribution, whose fields are the arguments from `low` on, says.
// A sorted element's place i + u, u in [0, 1) from the bits, is never above the next element's.
__device__ __forceinline__ double place(u64 b, u64 i) {
    return __dadd_rn((double)i, __dmul_rn((double)(b >> 11), TWO_TO_MINUS_53));
}
#ifdef FLOAT_VALUES
__device__ __forceinline__ VALUE draw(u64 b, u64 i, u64 low, u64 span, double origin, double scale, double limit,
                                      double below, unsigned int sorted) {
    double unit = sorted ? place(b, i) : __dmul_rn((double)(b >> (64 - PRECISION)), UNIT);
    VALUE value = FROM_DOUBLE(__dadd_rn(origin, __dmul_rn(unit, scale)));
    return TO_DOUBLE(value) >= limit ? FROM_DOUBLE(below) : value;  // rounding may reach high, which is left out
}
#else
__device__ __forceinline__ VALUE draw(u64 b, u64 i, u64 low, u64 span, double origin, double scale, double limit,
                                      double below, unsigned int sorted) {
    u64 offset;
    if (sorted) {
        double whole = floor(__dmul_rn(place(b, i), scale));
        offset = whole < limit ? (u64)whole : span - 1;
    } else {
        offset = span <= (1ull << 32) ? ((b >> 32) * span) >> 32 : __umul64hi(b, span);
    }
    return (VALUE)(low + offset);  // two's complement, as numpy's cast from uint64
}
#endif

// Element i of the stream `key`; every SPECIAL_STRIDE-th element cycles through `specials` instead.
extern "C" __global__ void kforge_generate(VALUE *out, u64 n, u64 key, const VALUE *specials, unsigned int nspecials,
                                           u64 low, u64 span, double origin, double scale, double limit,
                                           double below, unsigned int sorted) {
    for (u64 i = FIRST_THREAD; i < n; i += ALL_THREADS) {
        out[i] = nspecials && i % SPECIAL_STRIDE == 0
                     ? specials[(i / SPECIAL_STRIDE) % nspecials]
                     : draw(mix64(key + (i + 1) * GOLDEN), i, low, span, origin, scale, limit, below, sorted);
    }
}

// An output against a reference, the host's rule: |out - ref| <= atol + rtol * |ref|, NaN matches NaN only,
// an infinity the same infinity only. stats: unwritten (all bytes poison where the reference's are not),
// not finite where the reference is, beyond tolerance: each a count and its first index; then the largest
// absolute and relative error over the finite elements (non-negative doubles order like their bits, so
// atomicMax on the bits works). Rounded steps spelt out, so no fused multiply-add differs from numpy.
extern "C" __global__ void kforge_compare(const VALUE *out, const VALUE *ref, u64 n, double atol, double rtol,
                                          u64 *stats) {
    const BITS poison = (BITS)~(BITS)0;
    u64 found[3] = {0, 0, 0}, first[3] = {~0ull, ~0ull, ~0ull};
    double max_abs = 0.0, max_rel = 0.0;
    for (u64 i = FIRST_THREAD; i < n; i += ALL_THREADS) {
        double o = TO_DOUBLE(out[i]), r = TO_DOUBLE(ref[i]);
        bool special = !isfinite(o) || !isfinite(r), bad;
        if (special) {
            bad = !((isnan(o) && isnan(r)) || (isinf(o) && o == r));
        } else {
            double err = fabs(__dsub_rn(o, r));
            bad = err > __dadd_rn(atol, __dmul_rn(rtol, fabs(r)));
            max_abs = fmax(max_abs, err);
            if (r != 0.0) max_rel = fmax(max_rel, __ddiv_rn(err, fabs(r)));
        }
        bool flags[3] = {((const BITS *)out)[i] == poison && ((const BITS *)ref)[i] != poison,
                         !isfinite(o) && isfinite(r), bad};
        for (int k = 0; k < 3; k++) {
            if (flags[k]) { if (!found[k]) first[k] = i; found[k]++; }
        }
    }
    for (int k = 0; k < 3; k++) {
        if (found[k]) { atomicAdd(&stats[2 * k], found[k]); atomicMin(&stats[2 * k + 1], first[k]); }
    }
    if (max_abs > 0.0) atomicMax(&stats[6], (u64)__double_as_longlong(max_abs));
    if (max_rel > 0.0) atomicMax(&stats[7], (u64)__double_as_longlong(max_rel));
}

// Reads `words` 16-byte words at `p`, writing nothing (`never` is 0): reading twice the L2's bytes evicts what a
// timed launch would otherwise find there and leaves L2 clean. A flush that writes (a memset) leaves it full of
// dirty lines instead, and the launch then pays for writing them back to DRAM, bytes that are not its own.
extern "C" __global__ void kforge_evict(const ulonglong2 *p, u64 words, unsigned int never, u64 *sink) {
    u64 seen = 0;
    for (u64 i = FIRST_THREAD; i < words; i += ALL_THREADS) {
        const ulonglong2 w = __ldcg(&p[i]);
        seen ^= w.x ^ w.y;
    }
    if (never) sink[0] = seen;
}

// Bytes that differ from `expected` (or from `value` where expected is null): count and first offset.
extern "C" __global__ void kforge_changed_bytes(const unsigned char *p, u64 n, const unsigned char *expected,
                                                unsigned int value, u64 *stats) {
    u64 count = 0, first = ~0ull;
    for (u64 i = FIRST_THREAD; i < n; i += ALL_THREADS) {
        if (p[i] != (expected ? expected[i] : (unsigned char)value)) { if (!count) first = i; count++; }
    }
    if (count) { atomicAdd(&stats[0], count); atomicMin(&stats[1], first); }
}

// The largest finite |x| (as the bits of a non-negative double, which order like its value): the scale of what
// a sum of these inputs can accumulate, which bounds the rounding of a kernel whose result depends on order.
extern "C" __global__ void kforge_max_abs(const VALUE *x, u64 n, u64 *stats) {
    double largest = 0.0;
    for (u64 i = FIRST_THREAD; i < n; i += ALL_THREADS) {
        double v = fabs(TO_DOUBLE(x[i]));
        if (isfinite(v)) largest = fmax(largest, v);
    }
    if (largest > 0.0) atomicMax(&stats[0], (u64)__double_as_longlong(largest));
}
"""
_STORAGE = {"float16": "unsigned short", BFLOAT16: "unsigned short", "float32": "float", "float64": "double",
            "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long", "uint8": "unsigned char",
            "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long"}
_UNSIGNED = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
THREADS, MAX_BLOCKS = 256, 4096
KERNELS = ("kforge_generate", "kforge_compare", "kforge_changed_bytes", "kforge_max_abs", "kforge_evict")
COMPILERS = 4  # modules compiled at once when a GPU process starts
NONE = ~np.uint64(0)  # "no first index": what atomicMin starts from


def module_source(dtype: str) -> str:
    """SOURCE specialised for `dtype`: its storage type, same-width bits, and how a value is drawn and read."""
    defines = {"VALUE": _STORAGE[dtype], "BITS": _UNSIGNED[host_dtype(dtype).itemsize],
               "TO_DOUBLE": {"float16": "(double)half_to_float",
                             BFLOAT16: "(double)bfloat16_to_float"}.get(dtype, "(double)"),
               "GOLDEN": f"{GOLDEN:#x}ull", "SPECIAL_STRIDE": f"{SPECIAL_STRIDE}ull",
               "TWO_TO_MINUS_53": float.hex(2.0 ** -53)}
    if dtype in FLOAT_BITS:
        defines.update({"FLOAT_VALUES": "1", "PRECISION": str(FLOAT_BITS[dtype]),
                        "UNIT": float.hex(2.0 ** -FLOAT_BITS[dtype]),
                        "FROM_DOUBLE": {"float16": "double_to_half", BFLOAT16: "double_to_bfloat16",
                                        "float32": "__double2float_rn", "float64": ""}[dtype]})
    return "".join(f"#define {name} {text}\n" for name, text in defines.items()) + SOURCE


def compile_module(dtype: str, arch: str):
    """The dtype's module as a CompiledKernel (its cubin holds every kernel of KERNELS)."""
    try:
        return compile_kernel(module_source(dtype), "kforge_generate", {}, [], arch)
    except CompileError as exc:  # a kforge bug, not the user's: say so with the log
        raise RuntimeError(f"kforge's own kernels for {dtype} did not compile: {exc}\n{exc.log}") from None


@dataclass(frozen=True)
class Found:
    count: int
    first: int | None  # the first index (or byte offset) found; None when count is 0


@dataclass(frozen=True)
class Comparison:
    unwritten: Found
    not_finite: Found
    beyond_tolerance: Found
    max_abs: float
    max_rel: float


class OwnKernels:
    """kforge's kernels in one GPU process, on one session's stream. Pointers are device addresses (ints)."""

    def __init__(self, session):
        """Compiles every dtype's module now, a few at a time: the GPU process pays for it once when it starts,
        and no candidate waits for a compile of kforge's own kernels."""
        from cuda.core import ObjectCode

        self._session = session
        with ThreadPoolExecutor(COMPILERS) as threads:
            compiled = dict(zip(DTYPES, threads.map(lambda d: compile_module(d, session.info.arch), DTYPES)))
        self._modules: dict[str, dict[str, object]] = {}
        for dtype, module in compiled.items():
            code = ObjectCode.from_cubin(module.cubin)
            try:
                self._modules[dtype] = {name: code.get_kernel(name) for name in KERNELS}
            except Exception as exc:  # as a compile error: kforge's bug
                raise RuntimeError(f"kforge's own kernels for {dtype} did not load: {exc}") from None
        self._stats = session.allocate(8 * 8, keep=False)  # for the process's life: no session's release() frees it

    def generate(self, pointer: int, count: int, key: int, how: Distribution, specials: np.ndarray) -> None:
        """Fill `count` elements at `pointer` with the stream `key` drawn as `how` says (shared/adapters/inputs.draw),
        and its specials."""
        dtype = how.dtype
        table = self._session.upload(specials if specials.size else np.zeros(1, host_dtype(dtype)), keep=False)
        self._launch(dtype, "kforge_generate", count, np.uint64(pointer), np.uint64(count), np.uint64(key),
                     np.uint64(int(table.handle)), np.uint32(specials.size), np.uint64(how.low),
                     np.uint64(how.span), np.float64(how.origin), np.float64(how.scale), np.float64(how.limit),
                     np.float64(how.below), np.uint32(how.sorted))
        table.close(self._session.stream)

    def compare(self, out: int, ref: int, count: int, dtype: str, atol: float, rtol: float) -> Comparison:
        stats = self._run(np.array([0, NONE] * 3 + [0, 0], np.uint64), dtype, "kforge_compare", count,
                          np.uint64(out), np.uint64(ref), np.uint64(count), np.float64(atol), np.float64(rtol))
        found = [_found(stats[2 * k], stats[2 * k + 1]) for k in range(3)]
        return Comparison(*found, *(float(x) for x in stats[6:8].view(np.float64)))

    def changed_bytes(self, pointer: int, count: int, expected: int | None = None, value: int = 0) -> Found:
        """Bytes at `pointer` that differ from those at `expected`, or from `value` when there is none."""
        stats = self._run(np.array([0, NONE], np.uint64), "uint8", "kforge_changed_bytes", count, np.uint64(pointer),
                          np.uint64(count), np.uint64(expected or 0), np.uint32(value))
        return _found(stats[0], stats[1])

    def evict_l2(self, buffer) -> None:
        """Read `buffer` (twice the L2's bytes, 16-byte aligned as every allocation is) on the session's stream,
        leaving L2 holding its lines, all clean (kforge_evict says why not a memset)."""
        words = buffer.size // 16
        self._launch("uint8", "kforge_evict", words, np.uint64(int(buffer.handle)), np.uint64(words), np.uint32(0),
                     np.uint64(int(self._stats.handle)))

    def max_abs(self, pointer: int, count: int, dtype: str) -> float:
        """The largest finite magnitude among `count` elements at `pointer` (0 when none is finite)."""
        stats = self._run(np.zeros(1, np.uint64), dtype, "kforge_max_abs", count, np.uint64(pointer), np.uint64(count))
        return float(stats.view(np.float64)[0])

    def _run(self, stats: np.ndarray, dtype: str, name: str, count: int, *args) -> np.ndarray:
        """Launch with the stats buffer as last argument, starting from `stats`; the stats it leaves."""
        self._session.upload(stats, into=self._stats)
        self._launch(dtype, name, count, *args, np.uint64(int(self._stats.handle)))
        return self._session.download(stats, self._stats)

    def _launch(self, dtype: str, name: str, count: int, *args) -> None:
        from cuda.core import LaunchConfig, launch

        blocks = max(1, min(math.ceil(count / THREADS), MAX_BLOCKS))
        launch(self._session.stream, LaunchConfig(grid=blocks, block=THREADS), self._modules[dtype][name], *args)


def _found(count: np.uint64, first: np.uint64) -> Found:
    return Found(int(count), int(first) if count else None)
