"""Kernels of each shape the offline rules restructure, written with other names and styles than the corpus's
(early returns, block-size defines, unsigned and 64-bit indices, locals, several statements, doubles and
ints), and kernels each recogniser must refuse. Each is a complete spec, so the GPU test can verify the
rewrites too (tests/gpu/test_rules_shapes_verified.py); `sample` picks the configurations both tests try."""
import itertools
import random
from pathlib import Path

from shared.domain.spec import CandidateSpec, KernelSpec

TESTS = Path(__file__).resolve().parent.parent


def spec(source: str, name: str, args: list[dict], sizes: dict, problem_size: list, params: dict | None = None,
         tune_params: dict | None = None, **more) -> KernelSpec:
    return KernelSpec.model_validate({"kernel_name": name, "source": source, "args": args, "sizes": sizes,
                                      "problem_size": problem_size, "params": params or {"block_size_x": 256},
                                      "tune_params": tune_params or {}, "strategy": {"name": "baseline"}, **more})


def array(name: str, shape: list, dtype: str = "float32", role: str | None = None, **more) -> dict:
    return {"name": name, "dtype": dtype, "shape": shape, **({"role": role} if role else {}), **more}


def scalar(name: str, value, dtype: str = "int32") -> dict:
    return {"name": name, "dtype": dtype, "value": value}


def sample(candidate: CandidateSpec, spec: KernelSpec, count: int = 6) -> list[dict]:
    """Every configuration of the candidate's space that meets its restrictions when there are at most
    `count`, else the default, each parameter's smallest and largest values, and seeded random picks."""
    launched = spec.for_candidate(candidate)
    names = list(candidate.tune_params)
    every = [dict(zip(names, values)) for values in itertools.product(*candidate.tune_params.values())]
    valid = [c for c in every if launched.restrictions_hold({**candidate.params, **c})]
    if len(valid) <= count:
        return valid
    lowest = min(valid, key=lambda c: [candidate.tune_params[n].index(c[n]) for n in names])
    highest = max(valid, key=lambda c: [candidate.tune_params[n].index(c[n]) for n in names])
    picks = [dict(candidate.params), lowest, highest, *random.Random(21).sample(valid, count - 3)]
    return [dict(p) for p in {tuple(sorted(p.items())): p for p in picks}.values()]


BLOCK_2D = {"block_size_x": 32, "block_size_y": 8}
TUNE_2D = {"block_size_x": [32, 64], "block_size_y": [2, 4, 8]}

# tests/corpus/atomic_sum.cu: one float atomicAdd per element, the naive reduction.
ATOMIC_SUM = spec((TESTS / "corpus" / "atomic_sum.cu").read_text(), "atomic_sum",
                  [array("total", [1], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 1 << 22}, ["n"],
                  tune_params={"block_size_x": [128, 256, 512]})

SUM_OF_SQUARES = spec(r"""
// Sum of squares in double precision, each element's square added atomically; an early return guards the end.
extern "C" __global__ void sum_of_squares(double *acc, const double *data, unsigned count)
{
    const unsigned idx = threadIdx.x + blockDim.x * blockIdx.x;
    if (idx >= count) return;
    const double v = data[idx];
    atomicAdd(&acc[0], v * v);
}
""", "sum_of_squares", [array("acc", [1], "float64", "out"), array("data", ["count"], "float64"),
                        scalar("count", "count", "uint32")], {"count": 1 << 20}, ["count"])

MOMENTS = spec(r"""
/* The first two moments: sum and sum of squares, into stats[0] and stats[1]. */
extern "C" __global__ void moments(float *stats, const float *__restrict__ x, int len) {
    int gid = blockIdx.x * block_size_x + threadIdx.x;
    if (gid < len) {
        float value = x[gid];
        atomicAdd(stats, value);
        atomicAdd(stats + 1, value * value);
    }
}
""", "moments", [array("stats", [2], role="out"), array("x", ["len"]), scalar("len", "len")], {"len": 1 << 20},
               ["len"], tune_params={"block_size_x": [64, 128, 256]})

COUNT_POSITIVE = spec(r"""
// How many values are positive: a count per thread, combined per warp by xor shuffles, one atomic per warp.
extern "C" __global__ void count_positive(unsigned int *count, const float *v, int n)
{
    unsigned int mine = 0u;
    for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x)
        mine += v[k] > 0.0f ? 1u : 0u;
    for (int d = 16; d >= 1; d >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, d);
    if ((threadIdx.x & 31) == 0) atomicAdd(count, mine);
}
""", "count_positive", [array("count", [1], "uint32", "out"), array("v", ["n"]), scalar("n", "n")],
                       {"n": 1 << 20}, ["n"], grid_div_x=["block_size_x", 4])

WEIGHTED_HIST = spec(r"""
// A histogram of byte keys weighted by w, the address written as a pointer sum, the loop body one statement.
extern "C" __global__ void weighted_hist(float *counts, const unsigned char *key, const float *w, int len, int nbins)
{
    for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < len; i += gridDim.x * blockDim.x)
        atomicAdd(counts + key[i], w[i]);
}
""", "weighted_hist", [array("counts", ["nbins"], role="out"), array("key", ["len"], "uint8", range=[0, "nbins"]),
                       array("w", ["len"]), scalar("len", "len"), scalar("nbins", "nbins")],
                     {"len": 1 << 20, "nbins": 200}, ["len"], grid_div_x=["block_size_x", 8])

BUCKET_COUNTS = spec(r"""
// Integer counts per bucket, the bucket a local, the block size a define.
extern "C" __global__ void bucket_counts(int *freq, const int *values, int count, int buckets)
{
    for (int k = blockIdx.x * block_size_x + threadIdx.x; k < count; k += block_size_x * gridDim.x) {
        const int bucket = values[k] % buckets;
        atomicAdd(&freq[bucket], 1);
    }
}
""", "bucket_counts", [array("freq", ["buckets"], "int32", "out"), array("values", ["count"], "int32",
                       range=[0, 1000000]), scalar("count", "count"), scalar("buckets", "buckets")],
                     {"count": 1 << 20, "buckets": 1000}, ["count"])

TRANSPOSE_SCALED = spec(r"""
// dst = s * src^T with the block size as defines and an early return at the edges.
extern "C" __global__ void transpose_scaled(float *dst, const float *src, int w, int h, float s)
{
    const int col = blockIdx.x * block_size_x + threadIdx.x;
    const int row = blockIdx.y * block_size_y + threadIdx.y;
    if (col >= w || row >= h) return;
    dst[col * h + row] = s * src[row * w + col];
}
""", "transpose_scaled", [array("dst", ["w", "h"], role="out"), array("src", ["h", "w"]), scalar("w", "w"),
                          scalar("h", "h"), scalar("s", 1.5, "float32")], {"w": 300, "h": 200}, ["w", "h"],
                      BLOCK_2D, TUNE_2D)

TRANSPOSE_DOUBLE = spec(r"""
// A double-precision transpose through 64-bit index locals, both indices declared on one line.
extern "C" __global__ void transpose_d(double *out, const double *in, int width, int height)
{
    int x = threadIdx.x + blockIdx.x * blockDim.x, y = threadIdx.y + blockIdx.y * blockDim.y;
    if (x < width && y < height) {
        size_t from = (size_t)y * width + x;
        size_t to = (size_t)x * height + y;
        out[to] = in[from];
    }
}
""", "transpose_d", [array("out", ["width", "height"], "float64", "out"), array("in", ["height", "width"], "float64"),
                     scalar("width", "width"), scalar("height", "height")], {"width": 257, "height": 129},
                      ["width", "height"], BLOCK_2D, TUNE_2D)

SMOOTH = spec(r"""
// A relaxed 5-point smoothing step; the frame is not written.
extern "C" __global__ void smooth(float *dst, const float *src, int w, int h, float alpha)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < 1 || row < 1 || col >= w - 1 || row >= h - 1) return;
    const size_t at = (size_t)row * w + col;
    dst[at] = (1.0f - alpha) * src[at] + alpha * 0.25f * (src[at - 1] + src[at + 1] + src[at - w] + src[at + w]);
}
""", "smooth", [array("dst", ["h", "w"], role="out"), array("src", ["h", "w"]), scalar("w", "w"), scalar("h", "h"),
                scalar("alpha", 0.5, "float32")], {"w": 500, "h": 300}, ["w", "h"], BLOCK_2D, TUNE_2D)

BOX_BLUR = spec(r"""
// A 3x3 box blur with clamped edges: a window walked by two loops of its own.
extern "C" __global__ void box_blur(float *out, const float *img, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    float total = 0.0f;
    int count = 0;
    for (int dy = -1; dy <= 1; dy++) {
        for (int dx = -1; dx <= 1; dx++) {
            int yy = y + dy, xx = x + dx;
            if (yy >= 0 && yy < height && xx >= 0 && xx < width) {
                total += img[yy * width + xx];
                count++;
            }
        }
    }
    out[y * width + x] = total / count;
}
""", "box_blur", [array("out", ["height", "width"], role="out"), array("img", ["height", "width"]),
                  scalar("width", "width"), scalar("height", "height")], {"width": 400, "height": 250},
                 ["width", "height"], BLOCK_2D, TUNE_2D)

CORRELATE = spec(r"""
// A rectangular cross-correlation with a bias, rows of the image `pitch` apart, written with an early return.
extern "C" __global__ void correlate(float *__restrict__ result, const float *__restrict__ src,
                                     const float *__restrict__ taps, float bias, int rows, int cols, int pitch,
                                     int kh, int kw)
{
    const int col = blockDim.x * blockIdx.x + threadIdx.x;
    const int row = blockDim.y * blockIdx.y + threadIdx.y;
    if (col >= cols - kw + 1 || row >= rows - kh + 1) return;
    float acc = bias;
    for (int r = 0; r < kh; ++r)
        for (int c = 0; c < kw; ++c)
            acc += taps[r * kw + c] * src[(size_t)(row + r) * pitch + (col + c)];
    result[row * (cols - kw + 1) + col] = acc;
}
""", "correlate", [array("result", ["rows - kh + 1", "cols - kw + 1"], role="out"),
                   array("src", ["rows", "pitch"]), array("taps", ["kh", "kw"]),
                   {"name": "bias", "dtype": "float32", "value": 0.5}, scalar("rows", "rows"), scalar("cols", "cols"),
                   scalar("pitch", "pitch"), scalar("kh", "kh"), scalar("kw", "kw")],
                 {"rows": 300, "cols": 500, "pitch": 512, "kh": 3, "kw": 7}, ["cols - kw + 1", "rows - kh + 1"],
                 BLOCK_2D, TUNE_2D)

BOX3_INT = spec(r"""
// An integer 3x3 box sum of 8-bit-range values, scaled down after the window; a literal window size.
extern "C" __global__ void box3(int *out, const int *in, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int ow = w - 2;
    if (x < ow && y < h - 2) {
        int sum = 0;
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 3; j++) {
                sum += in[(y + i) * w + x + j];
            }
        }
        sum = (sum + 4) / 9;
        out[y * ow + x] = sum;
    }
}
""", "box3", [array("out", ["h - 2", "w - 2"], "int32", "out"), array("in", ["h", "w"], "int32", range=[0, 256]),
              scalar("w", "w"), scalar("h", "h")], {"w": 600, "h": 200}, ["w - 2", "h - 2"], BLOCK_2D, TUNE_2D)

BLUR = spec(r"""
// A weighted blur of the interior, the window centred on the point; a frame of radius r is left as it was.
extern "C" __global__ void blur(float *dst, const float *src, const float *weights, int w, int h, int r)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < r || y < r || x >= w - r || y >= h - r) return;
    float acc = 0.0f;
    for (int dy = -r; dy <= r; ++dy)
        for (int dx = -r; dx <= r; ++dx)
            acc += weights[(dy + r) * (2 * r + 1) + dx + r] * src[(y + dy) * w + x + dx];
    dst[y * w + x] = acc;
}
""", "blur", [array("dst", ["h", "w"], role="out"), array("src", ["h", "w"]),
              array("weights", ["2 * r + 1", "2 * r + 1"]), scalar("w", "w"), scalar("h", "h"), scalar("r", "r")],
            {"w": 400, "h": 300, "r": 2}, ["w", "h"], BLOCK_2D, TUNE_2D)

MATVEC = spec(r"""
// out = M v, a thread per row, with an early return and a pre-increment.
extern "C" __global__ void matvec(float *out, const float *M, const float *v, int n_rows, int n_cols)
{
    const unsigned row = blockDim.x * blockIdx.x + threadIdx.x;
    if (row >= n_rows) return;
    float acc = 0.f;
    for (int j = 0; j < n_cols; ++j) acc += M[(size_t)row * n_cols + j] * v[j];
    out[row] = acc;
}
""", "matvec", [array("out", ["n_rows"], role="out"), array("M", ["n_rows", "n_cols"]), array("v", ["n_cols"]),
                scalar("n_rows", "n_rows"), scalar("n_cols", "n_cols")], {"n_rows": 1000, "n_cols": 515},
               ["n_rows"], {"block_size_x": 128}, {"block_size_x": [64, 128]})

ROW_TOTALS = spec(r"""
// Scaled row sums in double precision, the loop body a block with a local.
extern "C" __global__ void row_totals(double *sums, const double *m, int rows, int cols, double scale)
{
    int r = blockIdx.x * block_size_x + threadIdx.x;
    if (r < rows) {
        double t = 0.0;
        for (int k = 0; k < cols; k += 1) {
            const double value = m[(size_t)r * cols + k];
            t += value;
        }
        sums[r] = t * scale;
    }
}
""", "row_totals", [array("sums", ["rows"], "float64", "out"), array("m", ["rows", "cols"], "float64"),
                    scalar("rows", "rows"), scalar("cols", "cols"), scalar("scale", 0.5, "float64")],
                   {"rows": 700, "cols": 333}, ["rows"])

BLOCK_MAX = spec(r"""
// Each block's maximum over a grid-stride share of in: a tree on a block_size_x buffer, halved by shifts.
extern "C" __global__ void block_max(float *out, const float *in, int n)
{
    __shared__ float buf[block_size_x];
    const int t = threadIdx.x;
    float m = -3.0e38f;
    for (int i = blockIdx.x * block_size_x + t; i < n; i += gridDim.x * block_size_x) m = fmaxf(m, in[i]);
    buf[t] = m;
    __syncthreads();
    for (int s = block_size_x >> 1; s > 0; s >>= 1) {
        if (t < s) {
            buf[t] = fmaxf(buf[t], buf[t + s]);
        }
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
}
""", "block_max", [array("out", ["blocks"], role="out"), array("in", ["n"]), scalar("n", "n")],
                  {"n": 100003, "blocks": 64}, ["blocks"], grid_div_x=[1],
                  tune_params={"block_size_x": [64, 128, 256]})

PARTIAL_SUMS = spec(r"""
// Integer row sums, one block per row, partial sums in dynamic shared memory, an unsigned halving index.
extern "C" __global__ void partial_sums(int *out, const int *in, int len)
{
    extern __shared__ int scratch[];
    int sum = 0;
    for (int i = threadIdx.x; i < len; i += blockDim.x) sum += in[(size_t)blockIdx.x * len + i];
    scratch[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s = s >> 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = scratch[threadIdx.x] + scratch[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = scratch[0];
}
""", "partial_sums", [array("out", ["rows"], "int32", "out"), array("in", ["rows", "len"], "int32"),
                      scalar("len", "len")], {"rows": 300, "len": 1001}, ["rows"], grid_div_x=[1],
                     smem_args={"size": "block_size_x * 4"}, tune_params={"block_size_x": [64, 128, 256]})

WEIGHTED_SUM = spec(r"""
// sum(w * v): a grid-stride accumulation, a shared-memory tree, one atomicAdd per block.
extern "C" __global__ void weighted_sum(float *result, const float *w, const float *v, int count)
{
    __shared__ float part[1024];
    float acc = 0.0f;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < count; idx += gridDim.x * blockDim.x) {
        acc += w[idx] * v[idx];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(result, part[0]);
}
""", "weighted_sum", [array("result", [1], role="out"), array("w", ["count"]), array("v", ["count"]),
                      scalar("count", "count")], {"count": 1 << 20, "blocks": 128}, ["blocks"], grid_div_x=[1],
                     tune_params={"block_size_x": [128, 256]})

AXPBY = spec(r"""
// out = a x + b y in a grid-stride loop whose body is a single statement.
extern "C" __global__ void axpby(float *out, const float *x, const float *y, float a, float b, int len)
{
    for (int k = threadIdx.x + blockIdx.x * blockDim.x; k < len; k += gridDim.x * blockDim.x)
        out[k] = a * x[k] + b * y[k];
}
""", "axpby", [array("out", ["len"], role="out"), array("x", ["len"]), array("y", ["len"]),
               scalar("a", 2.0, "float32"), scalar("b", -1.0, "float32"), scalar("len", "len")], {"len": 1 << 20},
              ["len"])

ADD_BIAS_2D = spec(r"""
// A per-row bias on a 2D grid, y first in the index expressions, an early return.
extern "C" __global__ void add_bias_2d(float *out, const float *in, const float *bias, int h, int w)
{
    const int col = threadIdx.x + blockIdx.x * blockDim.x;
    const int row = threadIdx.y + blockIdx.y * blockDim.y;
    if (row >= h || col >= w) return;
    out[row * w + col] = in[row * w + col] + bias[row];
}
""", "add_bias_2d", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), array("bias", ["h"]),
                     scalar("h", "h"), scalar("w", "w")], {"h": 333, "w": 257}, ["w", "h"], BLOCK_2D, TUNE_2D)

CLAMP_TID = spec(r"""
// A clamp whose global index is built from a local thread index, as kernels that also use tid elsewhere start.
extern "C" __global__ void clamp_tid(float *y, const float *x, float lo, float hi, int n)
{
    int tid = threadIdx.x;
    int gid = blockIdx.x * blockDim.x + tid;
    if (gid < n)
        y[gid] = fminf(fmaxf(x[gid], lo), hi);
}
""", "clamp_tid", [array("y", ["n"], role="out"), array("x", ["n"]), scalar("lo", -0.5, "float32"),
                   scalar("hi", 0.5, "float32"), scalar("n", "n")], {"n": 1 << 20}, ["n"])

SHADE_2D = spec(r"""
// An image scaled per column on a 2D grid, the indices built from locals of the launch geometry, 64-bit rows.
extern "C" __global__ void shade_2d(float *out, const float *in, const float *gain, int h, int w)
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x0 = blockIdx.x * blockDim.x;
    const int col = x0 + tx;
    const size_t row = blockIdx.y * (size_t)blockDim.y + ty;
    if (row < h && col < w)
        out[row * w + col] = in[row * w + col] * gain[col];
}
""", "shade_2d", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), array("gain", ["w"]),
                  scalar("h", "h"), scalar("w", "w")], {"h": 333, "w": 257}, ["w", "h"], BLOCK_2D, TUNE_2D)

SCALE_3D = spec(r"""
// A volume scaled in place on a 3D grid, all three indices on one line.
extern "C" __global__ void scale3d(float *v, int nx, int ny, int nz, float f)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y, k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i < nx && j < ny && k < nz) v[((size_t)k * ny + j) * nx + i] *= f;
}
""", "scale3d", [array("v", ["nz", "ny", "nx"], role="inout"), scalar("nx", "nx"), scalar("ny", "ny"),
                 scalar("nz", "nz"), scalar("f", 0.5, "float32")], {"nx": 70, "ny": 33, "nz": 17}, ["nx", "ny", "nz"],
                {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
                {"block_size_x": [32, 64], "block_size_y": [2, 4], "block_size_z": [1, 2]})

L2_NORMALISE = spec(r"""
// Each row scaled to unit length in double precision, one block per row: the sum of squares, then the scaling.
// The row is indexed from the matrix through a 64-bit base, the block width is the define.
extern "C" __global__ void l2_normalise(double *dst, const double *src, int n)
{
    __shared__ double partial[block_size_x];
    const int t = threadIdx.x;
    const size_t base = (size_t)blockIdx.x * n;
    double ss = 0.0;
    for (int i = t; i < n; i += block_size_x) {
        const double v = src[base + i];
        ss += v * v;
    }
    partial[t] = ss;
    __syncthreads();
    for (int s = block_size_x >> 1; s > 0; s >>= 1) {
        if (t < s) partial[t] += partial[t + s];
        __syncthreads();
    }
    const double inv = 1.0 / sqrt(partial[0] + 1e-12);
    for (int i = t; i < n; i += block_size_x) dst[base + i] = src[base + i] * inv;
}
""", "l2_normalise", [array("dst", ["rows", "n"], "float64", "out"), array("src", ["rows", "n"], "float64"),
                      scalar("n", "n")], {"rows": 300, "n": 1001}, ["rows"], {"block_size_x": 128},
                     {"block_size_x": [64, 128, 256]}, grid_div_x=[1])

RMS_NORM = spec(r"""
// RMS normalisation, a warp per row of a 32 x block_size_y block: the lanes' squares added by xor shuffles,
// then the scaled outputs; an early return past the last row, the stride the literal warp width.
extern "C" __global__ void rms_norm(float *out, const float *x, const float *w, int rows, int dim, float eps)
{
    const int r = blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= rows) return;
    const float *xr = x + (size_t)r * dim;
    float ss = 0.f;
    for (int j = threadIdx.x; j < dim; j += 32) ss += xr[j] * xr[j];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float scale = rsqrtf(ss / dim + eps);
    for (int j = threadIdx.x; j < dim; j += 32) out[(size_t)r * dim + j] = xr[j] * scale * w[j];
}
""", "rms_norm", [array("out", ["rows", "dim"], role="out"), array("x", ["rows", "dim"]), array("w", ["dim"]),
                  scalar("rows", "rows"), scalar("dim", "dim"), scalar("eps", 1e-5, "float32")],
                 {"rows": 1000, "dim": 1024}, ["rows"], {"block_size_x": 32, "block_size_y": 4},
                 {"block_size_x": [32], "block_size_y": [1, 2, 4, 8, 16]}, grid_div_x=["block_size_y"])

ROW_CUMSUM = spec(r"""
// Running sums along each row in float, one block per row walking it in chunks of block_size_x: a Hillis-Steele
// scan of each chunk (the read under an if, an unsigned offset shifted), then the chunk's total carried on.
extern "C" __global__ void row_cumsum(float *dst, const float *src, int cols)
{
    __shared__ float part[block_size_x];
    const int tid = threadIdx.x;
    const float *row = src + (size_t)blockIdx.x * cols;
    float running = 0.0f;
    for (int start = 0; start < cols; start += block_size_x) {
        part[tid] = start + tid < cols ? row[start + tid] : 0.0f;
        __syncthreads();
        for (unsigned int stride = 1; stride < block_size_x; stride <<= 1) {
            float t = 0.0f;
            if (tid >= stride) t = part[tid - stride];
            __syncthreads();
            part[tid] = part[tid] + t;
            __syncthreads();
        }
        if (start + tid < cols) dst[(size_t)blockIdx.x * cols + start + tid] = running + part[tid];
        running += part[block_size_x - 1];
        __syncthreads();
    }
}
""", "row_cumsum", [array("dst", ["rows", "cols"], role="out"), array("src", ["rows", "cols"]),
                    scalar("cols", "cols")], {"rows": 300, "cols": 1000}, ["rows"], grid_div_x=[1],
                   tune_params={"block_size_x": [64, 128, 256, 512, 1024]})

BLOCK_SCAN = spec(r"""
// The first pass of a long scan: each block's inclusive prefix sums of its blockDim.x unsigned elements, and its
// total for the next pass. Dynamic shared memory; the read and the add each under an if, the offset d doubled.
extern "C" __global__ void block_scan(unsigned int *out, unsigned int *block_totals, const unsigned int *in, int n)
{
    extern __shared__ unsigned int sums[];
    const unsigned int lid = threadIdx.x;
    const int gid = blockIdx.x * blockDim.x + lid;
    sums[lid] = gid < n ? in[gid] : 0u;
    __syncthreads();
    for (int d = 1; blockDim.x > d; d = d * 2) {
        unsigned int prev;
        if (d <= lid) {
            prev = sums[lid - d];
        }
        __syncthreads();
        if (lid >= d) sums[lid] += prev;
        __syncthreads();
    }
    if (gid < n) out[gid] = sums[lid];
    if (lid == blockDim.x - 1) block_totals[blockIdx.x] = sums[lid];
}
""", "block_scan", [array("out", ["n"], "uint32", "out"), array("block_totals", ["n"], "uint32", "out"),
                    array("in", ["n"], "uint32"), scalar("n", "n")], {"n": 100003}, ["n"],
                   smem_args={"size": "block_size_x * 4"}, tune_params={"block_size_x": [64, 128, 256]})

GRID_STRIDE_ADD = spec(r"""
// y = x + y as NVIDIA's grid-stride blog post writes it: the first index and the stride as locals before the loop.
extern "C" __global__ void add(int n, const float *x, float *y)
{
    int index = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = blockDim.x * gridDim.x;
    for (int i = index; i < n; i += stride)
        y[i] = x[i] + y[i];
}
""", "add", [scalar("n", "n"), array("x", ["n"]), array("y", ["n"], role="inout")], {"n": 1 << 20}, ["n"])

# The same launched on a fixed grid of 8 elements per thread: not one thread per point, so its loop is widened.
GRID_STRIDE_ADD_FIXED = GRID_STRIDE_ADD.model_validate({**GRID_STRIDE_ADD.model_dump(),
                                                        "grid_div_x": ["block_size_x", 8]})
# That, reading x through the read-only cache: the widened loop reads x from its vector's lanes.
GRID_STRIDE_ADD_LDG = GRID_STRIDE_ADD_FIXED.model_validate({
    **GRID_STRIDE_ADD_FIXED.model_dump(),
    "source": GRID_STRIDE_ADD_FIXED.source.replace("y[i] = x[i] + y[i];", "y[i] = __ldg(&x[i]) + y[i];")})

DAXPY = spec(r"""
// y += a x in double precision over 64-bit indices, the cast on the block size, a grid-stride loop.
extern "C" __global__ void daxpy(size_t n, double a, const double *x, double *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        y[i] += a * x[i];
}
""", "daxpy", [scalar("n", "n", "uint64"), scalar("a", 0.5, "float64"), array("x", ["n"], "float64"),
               array("y", ["n"], "float64", "inout")], {"n": 1 << 20}, ["n"])

SIGMOID = spec(r"""
// The logistic function with the fast exponential, an unsigned index and bound, a local in braces.
extern "C" __global__ void sigmoid(float *out, const float *in, unsigned int n)
{
    unsigned int idx = blockDim.x * blockIdx.x + threadIdx.x;
    if (idx < n) {
        float v = in[idx];
        out[idx] = 1.0f / (1.0f + __expf(-v));
    }
}
""", "sigmoid", [array("out", ["n"], role="out"), array("in", ["n"]), scalar("n", "n", "uint32")], {"n": 1 << 20},
                ["n"])

POLAR = spec(r"""
// Polar to Cartesian coordinates: two outputs per element, sine and cosine from one sincosf.
extern "C" __global__ void polar(float *re, float *im, const float *r, const float *theta, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s, c;
        sincosf(theta[i], &s, &c);
        re[i] = r[i] * c;
        im[i] = r[i] * s;
    }
}
""", "polar", [array("re", ["n"], role="out"), array("im", ["n"], role="out"), array("r", ["n"]), array("theta", ["n"]),
               scalar("n", "n")], {"n": 1 << 20}, ["n"])

COUNT_ABOVE = spec(r"""
// How many values exceed a threshold: the test joins the bound check, one integer atomic per counted element.
extern "C" __global__ void count_above(int *count, const float *v, float thresh, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && v[i] > thresh) atomicAdd(&count[0], 1);
}
""", "count_above", [array("count", [1], "int32", "out"), array("v", ["n"]), scalar("thresh", 0.5, "float32"),
                     scalar("n", "n")], {"n": 1 << 20}, ["n"])

L1_DISTANCE = spec(r"""
// The L1 distance of two vectors in double precision, one atomic per element into the result.
extern "C" __global__ void l1_distance(double *result, const double *x, const double *y, int n)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) atomicAdd(result, fabs(x[i] - y[i]));
}
""", "l1_distance", [array("result", [1], "float64", "out"), array("x", ["n"], "float64"),
                     array("y", ["n"], "float64"), scalar("n", "n")], {"n": 1 << 20}, ["n"])

SUM_BY_WARPS = spec(r"""
// A sum by warps: a grid-stride share per thread, __shfl_down_sync from warpSize / 2 under an unroll pragma and a
// mask define, then the lane computed into a local and one atomic per warp.
#define FULL_MASK 0xffffffff
extern "C" __global__ void sum_by_warps(float *out, const float *in, int n)
{
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += in[i];
    #pragma unroll
    for (int offset = warpSize / 2; offset > 0; offset >>= 1)
        sum += __shfl_down_sync(FULL_MASK, sum, offset);
    int lane = threadIdx.x % warpSize;
    if (lane == 0) atomicAdd(&out[0], sum);
}
""", "sum_by_warps", [array("out", [1], role="out"), array("in", ["n"]), scalar("n", "n")], {"n": 1 << 20}, ["n"],
                     grid_div_x=["block_size_x", 8])

TRANSPOSE_INT = spec(r"""
// An integer transpose, rows from blockIdx.y first, an early return, the load through __ldg, restrict given.
extern "C" __global__ void transpose_i(int *__restrict__ out, const int *__restrict__ in, int rows, int cols)
{
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows || c >= cols) return;
    out[c * rows + r] = __ldg(&in[r * cols + c]);
}
""", "transpose_i", [array("out", ["cols", "rows"], "int32", "out"), array("in", ["rows", "cols"], "int32"),
                     scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 200, "cols": 300}, ["cols", "rows"],
                      BLOCK_2D, TUNE_2D)

LAPLACE_3D_DOUBLE = spec(r"""
// A scaled 7-point Laplacian in double precision: the frame tested with == 0, the strides as long locals.
extern "C" __global__ void lap3(double *__restrict__ out, const double *__restrict__ in, int nx, int ny, int nz,
                                double h2inv)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i == 0 || j == 0 || k == 0 || i >= nx - 1 || j >= ny - 1 || k >= nz - 1) return;
    const long idx = ((long)k * ny + j) * nx + i;
    const long sx = 1, sy = nx, sz = (long)nx * ny;
    out[idx] = h2inv * (in[idx - sx] + in[idx + sx] + in[idx - sy] + in[idx + sy] + in[idx - sz] + in[idx + sz]
                        - 6.0 * in[idx]);
}
""", "lap3", [array("out", ["nz", "ny", "nx"], "float64", "out"), array("in", ["nz", "ny", "nx"], "float64"),
              scalar("nx", "nx"), scalar("ny", "ny"), scalar("nz", "nz"), scalar("h2inv", 1.0, "float64")],
                         {"nx": 64, "ny": 33, "nz": 20}, ["nx", "ny", "nz"],
                         {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
                         {"block_size_x": [32, 64], "block_size_y": [2, 4], "block_size_z": [1, 2]})

MEAN9 = spec(r"""
// A 3x3 mean in double precision, the neighbours walked by two loops around the point's offset c.
extern "C" __global__ void mean9(double *out, const double *in, const int nx, const int ny)
{
    const int x = threadIdx.x + blockIdx.x * blockDim.x;
    const int y = threadIdx.y + blockIdx.y * blockDim.y;
    if (x >= 1 && x < nx - 1 && y >= 1 && y < ny - 1) {
        const int c = y * nx + x;
        double s = 0.0;
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx)
                s += in[c + dy * nx + dx];
        out[c] = s / 9.0;
    }
}
""", "mean9", [array("out", ["ny", "nx"], "float64", "out"), array("in", ["ny", "nx"], "float64"),
               scalar("nx", "nx"), scalar("ny", "ny")], {"nx": 300, "ny": 200}, ["nx", "ny"], BLOCK_2D, TUNE_2D)

CONV5 = spec(r"""
// A 5x5 convolution whose size is a define, fmaf accumulation, unroll pragmas and an early return.
#define K 5
extern "C" __global__ void conv5(float *out, const float *in, const float *w, int W, int H)
{
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox >= W - K + 1 || oy >= H - K + 1) return;
    float acc = 0.0f;
    #pragma unroll
    for (int ky = 0; ky < K; ++ky) {
        #pragma unroll
        for (int kx = 0; kx < K; ++kx) {
            acc = fmaf(w[ky * K + kx], in[(oy + ky) * W + (ox + kx)], acc);
        }
    }
    out[oy * (W - K + 1) + ox] = acc;
}
""", "conv5", [array("out", ["H - 4", "W - 4"], role="out"), array("in", ["H", "W"]), array("w", [5, 5]),
               scalar("W", "W"), scalar("H", "H")], {"W": 400, "H": 300}, ["W - 4", "H - 4"], BLOCK_2D, TUNE_2D)

ROW_MEAN = spec(r"""
// Row means in double precision: the matrix first among the parameters, an early return, an integer zero.
extern "C" __global__ void row_mean(const double *data, double *mean, int nrows, int ncols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= nrows) return;
    double s = 0;
    for (int c = 0; c < ncols; c++) {
        s += data[r * ncols + c];
    }
    mean[r] = s / ncols;
}
""", "row_mean", [array("data", ["nrows", "ncols"], "float64"), array("mean", ["nrows"], "float64", "out"),
                  scalar("nrows", "nrows"), scalar("ncols", "ncols")], {"nrows": 700, "ncols": 333}, ["nrows"])

SOFTMAX_WARP = spec(r"""
// Softmax with a warp per row: the lane is threadIdx.x, xor shuffles halving by division, the fast exponential,
// and -INFINITY with no include, as nvcc's implicit <math.h> allows.
extern "C" __global__ void softmax_warp(float *out, const float *in, int rows, int cols)
{
    int row = blockIdx.x * blockDim.y + threadIdx.y;
    int lane = threadIdx.x;
    if (row >= rows) return;
    const float *x = in + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) m = fmaxf(m, x[c]);
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += __expf(x[c] - m);
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffff, s, off);
    float inv = 1.0f / s;
    for (int c = lane; c < cols; c += 32) out[(size_t)row * cols + c] = __expf(x[c] - m) * inv;
}
""", "softmax_warp", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]),
                      scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 1000, "cols": 1000}, ["rows"],
                     {"block_size_x": 32, "block_size_y": 4}, {"block_size_x": [32], "block_size_y": [1, 2, 4, 8]},
                     grid_div_x=["block_size_y"])

LAYERNORM_WHILE = spec(r"""
// Layer normalisation, one block per row, each block sum a while loop halving a local in dynamic shared memory.
extern "C" __global__ void ln(float *y, const float *x, const float *g, const float *b, int n, float eps)
{
    extern __shared__ float sh[];
    const int tid = threadIdx.x;
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) s += xr[i];
    sh[tid] = s;
    __syncthreads();
    int half = blockDim.x / 2;
    while (half > 0) {
        if (tid < half) sh[tid] += sh[tid + half];
        __syncthreads();
        half >>= 1;
    }
    const float mean = sh[0] / n;
    __syncthreads();
    float v = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) { float d = xr[i] - mean; v += d * d; }
    sh[tid] = v;
    __syncthreads();
    half = blockDim.x / 2;
    while (half > 0) {
        if (tid < half) sh[tid] += sh[tid + half];
        __syncthreads();
        half >>= 1;
    }
    const float inv = rsqrtf(sh[0] / n + eps);
    for (int i = tid; i < n; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * g[i] + b[i];
}
""", "ln", [array("y", ["rows", "n"], role="out"), array("x", ["rows", "n"]), array("g", ["n"]), array("b", ["n"]),
            scalar("n", "n"), scalar("eps", 1e-5, "float32")], {"rows": 300, "n": 1000}, ["rows"], grid_div_x=[1],
                      smem_args={"size": "block_size_x * 4"}, tune_params={"block_size_x": [64, 128, 256]})

ROW_MAX = spec(r"""
// Row maxima, one block per row, the tree's barrier first in each step and its loop running while stride >= 1,
// starting from -FLT_MAX of <cfloat>.
#include <cfloat>

extern "C" __global__ void row_max(float *out, const float *in, int cols)
{
    __shared__ float cache[256];
    int tid = threadIdx.x;
    float best = -FLT_MAX;
    for (int j = tid; j < cols; j += blockDim.x)
        best = max(best, in[blockIdx.x * cols + j]);
    cache[tid] = best;
    for (int stride = blockDim.x >> 1; stride >= 1; stride >>= 1) {
        __syncthreads();
        if (tid < stride)
            cache[tid] = max(cache[tid], cache[tid + stride]);
    }
    if (tid == 0) out[blockIdx.x] = cache[0];
}
""", "row_max", [array("out", ["rows"], role="out"), array("in", ["rows", "cols"]), scalar("cols", "cols")],
                {"rows": 300, "cols": 1000}, ["rows"], tune_params={"block_size_x": [64, 128, 256]}, grid_div_x=[1])

# NVIDIA's first reduction: interleaved addressing (tid % (2 * s)), a tree doubling its stride.
REDUCE_INTERLEAVED = spec(r"""
extern "C" __global__ void reduce0(int *g_odata, const int *g_idata, unsigned int n)
{
    extern __shared__ int sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? g_idata[i] : 0;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}
""", "reduce0", [array("g_odata", ["n"], "int32", "out"), array("g_idata", ["n"], "int32"), scalar("n", "n", "uint32")],
                          {"n": 100003}, ["n"], smem_args={"size": "block_size_x * 4"},
                          tune_params={"block_size_x": [64, 128, 256]})

# NVIDIA's fifth: the halving stops at 32 and the last warp goes on through a volatile pointer, without barriers.
REDUCE_LAST_WARP = spec(r"""
__device__ void warpReduce(volatile float *sdata, unsigned int tid)
{
    sdata[tid] += sdata[tid + 32];
    sdata[tid] += sdata[tid + 16];
    sdata[tid] += sdata[tid + 8];
    sdata[tid] += sdata[tid + 4];
    sdata[tid] += sdata[tid + 2];
    sdata[tid] += sdata[tid + 1];
}
extern "C" __global__ void reduce4(float *g_odata, const float *g_idata, unsigned int n)
{
    __shared__ float sdata[256];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? g_idata[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) warpReduce(sdata, tid);
    if (tid == 0) g_odata[blockIdx.x] = sdata[0];
}
""", "reduce4", [array("g_odata", ["n"], role="out"), array("g_idata", ["n"]), scalar("n", "n", "uint32")],
                        {"n": 100003}, ["n"], tune_params={"block_size_x": [128, 256]})

GEMV_FMAF = spec(r"""
// y = A x with the products fused by hand: one fmaf per element into the row's sum, the loop body one statement.
extern "C" __global__ void gemv_fmaf(float *y, const float *A, const float *x, int rows, int cols)
{
    int r = blockIdx.x * block_size_x + threadIdx.x;
    if (r < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; c++)
            acc = fmaf(A[(size_t)r * cols + c], x[c], acc);
        y[r] = acc;
    }
}
""", "gemv_fmaf", [array("y", ["rows"], role="out"), array("A", ["rows", "cols"]), array("x", ["cols"]),
                   scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 1000, "cols": 515}, ["rows"],
                  {"block_size_x": 128}, {"block_size_x": [64, 128]})

WEIGHTED_ROWS = spec(r"""
// Weighted row sums in double precision, the sum written out as `s = s + ...` and the product's weight first.
extern "C" __global__ void weighted_rows(double *out, const double *m, const double *w, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    double s = 0.0;
    for (int k = 0; k < cols; ++k) {
        s = s + w[k] * m[(size_t)r * cols + k];
    }
    out[r] = s;
}
""", "weighted_rows", [array("out", ["rows"], "float64", "out"), array("m", ["rows", "cols"], "float64"),
                       array("w", ["cols"], "float64"), scalar("rows", "rows"), scalar("cols", "cols")],
                      {"rows": 700, "cols": 333}, ["rows"])

SAXPY_LDG = spec(r"""
// y = a x + y with both inputs read through the read-only cache, as &x[i] and as y + i.
extern "C" __global__ void saxpy_ldg(float *y, const float *__restrict__ x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * __ldg(&x[i]) + __ldg(y + i);
}
""", "saxpy_ldg", [array("y", ["n"], role="inout"), array("x", ["n"]), scalar("a", 2.0, "float32"),
                   scalar("n", "n")], {"n": 1 << 20}, ["n"], tune_params={"block_size_x": [128, 256]})

SCALE_WHILE = spec(r"""
// out = s * in in a grid-stride while loop: the index and the stride locals, the index stepped last.
extern "C" __global__ void scale_while(float *out, const float *in, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = blockDim.x * gridDim.x;
    while (i < n) {
        out[i] = s * in[i];
        i += stride;
    }
}
""", "scale_while", [array("out", ["n"], role="out"), array("in", ["n"]), scalar("s", 2.0, "float32"),
                     scalar("n", "n")], {"n": 1 << 20}, ["n"], tune_params={"block_size_x": [128, 256]})

EXTREMES_U64 = spec(r"""
// The smallest and largest 64-bit key, and how many keys there are: atomicMin, atomicMax and atomicAdd.
extern "C" __global__ void key_range(unsigned long long *range, unsigned int *count,
                                     const unsigned long long *keys, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned long long key = keys[i];
    atomicMin(&range[0], key);
    atomicMax(&range[1], key);
    atomicAdd(count, 1u);
}
""", "key_range", [array("range", [2], "uint64", "inout", range=[1 << 40, (1 << 40) + 1]),
                   array("count", [1], "uint32", "out"), array("keys", ["n"], "uint64", range=[0, 1 << 41]),
                   scalar("n", "n")], {"n": 1 << 20}, ["n"], tune_params={"block_size_x": [128, 256]})


ROW_RESCALE = spec(r"""
// Each row rescaled to [0, 1], a thread per row: the row's extremes kept by comparisons, then the outputs.
extern "C" __global__ void row_rescale(float *out, const float *in, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float lo = in[(size_t)r * cols], hi = lo;
    for (int c = 1; c < cols; c++) {
        float v = in[(size_t)r * cols + c];
        if (v < lo) lo = v;
        if (v > hi) { hi = v; }
    }
    const float span = hi > lo ? hi - lo : 1.0f;
    for (int c = 0; c < cols; c++)
        out[(size_t)r * cols + c] = (in[(size_t)r * cols + c] - lo) / span;
}
""", "row_rescale", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]), scalar("rows", "rows"),
                     scalar("cols", "cols")], {"rows": 700, "cols": 333}, ["rows"])

ROW_NORMALISE_IN_PLACE = spec(r"""
// Each row scaled in place to unit length, a thread per row: the sum of squares starts at eps (not zero), the
// integer count of non-zeros goes up by ++, and the row is read back where it is written.
extern "C" __global__ void normalise_rows(double *x, int *nonzeros, int rows, int cols, double eps)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        double ss = eps;
        int count = 0;
        for (int c = 0; c < cols; ++c) {
            const double v = x[r * cols + c];
            ss += v * v;
            if (v != 0.0) count++;
        }
        const double inv = rsqrt(ss);
        for (int c = 0; c < cols; ++c)
            x[r * cols + c] *= inv;
        nonzeros[r] = count;
    }
}
""", "normalise_rows", [array("x", ["rows", "cols"], "float64", "inout"), array("nonzeros", ["rows"], "int32", "out"),
                        scalar("rows", "rows"), scalar("cols", "cols"), scalar("eps", 1e-12, "float64")],
                       {"rows": 600, "cols": 257}, ["rows"], tune_params={"block_size_x": [64, 128]})


# case -> (rule, spec): each must be recognised; at least two per shape.
CAUSAL_MASK = spec(r"""
// Scores above the diagonal masked (causal attention), in place, by 2D grid-stride loops: any grid covers them.
extern "C" __global__ void causal_mask(float *scores, int n, float fill)
{
    for (int q = blockIdx.y * blockDim.y + threadIdx.y; q < n; q += blockDim.y * gridDim.y) {
        for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += blockDim.x * gridDim.x) {
            if (k > q) scores[(size_t)q * n + k] = fill;
        }
    }
}
""", "causal_mask", [array("scores", ["n", "n"], role="inout"), scalar("n", "n"), scalar("fill", -1.0e4, "float32")],
    {"n": 300}, ["n", "n"], BLOCK_2D, TUNE_2D, grid_div_y=["block_size_y", 4])

TRANSPOSE_GRID_STRIDE = spec(r"""
// A double transpose by 2D grid-stride loops, the column loop outermost, 64-bit indices and bounds.
extern "C" __global__ void transpose_gs(double *out, const double *in, size_t rows, size_t cols)
{
    for (size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c < cols; c += (size_t)blockDim.x * gridDim.x)
        for (size_t r = blockIdx.y * (size_t)blockDim.y + threadIdx.y; r < rows; r += (size_t)gridDim.y * blockDim.y)
            out[c * rows + r] = in[r * cols + c];
}
""", "transpose_gs", [array("out", ["cols", "rows"], "float64", "out"), array("in", ["rows", "cols"], "float64"),
                      scalar("rows", "rows", "uint64"), scalar("cols", "cols", "uint64")], {"rows": 130, "cols": 270},
    ["cols", "rows"], BLOCK_2D, TUNE_2D, grid_div_x=["block_size_x", 2], grid_div_y=["block_size_y", 2])

ROW_SUMS_GRID_STRIDE = spec(r"""
// Row sums, one row per thread, the rows walked by a grid-stride loop of a fixed grid.
extern "C" __global__ void row_sums_gs(const float *a, float *sums, int rows, int cols)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {
        float s = 0.0f;
        for (int c = 0; c < cols; ++c)
            s += a[(size_t)r * cols + c];
        sums[r] = s;
    }
}
""", "row_sums_gs", [array("a", ["rows", "cols"]), array("sums", ["rows"], role="out"), scalar("rows", "rows"),
                     scalar("cols", "cols")], {"rows": 333, "cols": 200}, ["rows"], {"block_size_x": 128},
    {"block_size_x": [64, 128]}, grid_div_x=["block_size_x", 8])

SCALE_3D_GRID_STRIDE = spec(r"""
// A volume scaled in place by three nested grid-stride loops, z outermost.
extern "C" __global__ void scale_vol(float *v, float s, int nx, int ny, int nz)
{
    for (int z = blockIdx.z * blockDim.z + threadIdx.z; z < nz; z += blockDim.z * gridDim.z)
        for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < ny; y += blockDim.y * gridDim.y)
            for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < nx; x += blockDim.x * gridDim.x)
                v[((size_t)z * ny + y) * nx + x] *= s;
}
""", "scale_vol", [array("v", ["nz", "ny", "nx"], role="inout"), scalar("s", 0.5, "float32"), scalar("nx", "nx"),
                   scalar("ny", "ny"), scalar("nz", "nz")], {"nx": 70, "ny": 33, "nz": 17}, ["nx", "ny", "nz"],
    {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
    {"block_size_x": [32, 64], "block_size_y": [2, 4], "block_size_z": [1, 2]}, grid_div_z=["block_size_z", 4])

GEMV_LDG = spec(r"""
// y = A x, a thread per row, the matrix and vector read by pointer arithmetic through __ldg, the loop unrolled.
extern "C" __global__ void gemv_ldg(float *__restrict__ y, const float *__restrict__ A, const float *__restrict__ x,
                                    int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    float acc = 0.0f;
    #pragma unroll 4
    for (int k = 0; k < cols; ++k)
        acc += __ldg(A + (size_t)row * cols + k) * __ldg(x + k);
    y[row] = acc;
}
""", "gemv_ldg", [array("y", ["rows"], role="out"), array("A", ["rows", "cols"]), array("x", ["cols"]),
                  scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 777, "cols": 301}, ["rows"],
                 {"block_size_x": 128}, {"block_size_x": [64, 128, 256]})

POSITIVES_PER_ROW = spec(r"""
// How many entries of each row are positive, an int count per row, entries reached by dereferencing.
extern "C" __global__ void positives_per_row(int *counts, const float *m, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        int count = 0;
        for (int c = 0; c < cols; c++)
            count += (*(m + (size_t)r * cols + c) > 0.0f);
        counts[r] = count;
    }
}
""", "positives_per_row", [array("counts", ["rows"], "int32", "out"), array("m", ["rows", "cols"], range=[-1, 1]),
                           scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 500, "cols": 257}, ["rows"])

# A permute to channels-last written over the flat index, its coordinates recovered through a quotient local.
TO_CHANNELS_LAST = spec(r"""
extern "C" __global__ void to_channels_last(float *dst, const float *src, int batch, int channels, int height,
                                            int width)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int plane = height * width;
    if (t >= batch * channels * plane) return;
    const int p = t % plane;
    const int rest = t / plane;
    const int c = rest % channels;
    const int b = rest / channels;
    dst[((size_t)b * plane + p) * channels + c] = src[t];
}
""", "to_channels_last", [array("dst", ["b", "h", "w", "c"], role="out"), array("src", ["b", "c", "h", "w"]),
                          scalar("batch", "b"), scalar("channels", "c"), scalar("height", "h"), scalar("width", "w")],
    {"b": 3, "c": 67, "h": 33, "w": 29}, ["b * c * h * w"], tune_params={"block_size_x": [128, 256]})

# Channels-last to channels-first, PyTorch's way: a 64-bit flat index split by a running quotient.
TO_CHANNELS_FIRST = spec(r"""
extern "C" __global__ void to_channels_first(float *dst, const float *src, long long total, int C, int H, int W)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    long long t = i;
    const int c = t % C; t /= C;
    const int x = t % W; t /= W;
    const int y = t % H; t /= H;
    const int n = t;
    dst[((n * C + c) * H + y) * W + x] = src[i];
}
""", "to_channels_first", [array("dst", ["n", "c", "h", "w"], role="out"), array("src", ["n", "h", "w", "c"]),
                           scalar("total", "n * c * h * w", "int64"), scalar("C", "c"), scalar("H", "h"),
                           scalar("W", "w")], {"n": 2, "c": 48, "h": 13, "w": 21}, ["n * c * h * w"],
    tune_params={"block_size_x": [128, 256]})

# Each image's rows and columns swapped, the batch and channel coordinates apart: the top two fuse.
SWAP_ROWS_COLUMNS = spec(r"""
extern "C" __global__ void swap_hw(float *out, const float *in, int N, int C, int H, int W)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C * H * W) return;
    int w = idx % W;
    int h = (idx / W) % H;
    int c = (idx / (W * H)) % C;
    int n = idx / (W * H * C);
    out[((n * C + c) * W + w) * H + h] = in[idx];
}
""", "swap_hw", [array("out", ["N", "C", "W", "H"], role="out"), array("in", ["N", "C", "H", "W"]),
                 *(scalar(name, name) for name in "NCHW")], {"N": 2, "C": 3, "H": 40, "W": 48}, ["N * C * H * W"])

# A batch of matrices transposed by a grid-stride loop over the flat index, on a grid a quarter of the elements.
PERMUTE_GRID_STRIDE = spec(r"""
extern "C" __global__ void permute_gs(double *out, const double *in, int N, int C, int HW)
{
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < N * C * HW; idx += blockDim.x * gridDim.x) {
        int p = idx % HW;
        int c = (idx / HW) % C;
        int n = idx / (HW * C);
        out[((size_t)n * HW + p) * C + c] = in[idx];
    }
}
""", "permute_gs", [array("out", ["N", "HW", "C"], "float64", "out"), array("in", ["N", "C", "HW"], "float64"),
                    scalar("N", "N"), scalar("C", "C"), scalar("HW", "HW")], {"N": 3, "C": 35, "HW": 1001},
    ["N * C * HW"], grid_div_x=["block_size_x", "4"])

# An image scaled beside a tally a helper bumps through a reference: the tally is no plain store, left as written.
SCALE_AND_TALLY = spec(r"""
__device__ void bump(float &v, float by) { v += by; }
extern "C" __global__ void scale_and_tally(float *out, const float *in, float *tally, int h, int w)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) {
        out[y * w + x] = 2.0f * in[y * w + x];
        bump(tally[y * w + x], 1.0f);
    }
}
""", "scale_and_tally", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]),
                         array("tally", ["h", "w"], role="inout"), scalar("h", "h"), scalar("w", "w")],
    {"h": 37, "w": 203}, ["w", "h"], params={"block_size_x": 32, "block_size_y": 4},
    tune_params={"block_size_x": [32, 64], "block_size_y": [2, 4]})

# Planar to interleaved for a multi-channel image, one grid layer per channel: a transpose across x and z.
PLANAR_TO_PACKED = spec(r"""
extern "C" __global__ void pack_channels(float *packed, const float *planes, unsigned width, unsigned height,
                                         unsigned channels, float gain)
{
    unsigned px = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned py = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned ch = blockIdx.z;
    if (px >= width || py >= height || ch >= channels) return;
    packed[((size_t)py * width + px) * channels + ch] = gain * planes[((size_t)ch * height + py) * width + px];
}
""", "pack_channels", [array("packed", ["h", "w", "c"], role="out"), array("planes", ["c", "h", "w"]),
                       scalar("width", "w", "uint32"), scalar("height", "h", "uint32"),
                       scalar("channels", "c", "uint32"), scalar("gain", 1.5, "float32")],
    {"w": 173, "h": 61, "c": 37}, ["w", "h", "c"], params={"block_size_x": 32, "block_size_y": 4},
    tune_params={"block_size_x": [32, 64], "block_size_y": [2, 4]})

# A 5-point diffusion step over the flat index of a 2D grid, its borders copied.
FLAT_DIFFUSION = spec(r"""
extern "C" __global__ void diffuse(float *out, const float *in, int nx, int ny, float k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nx * ny) {
        int x = i % nx, y = i / nx;
        if (x > 0 && x < nx - 1 && y > 0 && y < ny - 1)
            out[i] = in[i] + k * (in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] - 4.0f * in[i]);
        else
            out[i] = in[i];
    }
}
""", "diffuse", [array("out", ["ny", "nx"], role="out"), array("in", ["ny", "nx"]), scalar("nx", "nx"),
                 scalar("ny", "ny"), scalar("k", 0.2, "float32")], {"nx": 301, "ny": 203}, ["nx * ny"],
    tune_params={"block_size_x": [128, 256]})

TRANSPOSE_GATHERED = spec(r"""
// A transpose written from the output's side: each thread writes its own element, reading it across the input.
extern "C" __global__ void transpose_gather(float *__restrict__ odata, const float *__restrict__ idata,
                                           int width, int height)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;  // a column of the output
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < height && y < width)
        odata[y * height + x] = 2.0f * idata[x * width + y];
}
""", "transpose_gather", [array("odata", ["width", "height"], role="out"), array("idata", ["height", "width"]),
                          scalar("width", "width"), scalar("height", "height")], {"width": 300, "height": 170},
    ["height", "width"], BLOCK_2D, TUNE_2D)

SPMV_BOUNDS = spec(r"""
// Scalar CSR SpMV with the row's extent read into locals first, the product accumulated in double.
extern "C" __global__ void spmv_bounds(float *y, const int *row_ptr, const int *col_idx, const float *vals,
                                       const float *x, int rows)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int begin = row_ptr[row], end = row_ptr[row + 1];
    double dot = 0.0;
    for (int k = begin; k < end; ++k)
        dot += (double)vals[k] * x[col_idx[k]];
    y[row] = (float)dot;
}
""", "spmv_bounds", [array("y", ["rows"], role="out"),
                     array("row_ptr", ["rows + 1"], "int32", range=[0, "nnz + 1"], sorted=True),
                     array("col_idx", ["nnz"], "int32", range=[0, "cols"]), array("vals", ["nnz"]),
                     array("x", ["cols"]), scalar("rows", "rows")], {"rows": 3001, "cols": 2000, "nnz": 48000},
    ["rows"], {"block_size_x": 128}, {"block_size_x": [64, 128]})

THRESHOLD_U8 = spec(r"""
// 8-bit pixels scaled by a float gain per pixel and clamped, the rows' width no multiple of 16.
extern "C" __global__ void threshold_u8(unsigned char *out, const unsigned char *in, const float *gain, int w, int h)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const int i = y * w + x;
    const float scaled = in[i] * gain[i];
    out[i] = (unsigned char)min(255, (int)scaled);
}
""", "threshold_u8", [array("out", ["h", "w"], "uint8", "inout"), array("in", ["h", "w"], "uint8", range=[0, 8]),
                      array("gain", ["h", "w"], range=[0, 40]), scalar("w", "w"), scalar("h", "h")],
    {"w": 408, "h": 37}, ["w", "h"], BLOCK_2D, TUNE_2D)

VARIANTS = {
    "sum_of_squares": ("hierarchical_reduction", SUM_OF_SQUARES),
    "moments": ("hierarchical_reduction", MOMENTS),
    "count_positive": ("hierarchical_reduction", COUNT_POSITIVE),
    "weighted_hist": ("hierarchical_reduction", WEIGHTED_HIST),
    "bucket_counts": ("hierarchical_reduction", BUCKET_COUNTS),
    "transpose_scaled": ("shared_tile", TRANSPOSE_SCALED),
    "transpose_double": ("shared_tile", TRANSPOSE_DOUBLE),
    "smooth": ("register_blocking", SMOOTH),
    "box_blur": ("register_window", BOX_BLUR),
    "correlate": ("register_window", CORRELATE),
    "box3_int": ("register_window", BOX3_INT),
    "blur": ("register_window", BLUR),
    "matvec": ("warp_per_row", MATVEC),
    "row_totals": ("warp_per_row", ROW_TOTALS),
    "block_max": ("shuffle_reduction", BLOCK_MAX),
    "partial_sums": ("shuffle_reduction", PARTIAL_SUMS),
    "weighted_sum_tree": ("shuffle_reduction", WEIGHTED_SUM),
    "row_cumsum": ("shuffle_scan", ROW_CUMSUM),
    "block_scan": ("shuffle_scan", BLOCK_SCAN),
    "l2_normalise": ("row_in_shared", L2_NORMALISE),
    "rms_norm": ("row_in_shared", RMS_NORM),
    "weighted_sum_loop": ("vectorize_loops", WEIGHTED_SUM),
    "partial_sums_loop": ("vectorize_loops", PARTIAL_SUMS),
    "axpby_vectorize": ("vectorize", AXPBY),
    "axpby_elements": ("elements_per_thread", AXPBY),
    "add_bias_2d": ("elements_per_thread", ADD_BIAS_2D),
    "scale_3d": ("elements_per_thread", SCALE_3D),
    "clamp_tid": ("elements_per_thread", CLAMP_TID),
    "clamp_tid_vectorize": ("vectorize", CLAMP_TID),
    "shade_2d_helpers": ("elements_per_thread", SHADE_2D),
    "grid_stride_add_elements": ("elements_per_thread", GRID_STRIDE_ADD),
    "grid_stride_add_vectorize": ("vectorize", GRID_STRIDE_ADD),
    "grid_stride_add_fixed_grid": ("vectorize_loops", GRID_STRIDE_ADD_FIXED),
    "daxpy": ("elements_per_thread", DAXPY),
    "sigmoid": ("vectorize", SIGMOID),
    "polar": ("vectorize", POLAR),
    "count_above": ("hierarchical_reduction", COUNT_ABOVE),
    "l1_distance": ("hierarchical_reduction", L1_DISTANCE),
    "sum_by_warps": ("hierarchical_reduction", SUM_BY_WARPS),
    "transpose_int": ("shared_tile", TRANSPOSE_INT),
    "laplace_3d_double": ("register_blocking", LAPLACE_3D_DOUBLE),
    "conv5_by_define": ("register_blocking", CONV5),
    "mean9": ("register_window", MEAN9),
    "row_mean": ("warp_per_row", ROW_MEAN),
    "softmax_warp_registers": ("row_in_registers", SOFTMAX_WARP),
    "softmax_warp_shared": ("row_in_shared", SOFTMAX_WARP),
    "layernorm_while": ("row_in_registers", LAYERNORM_WHILE),
    "row_max": ("shuffle_reduction", ROW_MAX),
    "gemv_fmaf": ("warp_per_row", GEMV_FMAF),
    "weighted_rows": ("warp_per_row", WEIGHTED_ROWS),
    "saxpy_ldg": ("vectorize", SAXPY_LDG),
    "grid_stride_add_ldg_fixed_grid": ("vectorize_loops", GRID_STRIDE_ADD_LDG),
    "scale_while_elements": ("elements_per_thread", SCALE_WHILE),
    "scale_while_vectorize": ("vectorize", SCALE_WHILE),
    "key_range": ("hierarchical_reduction", EXTREMES_U64),
    "row_rescale": ("warp_per_row", ROW_RESCALE),
    "normalise_rows": ("warp_per_row", ROW_NORMALISE_IN_PLACE),
    "causal_mask_grid_stride": ("elements_per_thread", CAUSAL_MASK),
    "transpose_grid_stride": ("shared_tile", TRANSPOSE_GRID_STRIDE),
    "row_sums_grid_stride": ("warp_per_row", ROW_SUMS_GRID_STRIDE),
    "scale_3d_grid_stride": ("elements_per_thread", SCALE_3D_GRID_STRIDE),
    "gemv_ldg_unrolled": ("warp_per_row", GEMV_LDG),
    "transpose_gathered": ("shared_tile", TRANSPOSE_GATHERED),
    "spmv_row_extent_in_locals": ("warp_per_row", SPMV_BOUNDS),
    "shade_2d_vectors": ("vectorize", SHADE_2D),
    "scale_3d_vectors": ("vectorize", SCALE_3D),
    "threshold_u8_vectors": ("vectorize", THRESHOLD_U8),
    "scale_3d_grid_stride_vectors": ("vectorize", SCALE_3D_GRID_STRIDE),
    "positives_per_row": ("warp_per_row", POSITIVES_PER_ROW),
    "to_channels_last_flat": ("shared_tile", TO_CHANNELS_LAST),
    "diffusion_flat": ("register_blocking", FLAT_DIFFUSION),
    "pack_channels_across_z": ("shared_tile", PLANAR_TO_PACKED),
    "to_channels_first_running_quotient": ("shared_tile", TO_CHANNELS_FIRST),
    "swap_rows_columns_top_fused": ("shared_tile", SWAP_ROWS_COLUMNS),
    "permute_grid_stride_flat": ("shared_tile", PERMUTE_GRID_STRIDE),
    "add_bias_2d_vectors_gathering_the_bias": ("vectorize", ADD_BIAS_2D),
    "vectors_beside_a_tally_bumped_by_reference": ("vectorize", SCALE_AND_TALLY),
}


def edited(base: KernelSpec, old: str, new: str) -> KernelSpec:
    assert old in base.source, old
    return base.model_validate({**base.model_dump(), "source": base.source.replace(old, new)})


def with_args(base: KernelSpec, args: list[dict]) -> KernelSpec:
    return base.model_validate({**base.model_dump(), "args": args})


CLAMP_LOW_3D = spec(r"""
// A volume clamped from below in place: each voxel read in the if's condition, stored only where it is low.
extern "C" __global__ void clamp_low_3d(float *v, float lo, int nx, int ny, int nz)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < nx && y < ny && z < nz) {
        size_t i = ((size_t)z * ny + y) * nx + x;
        if (v[i] < lo) v[i] = lo;
    }
}
""", "clamp_low_3d", [array("v", ["nz", "ny", "nx"], role="inout"), scalar("lo", 0.25, "float32"),
                      scalar("nx", "nx"), scalar("ny", "ny"), scalar("nz", "nz")], {"nx": 70, "ny": 33, "nz": 17},
    ["nx", "ny", "nz"], {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
    {"block_size_x": [32, 64], "block_size_y": [2, 4], "block_size_z": [1, 2]})

MASK_SCORES = spec(r"""
// Attention scores masked by a byte per score after an early return: filled where dropped, scaled where kept.
extern "C" __global__ void mask_scores(float *scores, const unsigned char *keep, float fill, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= cols || r >= rows) return;
    const int k = r * cols + c;
    if (keep[k] == 0) {
        scores[k] = fill;
    } else {
        scores[k] *= 0.125f;
    }
}
""", "mask_scores", [array("scores", ["rows", "cols"], role="inout"), array("keep", ["rows", "cols"], "uint8",
                                                                               range=[0, 2]),
                     scalar("fill", -1e4, "float32"), scalar("rows", "rows"), scalar("cols", "cols")],
    {"rows": 45, "cols": 131}, ["cols", "rows"], BLOCK_2D, TUNE_2D)

VARIANTS.update({
    "vectors_of_a_store_under_a_condition_in_3d": ("vectorize", CLAMP_LOW_3D),
    "vectors_of_bytes_masking_floats_in_both_branches": ("vectorize", MASK_SCORES),
    # out is written wherever the body runs and read under `?:`: each lane keeps what it read where it keeps it.
    "vectors_of_a_mask_and_a_test_before_a_store": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "if (gain[col] > 0.5f && out[row * w + col] > 0.0f) out[row * w + col] = in[row * w + col];")),
    "vectors_of_a_select_keeping_the_output": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "out[row * w + col] = col < h ? in[row * w + col] * gain[col] : out[row * w + col];")),
})

# An address that depends on the data is a histogram's bin, not a sum's (here the spec's one bin): per-block bins.
VARIANTS["squares_into_a_bin_of_the_data"] = ("hierarchical_reduction", edited(
    SUM_OF_SQUARES, "atomicAdd(&acc[0], v * v);", "atomicAdd(&acc[(int)v & 0], v * v);"))

# SHADE_2D reading through the read-only cache: the lanes take the elements the __ldg reads.
# A lower bound on x too: the row's first and last points are tested.
VARIANTS["vectors_under_a_lower_bound"] = ("vectorize", edited(SHADE_2D, "if (row < h && col < w)",
                                                               "if (row < h && col < w && col > 0)"))
VARIANTS["shade_2d_ldg_vectors"] = ("vectorize", edited(SHADE_2D, "in[row * w + col] * gain[col]",
                                                        "__ldg(&in[row * w + col]) * __ldg(&gain[col])"))

# BLOCK_MAX with the block width read at run time through a local, and no block size in the spec's space.
BLOCK_MAX_BY_WIDTH = BLOCK_MAX.model_validate({**edited(BLOCK_MAX, """    __shared__ float buf[block_size_x];
    const int t = threadIdx.x;
    float m = -3.0e38f;
    for (int i = blockIdx.x * block_size_x + t; i < n; i += gridDim.x * block_size_x) m = fmaxf(m, in[i]);""",
    """    __shared__ float buf[1024];
    const int t = threadIdx.x;
    int width = blockDim.x, i = blockIdx.x * width + t;
    float m = -3.0e38f;
    for (; i < n; i += width * gridDim.x) m = fmaxf(m, in[i]);""").model_dump(), "tune_params": {}})

# case -> (rule, spec, part of the reason it is refused with)
NOT_OF_SHAPE = {
    "a local thread index read beyond the index": ("elements_per_thread", edited(
        CLAMP_TID, "y[gid] = fminf(fmaxf(x[gid], lo), hi);", "y[gid] = fminf(fmaxf(x[gid], lo), hi) + tid;"),
        "after its index definitions it reads tid, a local of the launch geometry"),
    "a local thread index read beyond the index, vectorised": ("vectorize", edited(
        CLAMP_TID, "y[gid] = fminf(fmaxf(x[gid], lo), hi);", "y[gid] = fminf(fmaxf(x[gid], lo), hi) + tid;"),
        "the kernel reads tid, a local its index is defined from, beyond defining it"),
    "a stencil that moves its output pointer": ("register_blocking", edited(
        SMOOTH, "    const size_t at = (size_t)row * w + col;",
        "    dst += (size_t)row * w;\n    const size_t at = col;"),
        "its point body changes its parameter dst, which a thread's next point would see changed"),
    "a_sum_that_starts_elsewhere": ("hierarchical_reduction", edited(
        COUNT_POSITIVE, "unsigned int mine = 0u;", "unsigned int mine = 1u;"), "starts at 1u, not 0"),
    "an_atomic_chosen_by_its_value": ("hierarchical_reduction", edited(
        COUNT_POSITIVE, "if ((threadIdx.x & 31) == 0)", "if ((threadIdx.x & 31) == 0 && mine > 0)"),
        "depends on mine, not only on the lane"),
    "bins_the_code_cannot_count": ("hierarchical_reduction", BUCKET_COUNTS.model_validate({
        **BUCKET_COUNTS.model_dump(),
        "args": [{**a.model_dump(), "shape": ["2 * buckets"]} if a.name == "freq" else a.model_dump()
                 for a in BUCKET_COUNTS.args]}),
        "no parameter of the kernel holds the length of freq (2 * buckets)"),
    "a_2d_copy_is_not_a_transpose": ("shared_tile", edited(
        TRANSPOSE_SCALED, "dst[col * h + row]", "dst[row * w + col]"),
        "does not move by one along row and by more along col"),
    "a_transpose_storing_in_a_loop": ("shared_tile", edited(
        TRANSPOSE_GATHERED, "        odata[y * height + x] = 2.0f * idata[x * width + y];",
        "        for (int k = 0; k < (int)(width > 0); k++)\n"
        "            odata[y * height + x] = 2.0f * idata[x * width + y] + k;"),
        "its store is made in a loop"),
    "a_transpose_changing_its_parameter": ("shared_tile", edited(
        TRANSPOSE_GATHERED, "    if (x < height", "    width += 0;\n    if (x < height"),
        "changes its parameter width"),
    "a_transpose_adding_into_its_output": ("shared_tile", edited(
        TRANSPOSE_GATHERED, "odata[y * height + x] = 2.0f", "odata[y * height + x] += 2.0f"),
        "its store is not a plain one"),
    "a_transpose_reading_through_a_pointer": ("shared_tile", edited(
        TRANSPOSE_GATHERED, "        odata[y * height + x] = 2.0f * idata[x * width + y];",
        "        odata[y * height + x] = 2.0f * idata[x * width + y] + 0.0f * *idata;"),
        "through a pointer or a member"),
    "vectors_of_a_crop": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "{ const float v = in[row * w + col] * gain[col]; if (col < h) out[row * h + col] = v; }"),
        "it writes out under a condition at row * h + col, not at the point's own place in the box its guard "
        "bounds"),
    "vectors_of_a_flag_per_column": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "{ const float v = in[row * w + col]; if (v > gain[col]) out[col] = 1.0f; }"), "not at the point's own place"),
    "vectors_of_a_store_past_a_short_array": ("vectorize", SHADE_2D.model_validate({  # out holds the first row
        **SHADE_2D.model_dump(),
        "source": SHADE_2D.source.replace("out[row * w + col] = in[row * w + col] * gain[col];",
                                          "{ const float v = in[row * w + col] * gain[col]; "
                                          "if (row == 0) out[row * w + col] = v; }"),
        "args": [{**a.model_dump(), "shape": ["w"]} if a.name == "out" else a.model_dump() for a in SHADE_2D.args]}),
        "it touches out only under a condition, and its shape in args does not hold the box its guard bounds"),
    "vectors_of_a_store_in_a_loop": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "for (int t = 0; t < (int)(w > 0); t++) out[row * w + col] = in[row * w + col] * gain[col];"),
        "holds a loop, a return or a jump"),
    "vectors_under_an_exclusive_or": ("vectorize", edited(SHADE_2D, "if (row < h && col < w)",
                                                          "if (row < h && col < w ^ 1)"), "as `col < width` alone"),
    "vectors_of_half_rows": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] =", "out[(row / 2) * w + col] ="), "in terms of the indices"),
    "vectors_through_a_reference": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "{ out[row * w + col] = in[row * w + col]; const float &g = gain[col]; out[row * w + col] *= g; }"),
        "declares a reference"),
    "vectors_of_a_narrow_index": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "out[(unsigned short)(row * w + col)] = in[row * w + col] * gain[col];"), "narrower integer"),
    "vectors_past_the_problem": ("vectorize", edited(
        SHADE_2D, "if (row < h && col < w)", "if (row < h && col < w + 3)"), "not a scalar argument the problem"),
    "vectors_of_an_address_passed_to_a_function": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "out[row * w + col] = __ldg(&in[row * w + col]) * gain[col] + (&out[row * w + col] == nullptr);"),
        "address of out"),
    "vectors_of_an_address_passed_on": ("vectorize", edited(
        SHADE_2D, "out[row * w + col] = in[row * w + col] * gain[col];",
        "{ out[row * w + col] = in[row * w + col] * gain[col]; __stcs(out + row * w + col, 1.0f); }"),
        "it uses out otherwise than indexed"),
    "a_row_broadcast_is_not_a_transpose": ("shared_tile", edited(
        TRANSPOSE_GATHERED, "2.0f * idata[x * width + y]", "2.0f * idata[y]"), "nor along x against loads"),
    "elementwise_is_not_a_stencil": ("register_blocking", ADD_BIAS_2D, "it reads no input around the point"),
    "a_row_written_before_its_loop": ("warp_per_row", edited(
        ROW_TOTALS, "double t = 0.0;", "sums[r] = 0.0;\n        double t = 0.0;"),
        "it writes memory before its row loop"),
    "a_row_loop_reading_its_sum": ("warp_per_row", edited(
        ROW_TOTALS, "t += value;", "t += value * t;"), "its loop reads the accumulator t"),
    "a_row_read_back_from_another_lanes_element": ("warp_per_row", edited(
        ROW_RESCALE, "(in[(size_t)r * cols + c] - lo) / span;",
        "(in[(size_t)r * cols + c] - lo) / span;\n    for (int c = 0; c < cols; c++)\n"
        "        out[(size_t)r * cols + c] += out[(size_t)r * cols + cols - 1 - c];"),
        "it writes out and reads it, or writes it in several places"),
    "a_place_kept_in_a_minimum": ("warp_per_row", edited(
        ROW_RESCALE, "if (v > hi) { hi = v; }", "if (v > hi) { hi = v; lo = c; }"),
        "its loop reads lo, the place of its maximum, or sets it elsewhere"),
    "a_local_array_accumulated_per_lane": ("warp_per_row", edited(edited(
        ROW_TOTALS, "double t = 0.0;", "double parts[2];\n        double t = 0.0;"),
        "            t += value;", "            parts[k & 1] = value;\n            t += value;"),
        "its loop writes parts, not an array parameter"),
    "a_store_that_does_not_move_with_the_row_loop": ("warp_per_row", edited(
        ROW_TOTALS, "            t += value;", "            t += value;\n            sums[0] = value;"),
        "an element that does not move with k alone"),
    "a_second_pass_reading_the_first_passes_sum_partially": ("warp_per_row", edited(
        ROW_NORMALISE_IN_PLACE, "x[r * cols + c] *= inv;", "{ x[r * cols + c] *= inv + ss; ss += 1.0; }"),
        "its loop reads the accumulator ss"),
    # What a review found the row rewrite read wrongly, each now refused.
    "a_bound_that_reads_the_row": ("warp_per_row", edited(
        MATVEC, "j < n_cols;", "j < n_cols && M[(size_t)row * n_cols + j] != 0.0f;"),
        "a row loop's start and bound are plain arithmetic"),
    "a_sum_read_as_it_grows": ("warp_per_row", edited(
        ROW_TOTALS, "            t += value;", "            const double seen = (t += value);"),
        "its loop updates t within an expression"),
    "an_accumulator_behind_a_reference": ("warp_per_row", edited(
        ROW_TOTALS, "double t = 0.0;", "double t = 0.0;\n        double &total = t;"),
        "a reference to) its accumulator t"),
    "an_integer_sum_of_floats": ("warp_per_row", edited(MATVEC, "float acc = 0.f;", "int acc = 0;"),
                                 "a floating-point term, into the integer acc"),
    "a_template_function_every_lane_would_run": ("warp_per_row", edited(edited(
        MATVEC, 'extern "C"', 'template <int K>\n__device__ float counted(float *seen, float v) { seen[0] += 1.0f; '
        'return v * K; }\nextern "C"'), "acc += M[(size_t)row * n_cols + j] * v[j];",
        "acc += counted<2>(out, M[(size_t)row * n_cols + j] * v[j]);"), "it calls counted"),
    "an_integer_sum_of_a_cast": ("warp_per_row", edited(edited(
        MATVEC, "float acc = 0.f;", "int acc = 0;"), "M[(size_t)row * n_cols + j] * v[j]",
        "static_cast<float>(M[(size_t)row * n_cols + j] > v[j])"), "a floating-point term, into the integer acc"),
    "stores_that_overlap_the_next_step": ("warp_per_row", edited(
        ROW_RESCALE, "out[(size_t)r * cols + c] = (in[(size_t)r * cols + c] - lo) / span;",
        "{ out[(size_t)r * cols + c] = (in[(size_t)r * cols + c] - lo) / span; out[(size_t)r * cols + c + 1] = 0; }"),
        "writes it in several places"),
    "a_call_every_lane_would_repeat": ("warp_per_row", edited(
        ROW_TOTALS, "sums[r] = t * scale;", "sums[r] = t * scale;\n        printf(\"%f\\n\", t);"),
        "it calls printf, which every lane would run whole"),
    # What a second review found, each now refused.
    "a_row_loop_dividing_by_its_block_size": ("warp_per_row", edited(
        ROW_TOTALS, "sums[r] = t * scale;", "sums[r] = t * scale / block_size_x;"), "it reads its block size"),
    "a_row_loop_writing_through_an_address": ("warp_per_row", edited(
        ROW_TOTALS, "            t += value;", "            double whole;\n            t += modf(value, &whole) + whole;"),
        "it takes the address of whole"),
    "a_row_loop_indexing_an_expression": ("warp_per_row", edited(
        ROW_TOTALS, "            t += value;", "            t += value;\n            (sums + r)[0] += value;"),
        "indexes a member or an expression"),
    "an_integer_sum_of_a_typedef_float": ("warp_per_row", edited(edited(edited(
        MATVEC, "float acc = 0.f;", "int acc = 0;"), "const float *M", "const real *M"),
        "// out = M v", "typedef float real;\n// out = M v"), "a floating-point term, into the integer acc"),
    "a_grid_stride_body_reading_the_grid": ("elements_per_thread", edited(
        GRID_STRIDE_ADD, "y[i] = x[i] + y[i];", "y[i] = x[i] + y[i] + gridDim.z;"), "its body uses gridDim"),
    "column_major_rows_are_already_coalesced": ("warp_per_row", edited(
        MATVEC, "M[(size_t)row * n_cols + j]", "M[(size_t)j * n_rows + row]"),
        "is contiguous along the rows already"),
    "no_tree_in_a_scan": ("shuffle_reduction", edited(
        BLOCK_MAX, "if (t < s) {", "if (t >= s) {"), "no shared-memory tree reduction"),
    # One result per block from a grid-stride share: vectors would move elements between blocks, and another
    # block size would too (services/generator/rules/partition.py).
    "a_grid_stride_share_per_block_keeps_its_loop": ("vectorize_loops", BLOCK_MAX,
                                                     "the kernel writes one result per block (`out[blockIdx.x]`)"),
    "a_grid_stride_share_per_block_keeps_its_block_size": ("block_size", BLOCK_MAX_BY_WIDTH,
                                                           "another block_size_x gives each result other elements"),
    "strided_loads_are_not_vectorised": ("vectorize_loops", edited(
        WEIGHTED_SUM, "acc += w[idx] * v[idx];", "acc += w[2 * idx] * v[2 * idx];"),
        "indexes no array by idx"),
    "a_single_pass_row_is_read_once_already": ("row_in_shared", PARTIAL_SUMS,
                                               "no row is read in more than one of its 1 loop(s) over a row"),
    "a_row_too_long_for_shared_memory": ("row_in_shared", L2_NORMALISE.with_sizes({"n": 8192}),
                                         "the row of src takes 65536 bytes of shared memory at the spec's sizes"),
    "a_row_the_kernel_writes_in_place": ("row_in_shared", L2_NORMALISE.model_validate({
        **edited(L2_NORMALISE, "dst[base + i] = src[base + i] * inv;", "src[base + i] = src[base + i] * inv;")
        .model_dump(), "args": [a.model_dump() | ({"role": "inout"} if a.name == "src" else {})
                                for a in L2_NORMALISE.args]}), "the kernel writes src (role inout)"),
    "rows_of_several_warps_without_a_barrier": ("row_in_shared", RMS_NORM.model_validate({
        **edited(RMS_NORM, "j += 32)", "j += blockDim.x)").model_dump(),
        "tune_params": {"block_size_x": [64], "block_size_y": [1, 2]}, "params": {"block_size_x": 64,
                                                                                 "block_size_y": 2}}),
        "no barrier comes between its first pass over the row and the later ones"),
    "a_transpose_is_not_elementwise": ("elements_per_thread", TRANSPOSE_SCALED, "it is a transpose-like kernel"),
    "a_grid_stride_body_reading_its_stride": ("elements_per_thread", edited(
        GRID_STRIDE_ADD, "y[i] = x[i] + y[i];", "y[i] = x[i] + stride;"),
        "the loop reads stride, a local defined before it"),
    "a_tree_that_stops_at_the_last_warp": ("shuffle_reduction", REDUCE_LAST_WARP, "no shared-memory tree reduction"),
    # An integer sum through fmaf truncates the float result at each step, which the lanes' partial sums would not.
    "an_fmaf_into_an_integer_sum": ("warp_per_row", edited(
        GEMV_FMAF, "float acc = 0.0f;", "int acc = 0;"), "its loop assigns acc `fmaf("),
    "a_row_sum_scaled_at_each_step": ("warp_per_row", edited(
        WEIGHTED_ROWS, "s = s + w[k] * m[(size_t)r * cols + k];", "s = 0.5 * s + w[k] * m[(size_t)r * cols + k];"),
        "its loop assigns s `0.5 * s + w[k]"),
    "a_sum_assigned_within_an_expression": ("warp_per_row", edited(
        WEIGHTED_ROWS, "s = s + w[k] * m[(size_t)r * cols + k];", "out[r] = (s = s + w[k] * m[(size_t)r * cols + k]);"),
        "its loop assigns s within an expression"),
    # The lanes of a vector have no global address: an atomic on one would not reach memory.
    "an_atomic_on_a_vectorised_element": ("vectorize_loops", edited(
        GRID_STRIDE_ADD_FIXED, "y[i] = x[i] + y[i];", "atomicAdd(&y[i], x[i]);"), "takes the address of y[i]"),
    # A while loop stepping its index before the body: the body's elements are not at the index's own.
    "a_while_loop_stepping_its_index_first": ("elements_per_thread", edited(
        SCALE_WHILE, "out[i] = s * in[i];\n        i += stride;",
        "i += stride;\n        out[i - stride] = s * in[i - stride];"),
        "the loop steps by `out[i - stride] = s * in[i - stride]`"),
}

# --- loops a thread walks one step at a time: batch_loads --------------------------------------------------
DECAY_COLUMNS = spec(r"""
// Each column of a 3D field decays in place along z, at a rate per plane: a thread per (col, row).
extern "C" __global__ void decay_columns(float *field, const float *rate, int w, int h, int d)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col >= w || row >= h) return;
    const size_t slab = (size_t)w * h;
    size_t at = (size_t)row * w + col;
    for (int k = 0; k < d; k++, at += slab) {
        field[at] *= rate[k];
    }
}
""", "decay_columns", [array("field", ["d", "h", "w"], role="inout"), array("rate", ["d"]), scalar("w", "w"),
                       scalar("h", "h"), scalar("d", "d")], {"w": 70, "h": 33, "d": 21}, ["w", "h"], BLOCK_2D, TUNE_2D)

SCALE_CHANNELS = spec(r"""
// Planar channels scaled per channel: a thread per pixel walks its channels through a local index.
extern "C" __global__ void scale_channels(float *out, const float *in, const float *gain, int hw, int channels)
{
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p < hw) {
        for (int c = 0; c < channels; ++c) {
            const int at = c * hw + p;
            out[at] = in[at] * gain[c] + 1.0f;
        }
    }
}
""", "scale_channels", [array("out", ["channels", "hw"], role="out"), array("in", ["channels", "hw"]),
                        array("gain", ["channels"]), scalar("hw", "hw"), scalar("channels", "channels")],
    {"hw": 5000, "channels": 19}, ["hw"], {"block_size_x": 128}, {"block_size_x": [64, 128, 256]})

CLAMP_COLUMNS = spec(r"""
// A volume clamped from below in place, a thread per column: read in the if, stored under it.
extern "C" __global__ void clamp_columns(float *v, float lo, int nx, int ny, int nz)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < nx && y < ny) {
        for (int z = 0; z < nz; z++) {
            size_t i = ((size_t)z * ny + y) * nx + x;
            if (v[i] < lo) v[i] = lo;
        }
    }
}
""", "clamp_columns", [array("v", ["nz", "ny", "nx"], role="inout"), scalar("lo", 0.25, "float32"),
                       scalar("nx", "nx"), scalar("ny", "ny"), scalar("nz", "nz")], {"nx": 70, "ny": 33, "nz": 23},
    ["nx", "ny"], BLOCK_2D, TUNE_2D)

COLUMN_CUMSUM = spec(r"""
// Running sums down each column, in place: each step reads the element the step before it stored.
extern "C" __global__ void column_cumsum(float *a, const float *bias, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = 1; r < rows; ++r)
        a[r * cols + c] += a[(r - 1) * cols + c] + bias[r];
}
""", "column_cumsum", [array("a", ["rows", "cols"], role="inout"), array("bias", ["rows"]), scalar("rows", "rows"),
                       scalar("cols", "cols")], {"rows": 45, "cols": 3000}, ["cols"], {"block_size_x": 128},
    {"block_size_x": [64, 128]})

STRIDED_ACCUMULATE = spec(r"""
// A thread adds a run of values into out at a stride: with a stride of 0, every value into one element, in order.
extern "C" __global__ void strided_accumulate(float *out, const float *vals, int n, int step, int count)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    int j = t;
    for (int k = 0; k < count; ++k, j += step)
        out[j] += vals[k * n + t];
}
""", "strided_accumulate", [array("out", ["count", "n"], role="inout"), array("vals", ["count", "n"]),
                            scalar("n", "n"), scalar("step", 0), scalar("count", "count")], {"n": 3000, "count": 37},
    ["n"], {"block_size_x": 128}, {"block_size_x": [64, 128]})

WEIGHTED_COLUMNS = spec(r"""
// Weighted column sums in double through the read-only cache, the row a size_t.
extern "C" __global__ void weighted_columns(const float *__restrict__ m, const float *__restrict__ wt, double *out,
                                            int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) {
        double s = 0.0;
        for (size_t r = 0; r < rows; r++)
            s += (double)__ldg(&m[r * cols + c]) * __ldg(&wt[r]);
        out[c] = s;
    }
}
""", "weighted_columns", [array("m", ["rows", "cols"]), array("wt", ["rows"]), array("out", ["cols"], "float64", "out"),
                          scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 77, "cols": 3000}, ["cols"],
    {"block_size_x": 128}, {"block_size_x": [64, 128]})

TALLY_ROWS = spec(r"""
// Labels counted a row per thread: an atomic into a bin the loaded label names.
extern "C" __global__ void tally_rows(const int *labels, unsigned int *counts, int rows, int per_row)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    for (int k = 0; k < per_row; k++)
        atomicAdd(&counts[labels[r * per_row + k]], 1u);
}
""", "tally_rows", [array("labels", ["rows", "per_row"], "int32", range=[0, 16]),
                    array("counts", [16], "uint32", "inout"),
                    scalar("rows", "rows"), scalar("per_row", "per_row")], {"rows": 3000, "per_row": 29}, ["rows"],
    {"block_size_x": 128}, {"block_size_x": [64, 128]})

VARIANTS.update({
    "batched_decay_in_place": ("batch_loads", DECAY_COLUMNS),
    "batched_channels_through_a_local_index": ("batch_loads", SCALE_CHANNELS),
    "batched_clamp_read_in_a_condition": ("batch_loads", CLAMP_COLUMNS),
    "batched_running_sums_reading_the_step_before": ("batch_loads", COLUMN_CUMSUM),
    "batched_accumulation_at_a_stride_of_0": ("batch_loads", STRIDED_ACCUMULATE),
    "batched_accumulation_at_a_stride": ("batch_loads", STRIDED_ACCUMULATE.model_validate({
        **STRIDED_ACCUMULATE.model_dump(),
        "args": [{**a, "value": "n"} if a["name"] == "step" else a for a in STRIDED_ACCUMULATE.model_dump()["args"]]})),
    "batched_column_sums_through_ldg": ("batch_loads", WEIGHTED_COLUMNS),
    "batched_labels_beside_atomics": ("batch_loads", TALLY_ROWS),
})

NOT_OF_SHAPE.update({
    "a loop that breaks out": ("batch_loads", edited(
        WEIGHTED_COLUMNS, "s += (double)__ldg(&m[r * cols + c]) * __ldg(&wt[r]);",
        "{ if (m[r * cols + c] < 0.0f) break; s += m[r * cols + c]; }"), "the loop over r uses break"),
    "a loop calling a function of the source": ("batch_loads", edited(
        COLUMN_CUMSUM, "extern \"C\"", "__device__ void bump(float *p, float v) { *p += v; }\nextern \"C\"").model_copy(
        update={"source": edited(COLUMN_CUMSUM, "extern \"C\"", "__device__ void bump(float *p, float v) { *p += v; }"
                                 "\nextern \"C\"").source.replace("a[r * cols + c] += a[(r - 1) * cols + c] + bias[r];",
                                                                  "bump(&a[r * cols + c], bias[r]);")}),
        "the loop over r calls bump, which may store"),
    "a loop storing through a local pointer": ("batch_loads", edited(
        SCALE_CHANNELS, "out[at] = in[at] * gain[c] + 1.0f;", "float *o = out + at; *o = in[at] * gain[c];"),
        "stores through a pointer or member (*o = in[at] * gain[c])"),
    "a loop reading through a macro": ("batch_loads", edited(
        COLUMN_CUMSUM, "extern \"C\"", "#define BIAS(k) bias[k]\nextern \"C\"").model_copy(update={"source": edited(
            COLUMN_CUMSUM, "extern \"C\"", "#define BIAS(k) bias[k]\nextern \"C\"").source.replace(
            "+ bias[r];", "+ BIAS(r);")}), "the loop over r uses the macro BIAS"),
    "a loop unrolled already": ("batch_loads", edited(
        WEIGHTED_COLUMNS, "for (size_t r", "#pragma unroll 4\n        for (size_t r"),
        "the loop over r carries an unroll pragma already"),
    "a loop storing only": ("batch_loads", edited(
        SCALE_CHANNELS, "out[at] = in[at] * gain[c] + 1.0f;", "out[at] = 0.0f;"), "makes no load that can be taken"),
    "a loop reading what it has just stored": ("batch_loads", edited(
        DECAY_COLUMNS, "field[at] *= rate[k];", "field[at] = 1.0f; field[at] += 2.0f;"),
        "makes no load that can be taken"),
    # 32-bit unsigned indices wrap where the 64-bit polynomial that would prove each step's element its own does not
    "a written array at 32-bit unsigned subscripts": ("batch_loads", edited(edited(
        CLAMP_COLUMNS, "int x = blockIdx.x", "unsigned x = blockIdx.x"), "int y = blockIdx.y",
        "unsigned y = blockIdx.y"),
        "makes no load that can be taken"),
    "a loop stepping a second index otherwise than by +=": ("batch_loads", edited(
        STRIDED_ACCUMULATE, "++k, j += step", "++k, j = j + step"), "steps 'j = j + step'"),
})

# A vector read through a cast address reads the lane after it too: a lane of a vector has no such neighbour.
NOT_OF_SHAPE["a pair read through a cast address in a block's row loop"] = ("vectorize_loops", spec(r"""
extern "C" __global__ void pair_sums(float *out, const float *src, int cols)
{
    for (int c = threadIdx.x; c < cols - 1; c += blockDim.x) {
        float2 v = *(const float2 *)&src[blockIdx.x * cols + c];
        out[blockIdx.x * cols + c] = v.x + v.y;
    }
}
""", "pair_sums", [array("out", ["rows", "cols"], role="out"), array("src", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 10, "cols": 1000}, ["rows"], {"block_size_x": 128}, {"block_size_x": [128]}, grid_div_x=[]),
    "takes the address of src[blockIdx.x * cols + c]")

# batch_loads over loops stepped by a stride: a grid-stride update in place (its element moves by the grid's
# width, tested at run time), and a block's strided walk of a row with a stride kept in a local.
DECAY_GRID_STRIDE = spec(r"""
// Exponential decay toward a target, in place, a grid-stride loop over a fixed grid.
extern "C" __global__ void decay(float *state, const float *target, float rate, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        state[i] = state[i] + rate * (target[i] - state[i]);
}
""", "decay", [array("state", ["n"], role="inout"), array("target", ["n"]), scalar("rate", 0.25, "float32"),
               scalar("n", "n")], {"n": 100003}, ["n"], {"block_size_x": 128}, {"block_size_x": [128, 256]},
    grid_div_x=["block_size_x", 8])

ROW_MAX_STRIDED = spec(r"""
// The largest element of each row, a block per row walking it a block width at a time.
extern "C" __global__ void row_peak(const float *m, float *peak, int cols)
{
    __shared__ float best[256];
    const int stride = blockDim.x;
    float v = -3.402823466e+38f;
    for (int c = threadIdx.x; c < cols; c += stride)
        v = fmaxf(v, m[(size_t)blockIdx.x * cols + c]);
    best[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int t = 1; t < blockDim.x; t++) v = fmaxf(v, best[t]);
        peak[blockIdx.x] = v;
    }
}
""", "row_peak", [array("m", ["rows", "cols"]), array("peak", ["rows"], role="out"), scalar("cols", "cols")],
    {"rows": 37, "cols": 1001}, ["rows"], {"block_size_x": 256}, {"block_size_x": [256]}, grid_div_x=[1])

VARIANTS.update({"batched_decay_grid_stride": ("batch_loads", DECAY_GRID_STRIDE),
                 "batched_row_peak_strided": ("batch_loads", ROW_MAX_STRIDED)})


# --- split_columns: a thread per column walking its rows, as users write column reductions ---------------------
COLUMN_MEANS = spec(r"""
// Mean of each column, a thread per column, leaving early past the last one.
extern "C" __global__ void column_means(const float *x, float *mean, int rows, int cols)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r)
        sum += x[r * cols + col];
    mean[col] = sum / rows;
}
""", "column_means", [array("x", ["rows", "cols"]), array("mean", ["cols"], role="out"), scalar("rows", "rows"),
                      scalar("cols", "cols")], {"rows": 301, "cols": 1000}, ["cols"], {"block_size_x": 128},
    {"block_size_x": [32, 128, 256]})

COLUMN_ABS_MAX = spec(r"""
// The largest magnitude of each column (a quantiser's scale), rows at size_t offsets.
extern "C" __global__ void column_absmax(const float * __restrict__ a, float * __restrict__ amax, int n_rows,
                                         int n_cols)
{
    int c = threadIdx.x + blockIdx.x * blockDim.x;
    if (c < n_cols) {
        float m = 0.0f;
        for (int r = 0; r < n_rows; r++) {
            m = fmaxf(m, fabsf(a[(size_t)r * n_cols + c]));
        }
        amax[c] = m / 127.0f;
    }
}
""", "column_absmax", [array("a", ["n_rows", "n_cols"]), array("amax", ["n_cols"], role="out"),
                       scalar("n_rows", "n_rows"), scalar("n_cols", "n_cols")], {"n_rows": 250, "n_cols": 777},
    ["n_cols"], {"block_size_x": 64}, {"block_size_x": [64, 256]})

COLUMN_MIN_FROM_ROW_ONE = spec(r"""
// Each column's minimum, starting from its first row and comparing the rest, in double.
extern "C" __global__ void column_min(const double *v, double *lo, int h, int w)
{
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < w) {
        double best = v[x];
        for (int y = 1; y < h; y++) {
            if (v[y * w + x] < best) best = v[y * w + x];
        }
        lo[x] = best;
    }
}
""", "column_min", [array("v", ["h", "w"], "float64"), array("lo", ["w"], "float64", "out"), scalar("h", "h"),
                    scalar("w", "w")], {"h": 129, "w": 515}, ["w"], {"block_size_x": 128}, {"block_size_x": [128]})

POSITIVES_PER_COLUMN = spec(r"""
// How many entries of each column are positive: an int count of comparisons.
extern "C" __global__ void positives_per_column(const float *m, int *count, int rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < cols) {
        int n = 0;
        for (int i = 0; i < rows; i++)
            n += (m[i * cols + j] > 0.0f);
        count[j] = n;
    }
}
""", "positives_per_column", [array("m", ["rows", "cols"]), array("count", ["cols"], "int32", "out"),
                              scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 200, "cols": 999}, ["cols"],
    {"block_size_x": 256}, {"block_size_x": [128, 256]})

BIAS_GRADIENT = spec(r"""
// A bias's gradient over a batch, starting from the bias, with the scaled gradient stored row by row.
extern "C" __global__ void bias_grad(const float *dy, const float *bias, float *db, float *dx, int batch,
                                     int features)
{
    int f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f < features) {
        float acc = bias[f];
        for (int b = 0; b < batch; ++b) {
            const float g = dy[b * features + f];
            dx[b * features + f] = 0.5f * g;
            acc += g;
        }
        db[f] = acc;
    }
}
""", "bias_grad", [array("dy", ["batch", "features"]), array("bias", ["features"]), array("db", ["features"], role="out"),
                   array("dx", ["batch", "features"], role="out"), scalar("batch", "batch"),
                   scalar("features", "features")], {"batch": 97, "features": 1030}, ["features"],
    {"block_size_x": 128}, {"block_size_x": [128, 512]})

COLUMN_NORMS = spec(r"""
// Euclidean norm of each column of a double matrix.
extern "C" __global__ void column_norms(const double *A, double *norms, int m, int n)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < n) {
        double ss = 0.0;
        for (int row = 0; row < m; row++) {
            double v = A[row * n + col];
            ss += v * v;
        }
        norms[col] = sqrt(ss);
    }
}
""", "column_norms", [array("A", ["m", "n"], "float64"), array("norms", ["n"], "float64", "out"), scalar("m", "m"),
                      scalar("n", "n")], {"m": 64, "n": 700}, ["n"], {"block_size_x": 128}, {"block_size_x": [128]})

COLUMN_SUM_AND_MAX = spec(r"""
// Two statistics of each column in one walk: its sum and its maximum.
extern "C" __global__ void column_stats(const float *x, float *sums, float *maxima, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) {
        float s = 0.0f, mx = -3.402823466e+38f;
        for (int r = 0; r < rows; r++) {
            float v = x[r * cols + c];
            s += v;
            mx = fmaxf(mx, v);
        }
        sums[c] = s;
        maxima[c] = mx;
    }
}
""", "column_stats", [array("x", ["rows", "cols"]), array("sums", ["cols"], role="out"),
                      array("maxima", ["cols"], role="out"), scalar("rows", "rows"), scalar("cols", "cols")],
    {"rows": 150, "cols": 1100}, ["cols"], {"block_size_x": 128}, {"block_size_x": [128, 256]})

COLUMN_WIDE_COUNTS = spec(r"""
// How many entries of each column pass a threshold, counted in 64 bits, the loop unrolled by hand's pragma.
extern "C" __global__ void column_counts(const float *x, unsigned long long *counts, const float *threshold,
                                         int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) {
        unsigned long long q = 1ull;  // one more, as the consumer expects
        // every row
#pragma unroll 4
        for (int r = 0; r < rows; r++)
            q += x[r * cols + c] > threshold[0] ? 1ull : 0ull;
        counts[c] = q;
    }
}
""", "column_counts", [array("x", ["rows", "cols"]), array("counts", ["cols"], "uint64", "out"),
                       array("threshold", [1]), scalar("rows", "rows"), scalar("cols", "cols")],
    {"rows": 120, "cols": 999}, ["cols"], {"block_size_x": 128}, {"block_size_x": [128]})

SPLIT_COLUMNS = {
    "column_means": COLUMN_MEANS, "column_absmax": COLUMN_ABS_MAX, "column_min_from_row_one": COLUMN_MIN_FROM_ROW_ONE,
    "positives_per_column": POSITIVES_PER_COLUMN, "bias_gradient": BIAS_GRADIENT, "column_norms": COLUMN_NORMS,
    "column_sum_and_max": COLUMN_SUM_AND_MAX, "weighted_columns": WEIGHTED_COLUMNS,
    "column_wide_counts": COLUMN_WIDE_COUNTS,
}
VARIANTS.update({f"split_{case}": ("split_columns", variant) for case, variant in SPLIT_COLUMNS.items()})

NOT_OF_SHAPE.update({
    "a column's mean and then its variance": ("split_columns", edited(
        COLUMN_MEANS, "    mean[col] = sum / rows;",
        "    const float mu = sum / rows;\n    float var = 0.0f;\n    for (int r = 0; r < rows; ++r)\n"
        "        var += (x[r * cols + col] - mu) * (x[r * cols + col] - mu);\n    mean[col] = var / rows;"),
        "it walks its column in several loops"),
    "a column loop that reads threadIdx.y": ("split_columns", edited(
        COLUMN_MEANS, "    mean[col] = sum / rows;", "    mean[col] = sum / rows + threadIdx.y;"),
        "after its index definitions it uses threadIdx"),
    "a column loop beside a barrier": ("split_columns", edited(
        COLUMN_MEANS, "    mean[col] = sum / rows;", "    __syncthreads();\n    mean[col] = sum / rows;"),
        "it uses __syncthreads"),
    "a column loop under a conditional directive": ("split_columns", edited(edited(
        COLUMN_MEANS, "    for (int r = 0;", "#if 1\n    for (int r = 0;"), "    mean[col] = sum / rows;",
        "#endif\n    mean[col] = sum / rows;"), "holds a conditional directive"),
    "a row loop is not a column loop": ("split_columns", VARIANTS["row_totals"][1],
                                        "its loop reads no array contiguously along"),
})

# Kernels whose grid covers exactly the rows there are (every block size divides them), with no guard on the axis a
# march takes: a grid shrunk by the march would run past the rows (found by review with AddressSanitizer).
UNGUARDED_ROWS = spec(r"""
extern "C" __global__ void unguarded_y(float *out, const float *in, int w)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w) out[y * w + x] = 2.0f * in[y * w + x];
}
""", "unguarded_y", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), scalar("w", "w")],
    {"w": 45, "h": 64}, ["w", "h"], BLOCK_2D, TUNE_2D)
# Points (not a stencil) march along x instead, which the guard bounds (marching.march_axis).
VARIANTS["points_marched_along_x_past_unguarded_rows"] = ("elements_per_thread", UNGUARDED_ROWS)
NOT_OF_SHAPE.update({
    "a stencil's march past unguarded rows": ("register_blocking", edited(
        UNGUARDED_ROWS, "if (x < w) out[y * w + x] = 2.0f * in[y * w + x];",
        "if (x > 0 && x < w - 1) out[y * w + x] = in[y * w + x - 1] + in[y * w + x + 1] + in[y * w + x];"),
        "is under no guard bounding y from above"),
})
NOT_OF_SHAPE["an element bound to a reference"] = ("vectorize", spec(r"""
extern "C" __global__ void ref_write(float *a, const float *b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float &r = a[i]; r = r * 2.0f + b[i]; }
}
""", "ref_write", [array("a", ["n"], role="inout"), array("b", ["n"]), scalar("n", "n")], {"n": 4099}, ["n"],
    {"block_size_x": 256}, {"block_size_x": [128, 256]}), "declares a pointer or a reference")
# Found by review with a CPU emulation of blocks, barriers and shuffles: a shared array sized for the submitted
# block (a block_size of 256 overran red[128]); a strided loop bounded by `<=`, read as `< (= n - 1)`.
NOT_OF_SHAPE.update({
    "a shared array of the submitted block's size": ("block_size", spec(r"""
#define THREADS 128
extern "C" __global__ void row_max(float *out, const float *in, int cols)
{
    __shared__ float red[THREADS];
    const float *x = in + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = red[0];
}
""", "row_max", [array("out", ["rows"], role="out"), array("in", ["rows", "cols"]), scalar("cols", "cols")],
        {"rows": 5, "cols": 333}, ["rows"], {"block_size_x": 128}, {}, grid_div_x=[1]),
        "the shared array red[THREADS] of a fixed size"),
    "a grid-stride loop bounded by <=": ("vectorize_loops", spec(r"""
extern "C" __global__ void squares(float *sum, const float *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= n - 1; i += blockDim.x * gridDim.x)
        atomicAdd(sum, x[i] * x[i]);
}
""", "squares", [array("sum", [1], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 3001}, ["n"],
        {"block_size_x": 256}, {"block_size_x": [128, 256]}), "no strided loop"),
})

# A heat step as many write it: the flat index computed before the guard, the border left as it was.
HEAT_STEP = spec(r"""
extern "C" __global__ void heat_step(float *next, const float *cur, int width, int height, float alpha)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int idx = row * width + col;
    if (col >= 1 && col < width - 1 && row >= 1 && row < height - 1) {
        next[idx] = cur[idx] + alpha * (cur[idx - 1] + cur[idx + 1] + cur[idx - width] + cur[idx + width]
                                        - 4.0f * cur[idx]);
    }
}
""", "heat_step", [array("next", ["height", "width"], role="out"), array("cur", ["height", "width"]),
                   scalar("width", "width"), scalar("height", "height"), scalar("alpha", 0.1, "float32")],
    {"width": 301, "height": 203}, ["width", "height"], BLOCK_2D, TUNE_2D)
VARIANTS.update({"heat_step_index_first_vectors": ("vectorize", HEAT_STEP),
                 "heat_step_index_first_marched": ("register_blocking", HEAT_STEP)})

# Stencils spelled as users spell them, each once refused by vectorize (found by review): a 3D step whose plane and
# index are locals before the guard, a Jacobi step in unsigned ints leaving on `x == 0`, and nested guards.
HEAT_3D_PLANE = spec(r"""
extern "C" __global__ void heat3(float *out, const float *in, int nx, int ny, int nz, float a)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    size_t plane = (size_t)nx * ny;
    size_t c = z * plane + (size_t)y * nx + x;
    if (x >= 1 && x < nx - 1 && y >= 1 && y < ny - 1 && z >= 1 && z < nz - 1) {
        out[c] = in[c] + a * (in[c - 1] + in[c + 1] + in[c - nx] + in[c + nx] + in[c - plane] + in[c + plane]
                              - 6.0f * in[c]);
    }
}
""", "heat3", [array("out", ["nz", "ny", "nx"], role="out"), array("in", ["nz", "ny", "nx"]),
               scalar("nx", "nx"), scalar("ny", "ny"), scalar("nz", "nz"), scalar("a", 0.1, "float32")],
    {"nx": 64, "ny": 32, "nz": 16}, ["nx", "ny", "nz"], {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
    {"block_size_x": [32, 64], "block_size_y": [1, 2, 4], "block_size_z": [1, 2]})
JACOBI_UNSIGNED = spec(r"""
extern "C" __global__ void jacobi_u(float *dst, const float *src, unsigned nx, unsigned ny)
{
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x == 0 || y == 0 || x >= nx - 1 || y >= ny - 1) return;
    unsigned c = y * nx + x;
    dst[c] = 0.25f * (src[c - 1] + src[c + 1] + src[c - nx] + src[c + nx]);
}
""", "jacobi_u", [array("dst", ["ny", "nx"], role="out"), array("src", ["ny", "nx"]),
                  scalar("nx", "nx", "uint32"), scalar("ny", "ny", "uint32")],
    {"nx": 300, "ny": 200}, ["nx", "ny"], BLOCK_2D, TUNE_2D)
NESTED_GUARDS = spec(r"""
extern "C" __global__ void nested_le(float *out, const float *in, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y >= 1 && y <= h - 2) {
        // the interior columns of an interior row
        if (x >= 1 && x <= w - 2) {
            out[y * w + x] = in[y * w + x] - 0.25f * (in[y * w + x - 1] + in[y * w + x + 1] + in[(y - 1) * w + x]
                                                      + in[(y + 1) * w + x]);
        }
    }
}
""", "nested_le", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), scalar("w", "w"), scalar("h", "h")],
    {"w": 301, "h": 203}, ["w", "h"], BLOCK_2D, TUNE_2D)
VARIANTS.update({"heat3_plane_before_the_guard_vectors": ("vectorize", HEAT_3D_PLANE),
                 "jacobi_unsigned_leaving_on_zero_vectors": ("vectorize", JACOBI_UNSIGNED),
                 "nested_guards_vectors": ("vectorize", NESTED_GUARDS)})
# The first row alone stored, under a guard nested in the kernel's (out holds that row): one guard once joined.
VARIANTS["vectors_of_a_first_row_under_nested_guards"] = ("vectorize", SHADE_2D.model_validate({
    **SHADE_2D.model_dump(),
    "source": SHADE_2D.source.replace("out[row * w + col] = in[", "if (row == 0) out[row * w + col] = in["),
    "args": [{**a.model_dump(), "shape": ["w"]} if a.name == "out" else a.model_dump() for a in SHADE_2D.args]}))
# A row's pointer taken before the guard, whose condition reads the row's index after an `&&`.
ROW_POINTER = spec(r"""
extern "C" __global__ void row_pointer(float *out, const float *in, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    const float *row = in + (size_t)y * w;
    if (x > 0 && x < w - 1 && y < h)
        out[(size_t)y * w + x] = row[x - 1] - 2.0f * row[x] + row[x + 1];
}
""", "row_pointer", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), scalar("w", "w"),
                     scalar("h", "h")], {"w": 301, "h": 203}, ["w", "h"], BLOCK_2D, TUNE_2D)
VARIANTS["row_pointer_before_the_guard_vectors"] = ("vectorize", ROW_POINTER)
# A bound held in a local of the parameters, as `last` for the final column.
BOUND_LOCAL = spec(r"""
extern "C" __global__ void bound_local(float *out, const float *in, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int last = w - 1;
    if (x >= 1 && x < last && y < h)
        out[y * w + x] = in[y * w + x + 1] - in[y * w + x - 1];
}
""", "bound_local", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), scalar("w", "w"),
                     scalar("h", "h")], {"w": 301, "h": 203}, ["w", "h"], BLOCK_2D, TUNE_2D)
VARIANTS["bound_in_a_local_vectors"] = ("vectorize", BOUND_LOCAL)

# Kernels of the row, atomic, transpose and scan families as users write them (found correct under emulation
# by review): pitched rows, a leading dimension with alpha and beta, dynamic shared memory, clamped float bins.
SOFTMAX_BLOCK_PITCH = spec(r"""
extern "C" __global__ void softmax_rows(float *__restrict__ y, const float *__restrict__ x, int cols, int ld)
{
    __shared__ float red[1024];
    const float *xr = x + (size_t)blockIdx.x * ld;
    float *yr = y + (size_t)blockIdx.x * ld;
    unsigned tid = threadIdx.x;
    float m = -INFINITY;
    for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[tid] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    const float rowmax = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) sum += expf(xr[c] - rowmax);
    red[tid] = sum;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int c = tid; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - rowmax) * inv;
}
""", "softmax_rows", [array("y", ["rows", "ld"], role="out"), array("x", ["rows", "ld"]),
                      scalar("cols", "cols"), scalar("ld", "ld")],
    {"rows": 256, "cols": 1000, "ld": 1024}, ["rows"], {"block_size_x": 128}, {"block_size_x": [32, 64, 128, 256]},
    grid_div_x=[1])
LAYERNORM_THREAD_PITCH = spec(r"""
extern "C" __global__ void layernorm_t(float *out, const float *in, const float *gamma, const float *beta,
                                       unsigned rows, unsigned cols, unsigned pitch, float eps)
{
    const unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const size_t base = (size_t)r * pitch;
    float mean = 0.0f;
    for (unsigned c = 0; c < cols; ++c) mean += in[base + c];
    mean /= cols;
    float var = 0.0f;
    for (unsigned c = 0; c < cols; ++c) { float d = in[base + c] - mean; var += d * d; }
    const float inv = rsqrtf(var / cols + eps);
    for (unsigned c = 0; c < cols; ++c) out[base + c] = (in[base + c] - mean) * inv * __ldg(&gamma[c]) + __ldg(&beta[c]);
}
""", "layernorm_t", [array("out", ["rows", "pitch"], role="out"), array("in", ["rows", "pitch"]),
                     array("gamma", ["cols"]), array("beta", ["cols"]),
                     scalar("rows", "rows", "uint32"), scalar("cols", "cols", "uint32"),
                     scalar("pitch", "pitch", "uint32"), scalar("eps", 1e-5, "float32")],
    {"rows": 1000, "cols": 300, "pitch": 320}, ["rows"], {"block_size_x": 128}, {"block_size_x": [64, 128]})
RMS_NORM_DYNAMIC = spec(r"""
extern "C" __global__ void rmsnorm_b(float *__restrict__ out, const float *__restrict__ x,
                                     const float *__restrict__ w, unsigned dim, float eps)
{
    extern __shared__ float partial[];
    const unsigned t = threadIdx.x;
    const float *row = x + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (unsigned j = t; j < dim; j += blockDim.x) { const float v = row[j]; ss += v * v; }
    partial[t] = ss;
    __syncthreads();
    for (unsigned s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) partial[t] += partial[t + s];
        __syncthreads();
    }
    const float scale = rsqrtf(partial[0] / dim + eps);
    for (unsigned j = t; j < dim; j += blockDim.x) out[(size_t)blockIdx.x * dim + j] = row[j] * scale * __ldg(w + j);
}
""", "rmsnorm_b", [array("out", ["rows", "dim"], role="out"), array("x", ["rows", "dim"]), array("w", ["dim"]),
                   scalar("dim", "dim", "uint32"), scalar("eps", 1e-6, "float32")],
    {"rows": 512, "dim": 1000}, ["rows"], {"block_size_x": 128}, {"block_size_x": [32, 64, 128, 256]},
    grid_div_x=[1], smem_args={"size": "block_size_x * 4"})
GEMV_LDA = spec(r"""
extern "C" __global__ void sgemv_n(float *y, const float *__restrict__ A, const float *__restrict__ x,
                                   int m, int n, int lda, float alpha, float beta)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    float dot = 0.0f;
    for (int j = 0; j < n; j++)
        dot += __ldg(&A[(size_t)i * lda + j]) * __ldg(&x[j]);
    y[i] = alpha * dot + beta * y[i];
}
""", "sgemv_n", [array("y", ["m"], role="inout"), array("A", ["m", "lda"]), array("x", ["n"]),
                 scalar("m", "m"), scalar("n", "n"), scalar("lda", "lda"),
                 scalar("alpha", 1.5, "float32"), scalar("beta", 0.5, "float32")],
    {"m": 1000, "n": 500, "lda": 512}, ["m"], {"block_size_x": 128}, {"block_size_x": [64, 128]})
HISTOGRAM_FLOAT_BINS = spec(r"""
extern "C" __global__ void hist_f(unsigned int *hist, const float *__restrict__ data, size_t n, float lo, float inv_width, int nbins)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        int b = (int)((data[i] - lo) * inv_width);
        if (b < 0) b = 0;
        if (b >= nbins) b = nbins - 1;
        atomicAdd(&hist[b], 1u);
    }
}
""", "hist_f", [array("hist", ["nbins"], "uint32", "out"), array("data", ["n"]),
                scalar("n", "n", "uint64"), scalar("lo", -2.0, "float32"), scalar("inv_width", 8.0, "float32"),
                scalar("nbins", "nbins")],
    {"n": 1 << 20, "nbins": 32}, ["n"], {"block_size_x": 256}, {"block_size_x": [64, 128, 256]},
    grid_div_x=["block_size_x", 4])
TRANSPOSE_PITCHED = spec(r"""
extern "C" __global__ void transpose_p(float *__restrict__ dst, const float *__restrict__ src,
                                       int rows, int cols, int lds, int ldd)
{
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols)
        dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}
""", "transpose_p", [array("dst", ["cols", "ldd"], role="inout"), array("src", ["rows", "lds"]),
                     scalar("rows", "rows"), scalar("cols", "cols"), scalar("lds", "lds"), scalar("ldd", "ldd")],
    {"rows": 300, "cols": 200, "lds": 320, "ldd": 304}, ["cols", "rows"], {"block_size_x": 32, "block_size_y": 8},
    {"block_size_x": [16, 32, 64], "block_size_y": [2, 4, 8]})
EXCLUSIVE_SCAN_BLOCK = spec(r"""
extern "C" __global__ void excl_scan(int *out, int *totals, const int *in, int n)
{
    extern __shared__ int tmp[];
    int tid = threadIdx.x;
    int gid = blockIdx.x * blockDim.x + tid;
    int mine = gid < n ? in[gid] : 0;
    tmp[tid] = mine;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset <<= 1) {
        int add = tid >= offset ? tmp[tid - offset] : 0;
        __syncthreads();
        tmp[tid] += add;
        __syncthreads();
    }
    if (gid < n) out[gid] = tmp[tid] - mine;
    if (tid == blockDim.x - 1) totals[blockIdx.x] = tmp[tid];
}
""", "excl_scan", [array("out", ["n"], "int32", "out"), array("totals", ["n"], "int32", "out"),
                   array("in", ["n"], "int32"), scalar("n", "n")],
    {"n": 100003}, ["n"], {"block_size_x": 256}, {"block_size_x": [64, 128, 256]},
    smem_args={"size": "block_size_x * 4"})
COLUMN_MAX_PITCHED = spec(r"""
extern "C" __global__ void col_max(float *out, const float *in, int rows, int cols, int pitch)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float m = in[c];
    for (int r = 1; r < rows; ++r) m = fmaxf(m, in[(size_t)r * pitch + c]);
    out[c] = m;
}
""", "col_max", [array("out", ["cols"], role="out"), array("in", ["rows", "pitch"]),
                 scalar("rows", "rows"), scalar("cols", "cols"), scalar("pitch", "pitch")],
    {"rows": 500, "cols": 700, "pitch": 704}, ["cols"], {"block_size_x": 128}, {"block_size_x": [64, 128]})
VARIANTS.update({
    "softmax_a_block_per_pitched_row_registers": ("row_in_registers", SOFTMAX_BLOCK_PITCH),
    "softmax_a_block_per_pitched_row_shuffles": ("shuffle_reduction", SOFTMAX_BLOCK_PITCH),
    "layernorm_a_thread_per_pitched_row": ("warp_per_row", LAYERNORM_THREAD_PITCH),
    "rms_norm_a_block_per_row_dynamic_shared": ("shuffle_reduction", RMS_NORM_DYNAMIC),
    "gemv_leading_dimension_alpha_beta": ("warp_per_row", GEMV_LDA),
    "transpose_pitched_both_sides": ("shared_tile", TRANSPOSE_PITCHED),
    "histogram_of_float_bins_clamped": ("hierarchical_reduction", HISTOGRAM_FLOAT_BINS),
    "column_max_pitched": ("split_columns", COLUMN_MAX_PITCHED),
    "exclusive_scan_of_a_block": ("shuffle_scan", EXCLUSIVE_SCAN_BLOCK),
})

# --- accumulations into a few addresses by kernels of one point per thread on 2D and 3D grids -------------
IMAGE_SUM_2D = spec(r"""
// The sum of an image's pixels: a thread per pixel, each adding its own with one atomic.
extern "C" __global__ void image_sum(float *total, const float *img, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) atomicAdd(total, img[y * width + x]);
}
""", "image_sum", [array("total", [1], role="out"), array("img", ["height", "width"]), scalar("width", "width"),
                   scalar("height", "height")],
    {"width": 1920, "height": 1080}, ["width", "height"], {"block_size_x": 32, "block_size_y": 8},
    {"block_size_x": [16, 32, 64], "block_size_y": [4, 8, 16]})
MASKED_STATS_2D = spec(r"""
// How many pixels of a pitched frame pass a threshold, and the brightest of them: an early return at the frame's
// edge, a count and a maximum per pixel by integer atomics.
extern "C" __global__ void masked_stats(unsigned int *passing, int *brightest, const int *frame, int cols, int rows,
                                        int pitch, int threshold)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col >= cols || row >= rows) return;
    const int v = frame[row * pitch + col];
    if (v > threshold) {
        atomicAdd(passing, 1u);
        atomicMax(brightest, v);
    }
}
""", "masked_stats", [array("passing", [1], "uint32", "out"), array("brightest", [1], "int32", "out"),
                      array("frame", ["rows", "pitch"], "int32", range=[0, 4096]), scalar("cols", "cols"),
                      scalar("rows", "rows"), scalar("pitch", "pitch"), scalar("threshold", 3000)],
    {"cols": 1000, "rows": 700, "pitch": 1024}, ["cols", "rows"], {"block_size_x": 32, "block_size_y": 4},
    {"block_size_x": [32, 64], "block_size_y": [2, 4, 8]})
ENERGY_3D = spec(r"""
// The energy of a field on a 3D grid: each point adds its squared value, in double precision.
extern "C" __global__ void field_energy(double *energy, const float *field, int nx, int ny, int nz)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i < nx && j < ny && k < nz) {
        const double v = field[((size_t)k * ny + j) * nx + i];
        atomicAdd(&energy[0], v * v);
    }
}
""", "field_energy", [array("energy", [1], "float64", "out"), array("field", ["nz", "ny", "nx"]),
                      scalar("nx", "nx"), scalar("ny", "ny"), scalar("nz", "nz")],
    {"nx": 200, "ny": 120, "nz": 90}, ["nx", "ny", "nz"], {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
    {"block_size_x": [32, 64], "block_size_y": [2, 4], "block_size_z": [1, 2]})
VARIANTS.update({
    "image_sum_2d": ("hierarchical_reduction", IMAGE_SUM_2D),
    "masked_stats_2d": ("hierarchical_reduction", MASKED_STATS_2D),
    "field_energy_3d": ("hierarchical_reduction", ENERGY_3D),
})
# Threads march along the slowest axis, which the guard must bound (here y alone, on a grid whose width every
# block width divides).
VARIANTS["image_sum_2d_rows_guarded"] = ("hierarchical_reduction", IMAGE_SUM_2D.model_validate({
    **edited(IMAGE_SUM_2D, "if (x < width && y < height)", "if (y < height)").model_dump(),
    "sizes": {"width": 1024, "height": 1000}}))
NOT_OF_SHAPE["a 2D accumulation whose guard leaves its rows unbounded"] = ("hierarchical_reduction", edited(
    IMAGE_SUM_2D, "if (x < width && y < height)", "if (x < width)"), "is not one guard bounding y from above")

# Shared memory sized from a number in args, while the kernel reads the length from a parameter a call may set
# higher (a review's finding: the row, or the bins, would overflow it).
NOT_OF_SHAPE["a row length given as a number, read from a parameter"] = ("row_in_shared", RMS_NORM.model_validate({
    **RMS_NORM.model_dump(),
    "args": [{**a.model_dump(), "value": 1024} if a.name == "dim" else a.model_dump() for a in RMS_NORM.args]}),
    "comes from dim, which args gives as the number 1024")
NOT_OF_SHAPE["bins counted by a parameter given as a number"] = ("hierarchical_reduction", spec(r"""
extern "C" __global__ void hist(unsigned int *counts, const int *key, int n, int nbins)
{
    for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += gridDim.x * blockDim.x) {
        int b = key[i];
        if (b >= 0 && b < nbins) atomicAdd(&counts[b], 1u);
    }
}
""", "hist", [array("counts", [256], "uint32", "out"), array("key", ["n"], "int32", range=[0, 256]), scalar("n", "n"),
              scalar("nbins", 256)], {"n": 1 << 20}, ["n"], grid_div_x=["block_size_x", 8]),
    "reads the length of counts from nbins, which args gives as the number 256")
IMAGE_HISTOGRAM_2D = spec(r"""
// The histogram of an 8-bit grey image: a thread per pixel, each adding one to its value's bin.
extern "C" __global__ void grey_histogram(unsigned int *hist, const unsigned char *img, int w, int h)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) atomicAdd(&hist[img[y * w + x]], 1u);
}
""", "grey_histogram", [array("hist", [256], "uint32", "out"), array("img", ["h", "w"], "uint8"), scalar("w", "w"),
                        scalar("h", "h")],
    {"w": 1920, "h": 1080}, ["w", "h"], {"block_size_x": 32, "block_size_y": 8},
    {"block_size_x": [32, 64, 128], "block_size_y": [2, 4, 8]})
VARIANTS["image_histogram_2d"] = ("hierarchical_reduction", IMAGE_HISTOGRAM_2D)
MSE_2D_UNSIGNED = spec(r"""
// A mean squared error over an image, C++ linkage, unsigned indices and sizes, a local flat index in the guard.
__global__ void mse(const float* pred, const float* target, float* loss, unsigned int W, unsigned int H)
{
    unsigned int c = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c < W && r < H) {
        unsigned int i = r * W + c;
        float d = pred[i] - target[i];
        atomicAdd(loss, d * d / (W * H));
    }
}
""", "mse", [array("pred", ["H", "W"]), array("target", ["H", "W"]), array("loss", [1], role="out"),
             scalar("W", "W", "uint32"), scalar("H", "H", "uint32")],
    {"W": 1000, "H": 600}, ["W", "H"], {"block_size_x": 16, "block_size_y": 16},
    {"block_size_x": [16, 32], "block_size_y": [8, 16]})
SOLID_COUNT_3D = spec(r"""
// Voxels above a threshold, counted with an int atomic; threads outside the volume return first.
extern "C" __global__ void count_solid(int *solid, const unsigned char *vox, int nx, int ny, int nz)
{
    int x = threadIdx.x + blockIdx.x * blockDim.x;
    int y = threadIdx.y + blockIdx.y * blockDim.y;
    int z = threadIdx.z + blockIdx.z * blockDim.z;
    if (x >= nx || y >= ny || z >= nz) return;
    if (vox[(z * ny + y) * nx + x] > 127) atomicAdd(solid, 1);
}
""", "count_solid", [array("solid", [1], "int32", "out"), array("vox", ["nz", "ny", "nx"], "uint8"),
                     scalar("nx", "nx"), scalar("ny", "ny"), scalar("nz", "nz")],
    {"nx": 250, "ny": 120, "nz": 70}, ["nx", "ny", "nz"], {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
    {"block_size_x": [32, 64], "block_size_y": [4], "block_size_z": [1, 2]})
SUM_2D_GRID_STRIDE = spec(r"""
// A matrix's sum through nested grid-stride loops, one atomic per element.
extern "C" __global__ void sum2d(float *total, const float *a, int w, int h)
{
    for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < h; y += blockDim.y * gridDim.y)
        for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < w; x += blockDim.x * gridDim.x)
            atomicAdd(total, a[y * w + x]);
}
""", "sum2d", [array("total", [1], role="out"), array("a", ["h", "w"]), scalar("w", "w"), scalar("h", "h")],
    {"w": 1030, "h": 700}, ["w", "h"], {"block_size_x": 32, "block_size_y": 8},
    {"block_size_x": [32, 64], "block_size_y": [4, 8]})
VARIANTS.update({"mse_2d_unsigned": ("hierarchical_reduction", MSE_2D_UNSIGNED),
                 "solid_count_3d": ("hierarchical_reduction", SOLID_COUNT_3D),
                 "sum_2d_grid_stride": ("hierarchical_reduction", SUM_2D_GRID_STRIDE)})
# Work outside every guard (a review's finds): a grid shrunk by a march would do it past the submitted grid's points.
NOT_OF_SHAPE["a 2D sum read through pointer arithmetic under no guard"] = ("hierarchical_reduction", edited(
    IMAGE_SUM_2D, "if (x < width && y < height) atomicAdd(total, img[y * width + x]);",
    "atomicAdd(total, __ldg(img + y * width + x));"), "is not one guard bounding y from above")
NOT_OF_SHAPE["a 1D sum under no guard"] = ("hierarchical_reduction", edited(
    ATOMIC_SUM, "if (i < n) ", ""), "is not one guard bounding i from above")
NOT_OF_SHAPE["a 2D histogram in blocks deeper than its grid"] = ("hierarchical_reduction",
    IMAGE_HISTOGRAM_2D.model_validate({**IMAGE_HISTOGRAM_2D.model_dump(),
                                       "params": {"block_size_x": 16, "block_size_y": 4, "block_size_z": 2}}),
    "its block has more dimensions than its grid of points (block_size_z is not 1)")

# Per-channel kernels over NCHW tensors as frameworks launch them: a block per channel along y and per image along
# z (grid_div_y and grid_div_z []), the channel and image read from blockIdx alone, an early return on the row.
BIAS_RELU_NCHW = spec(r"""
__global__ void bias_relu_nchw(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ bias,
                               int N, int C, int HW)
{
    int hw = blockIdx.x * blockDim.x + threadIdx.x;
    int c = blockIdx.y;
    int n = blockIdx.z;
    if (hw >= HW) return;
    size_t idx = ((size_t)n * C + c) * HW + hw;
    float v = x[idx] + bias[c];
    y[idx] = v > 0.f ? v : 0.f;
}
""", "bias_relu_nchw", [array("y", ["N", "C", "HW"], role="out"), array("x", ["N", "C", "HW"]), array("bias", ["C"]),
                        scalar("N", "N"), scalar("C", "C"), scalar("HW", "HW")], {"N": 3, "C": 5, "HW": 3135},
    ["HW", "C", "N"], {"block_size_x": 256}, {"block_size_x": [128, 256, 512]}, grid_div_y=[], grid_div_z=[])
VARIANTS["bias_relu_nchw_block_per_channel"] = ("vectorize", BIAS_RELU_NCHW)
# The same launched with blocks two channels deep: blockIdx.y is no longer the channel of each of a block's threads.
NOT_OF_SHAPE["a grid along y of blocks two deep left undivided"] = ("vectorize", BIAS_RELU_NCHW.model_validate({
    **BIAS_RELU_NCHW.model_dump(), "params": {"block_size_x": 256, "block_size_y": 2}}),
    "its indices cover the axes x, z")

# A loss as users write it: a thread per row of logits walks the row twice (its maximum, then the sum of
# exponentials) and adds the row's loss into one scalar atomically. The row loops are the kernel's traffic (one
# atomic per row of 1,000 classes): warp_per_row coalesces them and lane 0 keeps the atomic.
CROSS_ENTROPY = spec(r"""
extern "C" __global__ void xent_rows(float *loss, const float *logits, const int *labels, int rows, int classes)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        const float *z = logits + (size_t)r * classes;
        float m = -INFINITY;
        for (int j = 0; j < classes; ++j) m = fmaxf(m, z[j]);
        float s = 0.f;
        for (int j = 0; j < classes; ++j) s += expf(z[j] - m);
        atomicAdd(loss, (logf(s) + m - z[labels[r]]) / rows);
    }
}
""", "xent_rows", [array("loss", [1], role="out"), array("logits", ["rows", "classes"]),
                   array("labels", ["rows"], "int32", range=[0, "classes"]), scalar("rows", "rows"),
                   scalar("classes", "classes")], {"rows": 300, "classes": 1000}, ["rows"], {"block_size_x": 128},
    {"block_size_x": [64, 128, 256]})
VARIANTS["cross_entropy_rows_into_one_scalar"] = ("warp_per_row", CROSS_ENTROPY)

# Rows whose first pass reads the row only under a condition (found by review, helper-83): the last chunk shorter
# than the loop's length, and weights the caller may leave out (null). A copy of the row read first in the pass
# read past x's end, and through the null pointer.
CHUNK_NORMALISE = spec(r"""
extern "C" __global__ void chunk_normalise(float *out, const float *x, int n, int len)
{
    __shared__ float red[block_size_x];
    const int base = blockIdx.x * len;
    float s = 0.0f;
    for (int c = threadIdx.x; c < len; c += blockDim.x)
        if (base + c < n) s += x[base + c];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    const float total = red[0];
    for (int c = threadIdx.x; c < len; c += blockDim.x)
        if (base + c < n) out[base + c] = x[base + c] / total;
}
""", "chunk_normalise", [array("out", ["n"], role="out"), array("x", ["n"]), scalar("n", "n"), scalar("len", "len")],
    {"n": 1000, "len": 64}, ["(n + len - 1) // len"], {"block_size_x": 32}, {"block_size_x": [32, 64]},
    grid_div_x=["1"])
OPTIONAL_WEIGHT_ROWS = spec(r"""
extern "C" __global__ void weighted_rows(float *out, const float *x, const float *w, int cols, int use_w)
{
    __shared__ float red[block_size_x];
    const int row = blockIdx.x;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += block_size_x)
        if (use_w) s += w[(size_t)row * cols + c];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = block_size_x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    const float total = red[0];
    for (int c = threadIdx.x; c < cols; c += block_size_x)
        out[(size_t)row * cols + c] = use_w ? x[(size_t)row * cols + c] * w[(size_t)row * cols + c] / total
                                            : x[(size_t)row * cols + c];
}
""", "weighted_rows", [array("out", ["rows", "cols"], role="out"), array("x", ["rows", "cols"]),
                       array("w", ["rows", "cols"]), scalar("cols", "cols"), scalar("use_w", 1)],
    {"rows": 5, "cols": 40}, ["rows"], {"block_size_x": 32}, {"block_size_x": [32, 64]}, grid_div_x=["1"])
for rule_id in ("row_in_shared", "row_in_registers"):
    NOT_OF_SHAPE[f"{rule_id}: a ragged last chunk read under its bound"] = (
        rule_id, CHUNK_NORMALISE, "its first pass over x reads it only under a condition")
    NOT_OF_SHAPE[f"{rule_id}: optional weights read under their flag"] = (
        rule_id, OPTIONAL_WEIGHT_ROWS, "its first pass over w reads it only under a condition")

# Integer accumulators fed through casts (found by review, helper-83): a C-style cast to float makes each step
# truncate the running value, so the lanes' or the column's split sums differ from the loop's; a cast to an
# integer type keeps the sum exact in any order.
ROW_THIRDS = spec(r"""
extern "C" __global__ void thirds(int *out, const int *codes, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        int acc = 0;
        for (int c = 0; c < cols; c++) acc += (float)codes[r * cols + c] / 3;
        out[r] = acc;
    }
}
""", "thirds", [array("out", ["rows"], "int32", "out"), array("codes", ["rows", "cols"], "int32", range=[-10, 10]),
                scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 600, "cols": 80}, ["rows"],
    {"block_size_x": 128}, {"block_size_x": [64, 128]})
COLUMN_THIRDS = spec(r"""
extern "C" __global__ void column_thirds(int *out, const int *codes, int rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < cols) {
        int acc = 0;
        for (int i = 0; i < rows; i++) acc += codes[i * cols + j] / (double)3;
        out[j] = acc;
    }
}
""", "column_thirds", [array("out", ["cols"], "int32", "out"),
                       array("codes", ["rows", "cols"], "int32", range=[-10, 10]), scalar("rows", "rows"),
                       scalar("cols", "cols")], {"rows": 900, "cols": 600}, ["cols"], {"block_size_x": 32},
    {"block_size_x": [32, 64]})
NOT_OF_SHAPE["an integer row sum of terms cast to float"] = ("warp_per_row", ROW_THIRDS,
                                                             "a floating-point term, into the integer acc")
NOT_OF_SHAPE["an integer column sum of terms cast to double"] = ("split_columns", COLUMN_THIRDS,
                                                                 "a floating-point term, into the integer acc")
VARIANTS["row_sum_of_codes_cast_to_long_long"] = ("warp_per_row", edited(edited(edited(
    ROW_THIRDS, "int acc = 0;", "long long acc = 0;"),
    "acc += (float)codes[r * cols + c] / 3;", "acc += (long long)codes[r * cols + c] * 3;"),
    "out[r] = acc;", "out[r] = (int)acc;"))

# A row maximum in the comparison form that keeps the element where the comparison fails (found by review,
# helper-83): a NaN replaces the maximum and the next element replaces the NaN, so the result depends on where the
# NaN lies ([5, NaN, 1] leaves 1; lanes of four left 5). Refused for rows and for columns.
ROW_PEAK_MIRROR = spec(r"""
extern "C" __global__ void row_peak(float *out, const float *in, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float m = -INFINITY;
        for (int c = 0; c < cols; c++) {
            float v = in[r * cols + c];
            m = v < m ? m : v;
        }
        out[r] = m;
    }
}
""", "row_peak", [array("out", ["rows"], role="out"), array("in", ["rows", "cols"]), scalar("rows", "rows"),
                  scalar("cols", "cols")], {"rows": 600, "cols": 300}, ["rows"], {"block_size_x": 128},
    {"block_size_x": [64, 128]})
NOT_OF_SHAPE["a row maximum keeping the element where the comparison fails"] = (
    "warp_per_row", ROW_PEAK_MIRROR, "so a NaN replaces m and the next element replaces the NaN")
NOT_OF_SHAPE["a column maximum keeping the element where the comparison fails"] = ("split_columns", spec(r"""
extern "C" __global__ void column_peak(float *out, const float *in, int rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < cols) {
        float m = -INFINITY;
        for (int i = 0; i < rows; i++) m = in[i * cols + j] < m ? m : in[i * cols + j];
        out[j] = m;
    }
}
""", "column_peak", [array("out", ["cols"], role="out"), array("in", ["rows", "cols"]), scalar("rows", "rows"),
                     scalar("cols", "cols")], {"rows": 900, "cols": 600}, ["cols"], {"block_size_x": 32},
    {"block_size_x": [32, 64]}), "where a NaN lies")
# The same in the form keeping the element where the comparison holds: a NaN never enters, in any order.
VARIANTS["row_peak_kept_where_greater"] = ("warp_per_row", edited(ROW_PEAK_MIRROR, "m = v < m ? m : v;",
                                                                  "m = v > m ? v : m;"))
# A GEMV with a bias and an unroll pragma on its row loop (found by review, helper-83): the lanes' bias reset goes
# before the pragma, which stays right before its loop.
GEMV_BIAS_UNROLLED = spec(r"""
extern "C" __global__ void gemv_bias(float *y, const float *A, const float *x, const float *b, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float s = b[r];
        #pragma unroll 4
        for (int c = 0; c < cols; c++) s += A[r * cols + c] * x[c];
        y[r] = s;
    }
}
""", "gemv_bias", [array("y", ["rows"], role="out"), array("A", ["rows", "cols"]), array("x", ["cols"]),
                   array("b", ["rows"]), scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 370, "cols": 450},
    ["rows"], {"block_size_x": 128}, {"block_size_x": [64, 128]})
VARIANTS["gemv_bias_unrolled"] = ("warp_per_row", GEMV_BIAS_UNROLLED)

# A row's index declared in each pass, as users write it (`const int idx = row * cols + c;`; refused as a row
# whose index changed, found by review, helper-83): the copy of the row is stored after the declaration.
ROW_L2_INDEX_LOCALS = spec(r"""
extern "C" __global__ void row_l2(float *out, const float *x, int cols)
{
    __shared__ float red[block_size_x];
    const int row = blockIdx.x;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int idx = row * cols + c;
        s += x[idx] * x[idx];
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    const float inv = rsqrtf(red[0]);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int idx = row * cols + c;
        out[idx] = x[idx] * inv;
    }
}
""", "row_l2", [array("out", ["rows", "cols"], role="out"), array("x", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 50, "cols": 700}, ["rows"], {"block_size_x": 128}, {"block_size_x": [64, 128, 256]}, grid_div_x=[1])
VARIANTS["row_l2_index_local_in_each_pass"] = ("row_in_shared", ROW_L2_INDEX_LOCALS)
VARIANTS["row_l2_index_local_in_each_pass_registers"] = ("row_in_registers", ROW_L2_INDEX_LOCALS)

# Scans and windows found wrong by review (helper-84, a CPU emulation with a host thread per CUDA thread).
_SEGMENTED = (TESTS.parent / "examples" / "corpus" / "segmented_scan.cu").read_text()
_SEGMENT_LOAD = "buf[threadIdx.x] = i < seg ? src[i] : 0;"


def _segmented(source: str) -> KernelSpec:
    return spec(source, "segmented_scan", [array("out", ["segments", "seg"], "int32", "out"),
                                           array("totals", ["segments"], "int32", "out"),
                                           array("in", ["segments", "seg"], "int32"), scalar("seg", "seg")],
                {"segments": 3, "seg": 1000}, ["segments"], {"block_size_x": 128},
                {"block_size_x": [64, 128, 256]}, grid_div_x=[1])


# Prefix sums of squares: the value scanned is an expression of the element, which the vectors dropped.
NOT_OF_SHAPE["a chunked scan of each element's square"] = ("scan_vectors", _segmented(_SEGMENTED.replace(
    _SEGMENT_LOAD, "buf[threadIdx.x] = i < seg ? src[i] * src[i] : 0;")), "not one element of a row")
NOT_OF_SHAPE["a chunked scan of each element times 3, written with if and else"] = ("scan_vectors", _segmented(
    _SEGMENTED.replace(_SEGMENT_LOAD, "if (i < seg) buf[threadIdx.x] = src[i] * 3;\n        "
                                      "else buf[threadIdx.x] = 0;")), "not one element of a row")
# An offset naming the thread: each lane of a vector would read another element than its i's.
NOT_OF_SHAPE["a chunked scan reading at an offset of the thread's index"] = ("scan_vectors", _segmented(
    _SEGMENTED.replace(_SEGMENT_LOAD, "buf[threadIdx.x] = i < seg ? src[threadIdx.x + i] : 0;")),
    "reaches the row through src[threadIdx.x + i]")
# Rows of a block two or four deep, each scanning its own: the warps' totals were kept for one row of threads.
ROW_SCANS_2D = spec(r"""
__device__ void scan_row(int *s)
{
    for (int o = 1; o < block_size_x; o *= 2) {
        const int t = threadIdx.x >= o ? s[threadIdx.x - o] : 0;
        __syncthreads();
        s[threadIdx.x] += t;
        __syncthreads();
    }
}

extern "C" __global__ void row_scans(int *out, const int *in, int n)
{
    __shared__ int tile[block_size_y][block_size_x];
    const int row = blockIdx.x * block_size_y + threadIdx.y;
    tile[threadIdx.y][threadIdx.x] = row < n ? in[row * block_size_x + threadIdx.x] : 0;
    __syncthreads();
    scan_row(tile[threadIdx.y]);
    if (row < n) out[row * block_size_x + threadIdx.x] = tile[threadIdx.y][threadIdx.x];
}
""", "row_scans", [array("out", ["n", 64], "int32", "out"), array("in", ["n", 64], "int32"), scalar("n", "n")],
    {"n": 8}, ["n"], {"block_size_x": 64, "block_size_y": 2}, {"block_size_x": [64], "block_size_y": [2, 4]},
    grid_div_x=["block_size_y"])
NOT_OF_SHAPE["block scans of rows two and four deep in a block"] = ("shuffle_scan", ROW_SCANS_2D,
                                                                    "its blocks may be more than one thread deep")

# Found by review (helper-82): a transpose guarding nothing, whose grid fits its sizes at every block size tuned,
# but not whole tiles (the tile read and stored past its arrays); and a stencil whose guard reads a mask before it
# bounds y (&& reads the mask at every point, past it where a march runs past the rows).
NOT_OF_SHAPE["a transpose under no guard"] = ("shared_tile", spec(r"""
extern "C" __global__ void transpose_nog(float *out, const float *in, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    out[x * h + y] = in[y * w + x];
}
""", "transpose_nog", [array("out", ["w", "h"], role="out"), array("in", ["h", "w"]), scalar("w", "w"),
                       scalar("h", "h")], {"w": 64, "h": 40}, ["w", "h"], BLOCK_2D,
    {"block_size_x": [32, 64], "block_size_y": [2, 4, 8]}), "is under no guard bounding x from above")
MASK_FIRST_STENCIL = spec(r"""
extern "C" __global__ void masked(float *out, const float *in, const int *mask, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (mask[y * w + x] != 0 && y < h && x < w)
        out[y * w + x] = in[y * (w + 1) + x] + in[y * (w + 1) + x + 1] + in[(y + 1) * (w + 1) + x];
}
""", "masked", [array("out", ["h", "w"], role="out"), array("in", ["h + 1", "w + 1"]), array("mask", ["h", "w"], "int32"),
                scalar("w", "w"), scalar("h", "h")], {"w": 64, "h": 40}, ["w", "h"], BLOCK_2D, TUNE_2D)
NOT_OF_SHAPE["a stencil whose guard reads a mask before it bounds y"] = (
    "register_blocking", MASK_FIRST_STENCIL, "mask[y * w + x] is under no guard bounding y from above")
NOT_OF_SHAPE["points whose guard reads a mask before it bounds y"] = ("elements_per_thread", edited(
    MASK_FIRST_STENCIL, "in[y * (w + 1) + x] + in[y * (w + 1) + x + 1] + in[(y + 1) * (w + 1) + x]",
    "2.0f * in[y * (w + 1) + x]"), "mask[y * w + x] is under no guard bounding y from above")

# Found by review (helper-82): a grid over a band of an image's rows, guarded by the image's height. The submitted
# grid stops at the band; a grid shrunk by a march covers whole marches, and computed rows past the band under the
# guard. The guard's bound must be within the problem size along the marched axis.
BAND_SCALE = spec(r"""
// The first rows of an image scaled, a band the launch covers; the guard bounds the whole image.
extern "C" __global__ void band_scale(float *out, const float *in, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h)
        out[y * w + x] = 2.0f * in[y * w + x];
}
""", "band_scale", [array("out", ["h", "w"], role="inout"), array("in", ["h", "w"]), scalar("w", "w"),
                    scalar("h", "h")], {"w": 64, "h": 100, "band": 64}, ["w", "band"], BLOCK_2D, TUNE_2D)
BEYOND_THE_BAND = "its guard's bound on y, h, may pass the problem size along y"
# Points (not a stencil) march along x instead, which the guard bounds within the problem size. The rows the band's
# grid computes past it depend on block_size_y (the guard lets them be), so it is not tuned here: the verifier
# refuses any configuration computing other rows than the submitted one, the kernel's own included.
VARIANTS["points_of_a_band_marched_along_x"] = ("elements_per_thread", BAND_SCALE.model_validate({
    **BAND_SCALE.model_dump(), "tune_params": {"block_size_x": [32, 64]}}))
NOT_OF_SHAPE.update({
    "a stencil over a band guarded by the image's height": ("register_blocking", with_args(edited(
        BAND_SCALE, "2.0f * in[y * w + x]", "in[y * w + x] + in[(y + 1) * w + x] + in[(y + 2) * w + x]"),
        [array("out", ["h", "w"], role="inout"), array("in", ["h + 2", "w"]), scalar("w", "w"), scalar("h", "h")]),
        BEYOND_THE_BAND),
    "a window over a band guarded by the image's height": ("register_window", with_args(edited(
        BAND_SCALE, "out[y * w + x] = 2.0f * in[y * w + x];",
        "{ float s = 0.0f; for (int i = 0; i < 3; i++) for (int j = 0; j < 3; j++) "
        "s += in[(y + i) * (w + 2) + x + j]; out[y * w + x] = s; }"),
        [array("out", ["h", "w"], role="inout"), array("in", ["h + 2", "w + 2"]), scalar("w", "w"), scalar("h", "h")]),
        BEYOND_THE_BAND),
    "a transpose of a band guarded by the image's height": ("shared_tile", edited(
        BAND_SCALE, "out[y * w + x] = 2.0f * in[y * w + x];", "out[x * h + y] = in[y * w + x];"),
        BEYOND_THE_BAND),
    "a sum over a band guarded by the image's height": ("hierarchical_reduction", edited(
        BAND_SCALE, "out[y * w + x] = 2.0f * in[y * w + x];", "atomicAdd(out, in[y * w + x]);"),
        "its guard's bound on y, h, may pass the problem size along y"),
})

# A point body that changes a parameter otherwise than by assigning it: through a reference bound to it, through a
# function of the source taking it by reference (an RNG's state), or through its address. A thread's next point
# (a vector's next lane) would see the changed value. Found by review (helper-82).
DITHER = spec(r"""
// Dithered quantisation: each point draws from a generator seeded by the same state.
__device__ unsigned int step_state(unsigned int &s) { s = s * 1664525u + 1013904223u; return s; }
extern "C" __global__ void dither(float *out, const float *in, unsigned int seed, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int r = step_state(seed);
        out[i] = floorf(in[i] * 255.0f + (r >> 8) * (1.0f / 16777216.0f));
    }
}
""", "dither", [array("out", ["n"], role="out"), array("in", ["n"]), scalar("seed", 12345, "uint32"), scalar("n", "n")],
    {"n": 5000}, ["n"])
GAIN_BY_REFERENCE = spec(r"""
extern "C" __global__ void fade(float *out, const float *in, float gain, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float &g = gain;
        out[i] = in[i] * g;
        g *= 0.5f;
    }
}
""", "fade", [array("out", ["n"], role="out"), array("in", ["n"]), scalar("gain", 2.0, "float32"), scalar("n", "n")],
    {"n": 5000}, ["n"])
BY_REFERENCE = "may change its parameter"
NOT_OF_SHAPE.update({
    "a parameter changed by a function taking it by reference": ("elements_per_thread", DITHER, BY_REFERENCE),
    "a parameter changed by a function taking it by reference, vectorised": ("vectorize", DITHER, BY_REFERENCE),
    "a parameter changed through a reference": ("elements_per_thread", GAIN_BY_REFERENCE, BY_REFERENCE),
    "a parameter changed through a reference, vectorised": ("vectorize", GAIN_BY_REFERENCE, BY_REFERENCE),
    "a parameter changed through its address": ("elements_per_thread", edited(
        GAIN_BY_REFERENCE, "float &g = gain;\n        out[i] = in[i] * g;\n        g *= 0.5f;",
        "float *g = &gain;\n        out[i] = in[i] * *g;\n        *g *= 0.5f;"), BY_REFERENCE),
    "a parameter changed through a template's forwarding reference": ("vectorize", edited(
        DITHER, "__device__ unsigned int step_state(unsigned int &s)",
        "template <typename T> __device__ unsigned int step_state(T &&s)"), BY_REFERENCE),
})

# A helper the point body calls that reads the thread's place: the body depends on more than its indices.
NOT_OF_SHAPE.update({
    "a helper reading threadIdx.y": ("elements_per_thread", edited(edited(
        SHADE_2D, "extern \"C\"", "__device__ float row_bias() { return 0.25f * threadIdx.y; }\nextern \"C\""),
        "in[row * w + col] * gain[col]", "in[row * w + col] * gain[col] + row_bias()"),
        "it calls row_bias, which uses threadIdx"),
    "a helper's helper reading the lane by assembly": ("vectorize", edited(edited(
        SHADE_2D, "extern \"C\"", "__device__ unsigned lane() { unsigned l; asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(l)); "
                                  "return l; }\n__device__ float jitter() { return 1e-3f * lane(); }\nextern \"C\""),
        "in[row * w + col] * gain[col]", "in[row * w + col] * gain[col] + jitter()"),
        "it calls lane, which uses asm"),
})

# What those refusals leave taken: a read the same at every point made before the guard, a helper taking a
# parameter by a const reference, and (shared_tile) a value loaded into a local that only the store reads.
VARIANTS.update({
    "shade_2d_coefficient_read_before_the_guard": ("elements_per_thread", edited(edited(
        SHADE_2D, "    if (row < h && col < w)", "    const float lift = gain[0] * 0.125f;\n    if (row < h && col < w)"),
        "in[row * w + col] * gain[col]", "in[row * w + col] * gain[col] + lift")),
    "fade_by_a_helper_taking_a_const_reference": ("vectorize", edited(edited(
        GAIN_BY_REFERENCE, "extern \"C\"", "__device__ float times(const float &g, float v) { return g * v; }\n"
                                           "extern \"C\""),
        "        float &g = gain;\n        out[i] = in[i] * g;\n        g *= 0.5f;\n",
        "        out[i] = times(gain, in[i]);\n")),
    "transpose_through_a_local": ("shared_tile", edited(
        TRANSPOSE_DOUBLE, "        out[to] = in[from];", "        const double v = 0.5 * in[from];\n        out[to] = v;")),
})

# The same for an elementwise kernel launched over a prefix of its arrays: the rewrite's grid-stride loop runs to the
# guard's bound, past the elements the submitted grid reached.
PREFIX_SCALE = spec(r"""
extern "C" __global__ void prefix_scale(float *out, const float *in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3.0f * in[i];
}
""", "prefix_scale", [array("out", ["n"], role="inout"), array("in", ["n"]), scalar("n", "n")], {"n": 5000, "m": 3000},
    ["m"])
NOT_OF_SHAPE.update({
    "an elementwise prefix guarded by the arrays' length": ("elements_per_thread", PREFIX_SCALE,
                                                            "its guard's bound, n, may pass its problem size"),
    "an elementwise prefix guarded by the arrays' length, vectorised": ("vectorize", PREFIX_SCALE,
                                                                        "its guard's bound, n, may pass its problem size"),
    "an elementwise body calling a helper that reads the lane": ("vectorize", edited(edited(
        PREFIX_SCALE, "extern \"C\"", "__device__ float lane_bias() { return 1e-3f * (threadIdx.x & 31); }\nextern \"C\""),
        "3.0f * in[i]", "3.0f * in[i] + lane_bias()").model_copy(update={"problem_size": ["n"]}),
        "calls lane_bias, which uses threadIdx"),
})

# vectorize_loops reads an index local the loop's body defines from its index (`const int at = row * cols + c;`),
# as users name a row's element, its base spelled from the local's definition.
GAINED_ROWS_INDEX_LOCAL = spec(r"""
// Each block scales its row by a gain per column, the row's element named by a local of each iteration.
extern "C" __global__ void gained_rows_at(float *out, const float *in, const float *gain, int cols)
{
    const int row = blockIdx.x;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int at = row * cols + c;
        out[at] = in[at] * gain[c];
    }
}
""", "gained_rows_at", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]),
                        array("gain", ["cols"]), scalar("cols", "cols")],
    {"rows": 3, "cols": 1000}, ["rows"], {"block_size_x": 32}, {"block_size_x": [32, 64]}, grid_div_x=[])
VARIANTS["gained_rows_index_local"] = ("vectorize_loops", GAINED_ROWS_INDEX_LOCAL)
DOUBLED_ROWS_INDEX_LOCAL = edited(GAINED_ROWS_INDEX_LOCAL, "in[at] * gain[c]", "in[at] * 2.0f")
NOT_OF_SHAPE.update({
    "an index local assigned again": ("vectorize_loops", edited(
        DOUBLED_ROWS_INDEX_LOCAL, "const int at = row * cols + c;\n", "int at = row * cols + c;\n        at += 0;\n"),
        "the loop over c indexes no array by c"),
    "an index local two elements a step": ("vectorize_loops", edited(
        DOUBLED_ROWS_INDEX_LOCAL, "const int at = row * cols + c;", "const int at = row * cols + 2 * c;"),
        "the loop over c indexes no array by c"),
    "an index local from a loaded offset": ("vectorize_loops", edited(
        DOUBLED_ROWS_INDEX_LOCAL, "const int at = row * cols + c;", "const int at = (int)in[0] + c;"),
        "the base of out[at] is not plain arithmetic"),
})

# Found by review (helper-86): vectorize_loops gives a thread other elements, which the rest of a kernel may rely on.
# A thread's (or a warp's) own partial result, a second loop reading back what the first stored, conditional
# stores of a grid-stride loop that blocks along y share, and an element passed to a function by reference.
PARTIAL_SUMS = spec(r"""
extern "C" __global__ void partial_sums(int *partial, const int *x, int n)
{
    int gid = blockIdx.x * blockDim.x + threadIdx.x;
    int acc = 0;
    for (int i = gid; i < n; i += blockDim.x * gridDim.x)
        acc += x[i];
    partial[gid] = acc;
}
""", "partial_sums", [array("partial", [1024], "int32", "out"), array("x", ["n"], "int32"), scalar("n", "n")],
    {"n": 100000}, [1024], tune_params={"block_size_x": [128, 256]})
PER_THREAD = "carries values a thread (or warp) writes as its own result"
NOT_OF_SHAPE.update({
    "a grid-stride sum per thread": ("vectorize_loops", PARTIAL_SUMS, PER_THREAD),
    "a block's row summed per thread": ("vectorize_loops", spec(r"""
extern "C" __global__ void row_partials(int *partial, const int *in, int cols)
{
    const int row = blockIdx.x;
    int acc = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        acc += in[row * cols + c];
    partial[row * blockDim.x + threadIdx.x] = acc;
}
""", "row_partials", [array("partial", ["rows", 128], "int32", "out"), array("in", ["rows", "cols"], "int32"),
                      scalar("cols", "cols")], {"rows": 4, "cols": 1001}, ["rows"], {"block_size_x": 128},
        {"block_size_x": [128]}, grid_div_x=[]), PER_THREAD),
    "a grid-stride sum per warp": ("vectorize_loops", spec(r"""
extern "C" __global__ void warp_partials(unsigned *partial, const unsigned *x, int n)
{
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0u;
    for (int i = gid; i < n; i += blockDim.x * gridDim.x)
        acc += x[i];
    for (int d = 16; d > 0; d /= 2) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if ((threadIdx.x & 31) == 0) partial[gid / 32] = acc;
}
""", "warp_partials", [array("partial", [64], "uint32", "out"), array("x", ["n"], "uint32"), scalar("n", "n")],
        {"n": 50001}, [2048], {"block_size_x": 256}, {"block_size_x": [128, 256]}), PER_THREAD),
    "a second loop reading back what the first stored": ("vectorize_loops", spec(r"""
#include <cuda_fp16.h>
extern "C" __global__ void scale_and_shadow(float *y, half *y_half, const float *x, float s, int n)
{
    const int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = x[i] * s;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y_half[i] = __float2half(y[i]);
}
""", "scale_and_shadow", [array("y", ["n"], role="out"), array("y_half", ["n"], "float16", role="out"), array("x", ["n"]),
                          scalar("s", 3.0, "float32"), scalar("n", "n")], {"n": 10007}, [2048], {"block_size_x": 256},
        {"block_size_x": [128, 256]}), "touches y, which the kernel reads elsewhere too"),
    "conditional stores of a grid-stride loop shared by blocks along y": ("vectorize_loops", spec(r"""
extern "C" __global__ void scale_by_class(float *x, const int *label, const float *gain, int n)
{
    const int cls = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        if (label[i] == cls)
            x[i] = x[i] * gain[cls];
    }
}
""", "scale_by_class", [array("x", ["n"], role="inout"), array("label", ["n"], "int32", range=[0, "k"]),
                        array("gain", ["k"]), scalar("n", "n")], {"n": 100003, "k": 4}, [64, "k"],
        {"block_size_x": 256}, grid_div_x=[], grid_div_y=[]),
        "along y or z walk the same elements"),
})
CLAMP_BY_REFERENCE = spec(r"""
__device__ void clamp_to(float &v, float lo, float hi) { v = fminf(fmaxf(v, lo), hi); }
extern "C" __global__ void clampref(float *y, float lo, float hi, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) clamp_to(y[i], lo, hi);
}
""", "clampref", [array("y", ["n"], role="inout"), scalar("lo", -1.0, "float32"), scalar("hi", 1.0, "float32"),
                  scalar("n", "n")], {"n": 5003}, ["n"], tune_params={"block_size_x": [64, 128]})
NOT_OF_SHAPE.update({
    "an element passed to a function by reference": ("vectorize", CLAMP_BY_REFERENCE,
                                                     "passes y[i] to clamp_to, which takes it by reference"),
    "an element passed to a function by reference in a loop": ("vectorize_loops", edited(
        CLAMP_BY_REFERENCE, "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) clamp_to(y[i], lo, hi);",
        "    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n"
        "        clamp_to(y[i], lo, hi);").model_copy(
        update={"grid_div_x": ["block_size_x", 8]}), "passes y[i] to clamp_to, which takes it by reference"),
})
# What those leave taken: a row normalised in place, its loops apart by the block's barriers.
VARIANTS["row_l2_in_place"] = ("vectorize_loops", spec(r"""
extern "C" __global__ void row_l2_in_place(float *x, int cols)
{
    __shared__ float red[block_size_x];
    float *row = x + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += row[c] * row[c];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
        __syncthreads();
    }
    const float inv = rsqrtf(red[0] + 1e-6f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        row[c] *= inv;
}
""", "row_l2_in_place", [array("x", ["rows", "cols"], role="inout"), scalar("cols", "cols")], {"rows": 6, "cols": 1000},
    ["rows"], {"block_size_x": 128}, {"block_size_x": [64, 128, 256]}, grid_div_x=[]))

# warp_per_row takes an argmax (or argmin): a maximum kept with its place, `if (v > best) { best = v; at = c; }`;
# the lanes keep the smaller place among equal values, the first in the row, as the loop as written keeps it.
ROW_ARGMAX = spec(r"""
// The predicted class of each row of logits: the first column holding the row's largest value, a thread per row.
extern "C" __global__ void row_argmax(int *out, const float *logits, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float best = logits[(size_t)r * cols];
        int at = 0;
        for (int c = 1; c < cols; c++) {
            float v = logits[(size_t)r * cols + c];
            if (v > best) { best = v; at = c; }
        }
        out[r] = at;
    }
}
""", "row_argmax", [array("out", ["rows"], "int32", "out"), array("logits", ["rows", "cols"]), scalar("rows", "rows"),
                    scalar("cols", "cols")], {"rows": 700, "cols": 333}, ["rows"])
CODE_ARGMIN = spec(r"""
// The first code of each row holding the row's smallest value, from codes of a handful of values (ties everywhere).
extern "C" __global__ void code_argmin(int *first_min, int *min_code, const int *codes, int rows, int cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int lowest = 2147483647, where = -1;
    for (int j = 0; j < cols; ++j) {
        const int code = codes[row * cols + j];
        if (lowest > code) {
            where = j;
            lowest = code;
        }
    }
    first_min[row] = where;
    min_code[row] = lowest;
}
""", "code_argmin", [array("first_min", ["rows"], "int32", "out"), array("min_code", ["rows"], "int32", "out"),
                     array("codes", ["rows", "cols"], "int32", range=[0, 4]), scalar("rows", "rows"),
                     scalar("cols", "cols")], {"rows": 700, "cols": 333}, ["rows"])
VARIANTS.update({"row_argmax": ("warp_per_row", ROW_ARGMAX), "code_argmin": ("warp_per_row", CODE_ARGMIN)})
NOT_OF_SHAPE.update({
    "an argmax keeping the last of equal values": ("warp_per_row", edited(ROW_ARGMAX, "if (v > best)", "if (v >= best)"),
                                                   "keeping the last of equal values"),
    "an argmax whose place the loop reads": ("warp_per_row", edited(
        ROW_ARGMAX, "if (v > best) { best = v; at = c; }", "if (v > best && at < c) { best = v; at = c; }"),
        "its loop assigns best `v`"),
    "a column argmax split among threads": ("split_columns", spec(r"""
extern "C" __global__ void column_argmax(int *out, const float *m, int rows, int cols)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < cols) {
        float best = m[j];
        int at = 0;
        for (int r = 1; r < rows; r++) {
            float v = m[(size_t)r * cols + j];
            if (v > best) { best = v; at = r; }
        }
        out[j] = at;
    }
}
""", "column_argmax", [array("out", ["cols"], "int32", "out"), array("m", ["rows", "cols"]), scalar("rows", "rows"),
                       scalar("cols", "cols")], {"rows": 4000, "cols": 64}, ["cols"]),
        "records where its maximum lies (at)"),
})

# A flag read in the guard before its bounds, the same element at every point (found by review, helper-86): every
# point evaluates it alike, so a march reads nothing new; after a conjunct of the indices it is not read alike.
SHADE_2D_ENABLED = with_args(edited(edited(
    SHADE_2D, "const float *gain, int h, int w)", "const float *gain, const int *enabled, int h, int w)"),
    "if (row < h && col < w)", "if (enabled[0] && row < h && col < w)"),
    [*SHADE_2D.model_dump()["args"][:3], array("enabled", [1], "int32", range=[1, 2]), *SHADE_2D.model_dump()["args"][3:]])
VARIANTS["shade_2d_enabled_flag_in_its_guard"] = ("elements_per_thread", SHADE_2D_ENABLED)
NOT_OF_SHAPE["a flag read in the guard after a conjunct of the indices"] = ("elements_per_thread", edited(
    SHADE_2D_ENABLED, "if (enabled[0] && row < h", "if (col > 2 && enabled[0] && row < h"),
    "enabled[0] is under no guard bounding row from above")

# An elementwise kernel reading a scalar the device holds before its guard (cuBLAS's device pointer mode): every
# thread reads it alike, and the rewrite reads it once per thread before its loop (found by review, helper-86).
VARIANTS["axpy_scalar_on_the_device"] = ("vectorize", spec(r"""
extern "C" __global__ void axpy_dev(float *y, const float *x, const float *alpha, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float a = alpha[0];  // the scale, where the device holds it
    if (i < n) y[i] = a * x[i] + y[i];
}
""", "axpy_dev", [array("y", ["n"], role="inout"), array("x", ["n"]), array("alpha", [1]), scalar("n", "n")],
    {"n": 5003}, ["n"], tune_params={"block_size_x": [64, 128, 256]}))
NOT_OF_SHAPE["a declaration before the guard reading the index"] = ("vectorize", edited(
    VARIANTS["axpy_scalar_on_the_device"][1], "const float a = alpha[0];", "const float a = alpha[i % 1];"),
    "its point body is not one guard")

# Found by review (helper-85, a CPU emulation with ASan): reductions that convert what they combine.
# An int total taking float steps: atomicAdd(int *, float) truncates each step, and the block's register must too.
VARIANTS["net_steps_truncated_into_an_int"] = ("hierarchical_reduction", spec(r"""
extern "C" __global__ void net_steps(int *net, const float *delta, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(net, delta[i] * 100.0f);
}
""", "net_steps", [array("net", [1], "int32", "out"), array("delta", ["n"], range=[-1, 1]), scalar("n", "n")],
    {"n": 1 << 20}, ["n"]))
WARP_SAMPLES = spec(r"""
extern "C" __global__ void sum_samples(unsigned long long *total, const int *samples, int n)
{
    int acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc += samples[i];
    for (int offset = 16; offset > 0; offset /= 2)
        acc += __shfl_down_sync(0xffffffff, acc, offset);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(total, (unsigned long long)(long long)acc);
}
""", "sum_samples", [array("total", [1], "uint64", "out"), array("samples", ["n"], "int32", range=[1 << 20, 1 << 21]),
                     scalar("n", "n")], {"n": 1 << 20}, ["n"], grid_div_x=["block_size_x", 4])
NOT_OF_SHAPE.update({
    "warp sums widened before their atomic": ("hierarchical_reduction", WARP_SAMPLES,
                                              "converts acc (int) to unsigned long long for each warp"),
    "warp sums of floats truncated into an int atomic": ("hierarchical_reduction", with_args(edited(edited(edited(
        WARP_SAMPLES, "unsigned long long *total, const int *samples", "int *total, const float *samples"),
        "int acc = 0;", "float acc = 0.0f;"), "(unsigned long long)(long long)acc", "(int)acc"),
        [array("total", [1], "int32", "out"), array("samples", ["n"], range=[0, 0.1]), scalar("n", "n")]),
        "converts acc (float) to int for each warp"),
    "a histogram's loop that returns": ("hierarchical_reduction", spec(r"""
extern "C" __global__ void keys_hist(unsigned int *hist, const int *keys, int n, int nbins)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        const int k = keys[i];
        if (k < 0) return;
        atomicAdd(&hist[k % nbins], 1u);
    }
}
""", "keys_hist", [array("hist", ["nbins"], "uint32", "out"), array("keys", ["n"], "int32", range=[-3, 1000]),
                   scalar("n", "n"), scalar("nbins", "nbins")], {"n": 1 << 20, "nbins": 64}, ["n"],
        grid_div_x=["block_size_x", 8]), "its loop uses return"),
    "a tree over a global array": ("shuffle_reduction", spec(r"""
extern "C" __global__ void finish_sum(int *partials)
{
    const int tid = threadIdx.x;
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) partials[tid] += partials[tid + s];
        __syncthreads();
    }
}
""", "finish_sum", [array("partials", [256], "int32", "inout", range=[0, 1000])], {}, [1], {"block_size_x": 256},
        grid_div_x=[]), "the kernel has no shared-memory tree reduction"),
})
VARIANTS["shade_2d_enabled_flag_in_its_guard_vectors"] = ("vectorize", SHADE_2D_ENABLED)
NOT_OF_SHAPE["vectors under a guard reading a mask at the point"] = ("vectorize", edited(
    SHADE_2D_ENABLED, "if (enabled[0] && row < h && col < w)", "if (enabled[row % 1] && row < h && col < w)"),
    "its guard reads an array other than at one element every point reads alike")

# Found by review of this session's changes (helper-87, a CPU emulation with ASan and an alignment check).
ROW_ARGMAX_ARGS = [array("out", ["rows"], "int32", "out"), array("val", ["rows"], "float32", "out"),
                   array("x", ["rows", "cols"]), scalar("rows", "rows"), scalar("cols", "cols")]
POSITIVE_TOTAL = spec(r"""
extern "C" __global__ void am(int *out, float *val, const float *x, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float total = 0.0f;
    int last = -1;
    for (int c = 0; c < cols; ++c) {
        const float v = x[r * cols + c];
        if (v > 0.0f) { total = total + v; last = c; }
    }
    out[r] = last;
    val[r] = total;
}
""", "am", ROW_ARGMAX_ARGS, {"rows": 300, "cols": 333}, ["rows"], {"block_size_x": 128})
GRID_NOISE = spec(r"""
extern "C" __global__ void noisy(float *out, const float *x, unsigned seed, int n)
{
    const int gid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned state = seed ^ (unsigned)gid;
    for (int i = gid; i < n; i += blockDim.x * gridDim.x) {
        state = state * 1664525u + 1013904223u;
        out[i] = x[i] + (float)(state >> 8) * 1e-7f;
    }
}
""", "noisy", [array("out", ["n"], role="out"), array("x", ["n"]), scalar("seed", 12345, "uint32"), scalar("n", "n")],
    {"n": 100000}, [4096], {"block_size_x": 256}, {"block_size_x": [128, 256]}, grid_div_x=["block_size_x"])
PROLOGUE_AXPY = VARIANTS["axpy_scalar_on_the_device"][1]
NOT_OF_SHAPE.update({
    "a place recorded beside a sum": ("warp_per_row", POSITIVE_TOTAL,
                                      "records last beside a value that is not a maximum or a minimum"),
    "an argmax keeping doubles in a float": ("warp_per_row", with_args(edited(edited(edited(edited(
        POSITIVE_TOTAL, "const float *x", "const double *x"), "float total = 0.0f;\n    int last = -1;",
        "float best = -1e30f;\n    int at = -1;"), "const float v = x[r * cols + c];\n        if (v > 0.0f) "
        "{ total = total + v; last = c; }", "const double v = x[r * cols + c];\n        if (v > best) "
        "{ best = v; at = c; }"), "out[r] = last;\n    val[r] = total;", "out[r] = at;\n    val[r] = best;"),
        [*ROW_ARGMAX_ARGS[:2], array("x", ["rows", "cols"], "float64"), *ROW_ARGMAX_ARGS[3:]]),
        "a value it may convert"),
    "an RNG state carried from element to element": ("vectorize_loops", GRID_NOISE,
                                                     "reads state, which it carries from element to element"),
    "a running sum stored at each element": ("vectorize_loops", spec(r"""
extern "C" __global__ void running(float *y, const float *x, int cols)
{
    const int row = blockIdx.x;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        acc += x[row * cols + c];
        y[row * cols + c] = acc;
    }
}
""", "running", [array("y", ["rows", "cols"], role="out"), array("x", ["rows", "cols"]), scalar("cols", "cols")],
        {"rows": 4, "cols": 1000}, ["rows"], {"block_size_x": 64}, {"block_size_x": [64, 128]}, grid_div_x=[]),
        "reads acc, which it carries from element to element"),
    "a thread's slot written in the loop": ("vectorize_loops", edited(edited(
        PARTIAL_SUMS, "    int acc = 0;\n", ""), "        acc += x[i];\n    partial[gid] = acc;",
        "        partial[gid] += x[i];").model_copy(update={"args": [
            a.model_copy(update={"role": "inout"}) if a.name == "partial" else a for a in PARTIAL_SUMS.args]}),
        "stores into partial at an element that does not move with i alone"),
    "a warp's output at a place a helper works out": ("vectorize_loops", spec(r"""
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int global_warp() { return (blockIdx.x * blockDim.x + threadIdx.x) >> 5; }
extern "C" __global__ void warp_sums(float *partial, const float *x, int n)
{
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) acc += x[i];
    for (int d = 16; d > 0; d /= 2) acc += __shfl_down_sync(0xffffffffu, acc, d);
    if (lane_id() == 0) partial[global_warp()] = acc;
}
""", "warp_sums", [array("partial", [64], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 10001}, [2048],
        {"block_size_x": 256}, {"block_size_x": [128, 256]}, grid_div_x=["block_size_x"]),
        "writes as its own result (partial[global_warp()])"),
    "conditional stores of a grid-stride loop shared by threads along y": ("vectorize_loops", spec(r"""
extern "C" __global__ void scale_by_lane_class(float *x, const int *label, const float *gain, int n)
{
    const int cls = threadIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        if (label[i] == cls) x[i] = x[i] * gain[cls];
}
""", "scale_by_lane_class", [array("x", ["n"], role="inout"), array("label", ["n"], "int32", range=[0, 4]),
                             array("gain", [4]), scalar("n", "n")], {"n": 10001}, [2048],
        {"block_size_x": 64, "block_size_y": 4}, grid_div_x=["block_size_x"]),
        "the block's threads) along y or z walk the same elements"),
    "a prologue local changed through a helper taking it by reference": ("elements_per_thread", edited(edited(edited(
        PROLOGUE_AXPY, "extern \"C\"", "__device__ void adjust(float &v, float d) { v += d; }\nextern \"C\""),
        "const float a = alpha[0];", "float a = alpha[0];"),
        "if (i < n) y[i] = a * x[i] + y[i];", "if (i < n) { adjust(a, x[i]); y[i] = a; }"),
        "may change its local a"),
    "a prologue local changed through a reference": ("elements_per_thread", edited(edited(
        PROLOGUE_AXPY, "const float a = alpha[0];", "float a = alpha[0];"),
        "if (i < n) y[i] = a * x[i] + y[i];", "if (i < n) { float &r = a; r = r + x[i]; y[i] = r; }"),
        "may change its local a"),
})
# An index local declared beside a local reading the written array (its whole part, an int): the vector must be
# loaded before its lanes run.
ROW_ADD_OLD = spec(r"""
extern "C" __global__ void row_add_old(float *y, const float *x, int cols)
{
    const int row = blockIdx.x;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int at = row * cols + c, old = y[at];
        y[at] = old + x[at];
    }
}
""", "row_add_old", [array("y", ["rows", "cols"], role="inout"), array("x", ["rows", "cols"]),
                     scalar("cols", "cols")], {"rows": 5, "cols": 1000}, ["rows"], {"block_size_x": 64},
    {"block_size_x": [32, 64]}, grid_div_x=[])
VARIANTS["row_add_old_beside_its_index"] = ("vectorize_loops", ROW_ADD_OLD)
# Taken since that review: a value local scaled in the store (`s * v`), and an element named by an index local and
# spelled out again in one loop.
VARIANTS["transpose_scaled_through_a_local"] = ("shared_tile", edited(
    TRANSPOSE_SCALED, "    dst[col * h + row] = s * src[row * w + col];",
    "    const float v = src[row * w + col];\n    dst[col * h + row] = s * v;"))
VARIANTS["gained_rows_index_local_and_its_spelling"] = ("vectorize_loops", edited(
    GAINED_ROWS_INDEX_LOCAL, "out[at] = in[at] * gain[c];", "out[at] = in[at] * gain[c] + in[row * cols + c];"))
# Sums by row: an atomic whose address names the point's y or z index (blockIdx.y alone where blocks are one thread
# deep there): the reduction runs along x, a block's threads adding into the same addresses, its blocks one thread
# deep along y and z.
BATCH_SUMS = spec(r"""
// The sum of each batch's row: a thread per element, its batch the block's y index.
extern "C" __global__ void batch_sums(float *sums, const float *x, int n)
{
    const int b = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&sums[b], x[b * n + i]);
}
""", "batch_sums", [array("sums", ["batch"], role="out"), array("x", ["batch", "n"]), scalar("n", "n")],
    {"n": 100003, "batch": 24}, ["n", "batch"], tune_params={"block_size_x": [128, 256]})
ROW_SUMS_2D_BLOCKS = spec(r"""
// Row sums of a matrix on a 2D grid of 2D blocks, each element added atomically into its row's sum.
__global__ void row_sums_2d(const float *a, float *rowsum, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        atomicAdd(&rowsum[row], a[row * cols + col]);
    }
}
""", "row_sums_2d", [array("a", ["rows", "cols"]), array("rowsum", ["rows"], role="out"), scalar("rows", "rows"),
                     scalar("cols", "cols")], {"rows": 301, "cols": 5003}, ["cols", "rows"],
    {"block_size_x": 32, "block_size_y": 8}, {"block_size_x": [32, 64], "block_size_y": [4, 8]})
CHANNEL_STATS = spec(r"""
// Batch-norm statistics of an NCHW tensor: a sum and a sum of squares per channel (blockIdx.y), images along z.
extern "C" __global__ void channel_stats(const float *__restrict__ x, float *sum, float *sumsq, int C, int HW)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int c = blockIdx.y;
    const int n = blockIdx.z;
    if (i >= HW) return;
    const float v = x[((size_t)n * C + c) * HW + i];
    atomicAdd(&sum[c], v);
    atomicAdd(&sumsq[c], v * v);
}
""", "channel_stats", [array("x", ["N", "C", "HW"]), array("sum", ["C"], role="out"),
                       array("sumsq", ["C"], role="out"), scalar("C", "C"), scalar("HW", "HW")],
    {"N": 6, "C": 40, "HW": 3136}, ["HW", "C", "N"])
POSITIVES_PER_BATCH = spec(r"""
// How many values of each batch pass a threshold, counted only where they do.
extern "C" __global__ void positives_per_batch(unsigned int *count, const float *x, float threshold, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (i < n && x[b * n + i] > threshold)
        atomicAdd(count + b, 1u);
}
""", "positives_per_batch", [array("count", ["batch"], "uint32", role="out"), array("x", ["batch", "n"]),
                             scalar("threshold", 0.5, "float32"), scalar("n", "n")], {"batch": 16, "n": 65537},
    ["n", "batch"])
ROW_PEAKS_BELOW = spec(r"""
// The largest code of each of the first `valid` rows; the rows past them are left as they were (and their peaks
// are not even allocated).
extern "C" __global__ void row_peaks(int *peak, const int *v, int width, int valid)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y;
    if (x < width && y < valid) atomicMax(&peak[y], v[y * width + x]);
}
""", "row_peaks", [array("peak", ["valid"], "int32", role="out"), array("v", ["height", "width"], "int32"),
                   scalar("width", "width"), scalar("valid", "valid")], {"height": 100, "width": 7777, "valid": 37},
    ["width", "height"])
VARIANTS.update({
    "batch_sums_by_block_row": ("hierarchical_reduction", BATCH_SUMS),
    "row_sums_of_2d_blocks_made_flat": ("hierarchical_reduction", ROW_SUMS_2D_BLOCKS),
    "channel_stats_of_nchw": ("hierarchical_reduction", CHANNEL_STATS),
    "positives_counted_per_batch": ("hierarchical_reduction", POSITIVES_PER_BATCH),
    "row_peaks_of_a_band_of_rows": ("hierarchical_reduction", ROW_PEAKS_BELOW),
})
NOT_OF_SHAPE.update({
    "row sums in blocks deeper than one row, under no guard bounding the row": ("hierarchical_reduction", edited(
        ROW_SUMS_2D_BLOCKS, "if (row < rows && col < cols) {", "if (col < cols) {"),
        "without one guard bounding row within the problem size"),
    "column sums by atomics, a thread per column's element": ("hierarchical_reduction", spec(r"""
extern "C" __global__ void column_sums(float *sums, const float *x, int cols)
{
    const int r = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) atomicAdd(&sums[c], x[r * cols + c]);
}
""", "column_sums", [array("sums", ["cols"], role="out"), array("x", ["rows", "cols"]), scalar("cols", "cols")],
        {"rows": 64, "cols": 4096}, ["cols", "rows"]),
        # not a sum by row (its address moves along x): the bins of a histogram, under no guard bounding r
        "its point body is not one guard bounding r"),
})
# Sums by column: an address naming the point's x index (and not every index): each thread marches along the
# slowest axis the address does not name and makes one atomic per address for its points.
BIAS_GRADIENT = spec(r"""
// The bias's gradient: each column's sum of the output gradient over the batch's rows, a thread per element.
extern "C" __global__ void bias_grad(float *db, const float *dy, int rows, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) atomicAdd(&db[c], dy[r * cols + c]);
}
""", "bias_grad", [array("db", ["cols"], role="out"), array("dy", ["rows", "cols"]), scalar("rows", "rows"),
                   scalar("cols", "cols")], {"rows": 2051, "cols": 999}, ["cols", "rows"],
    {"block_size_x": 32, "block_size_y": 8}, {"block_size_x": [32, 64], "block_size_y": [4, 8]})
COLUMN_LOWS = spec(r"""
// The smallest code of each column, an early return past the matrix's edge.
extern "C" __global__ void column_lows(int *low, const int *codes, int rows, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (c >= cols || r >= rows) return;
    atomicMin(&low[c], codes[r * cols + c]);
}
""", "column_lows", [array("low", ["cols"], "int32", role="inout"), array("codes", ["rows", "cols"], "int32"),
                     scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 1000, "cols": 515}, ["cols", "rows"],
    {"block_size_x": 64, "block_size_y": 4})
STACK_SUM = spec(r"""
// The sum of a stack of images, pixel by pixel, the images along z.
extern "C" __global__ void stack_sum(float *acc, const float *imgs, int w, int h, int count)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.z;
    if (x < w && y < h && n < count) atomicAdd(&acc[y * w + x], imgs[((size_t)n * h + y) * w + x]);
}
""", "stack_sum", [array("acc", ["h", "w"], role="out"), array("imgs", ["count", "h", "w"]), scalar("w", "w"),
                   scalar("h", "h"), scalar("count", "count")], {"w": 203, "h": 101, "count": 37},
    ["w", "h", "count"], {"block_size_x": 32, "block_size_y": 4})
VARIANTS.update({
    "bias_gradient_by_column": ("hierarchical_reduction", BIAS_GRADIENT),
    "column_lows_by_column": ("hierarchical_reduction", COLUMN_LOWS),
    "stack_sum_by_pixel": ("hierarchical_reduction", STACK_SUM),
})
NOT_OF_SHAPE.update({
    "a sum per pixel of a stack whose images are under no guard": ("hierarchical_reduction", edited(
        STACK_SUM, " && n < count)", ")"), "its point body is not one guard bounding n"),
    "an atomic at every point's own address": ("hierarchical_reduction", edited(
        STACK_SUM, "atomicAdd(&acc[y * w + x]", "atomicAdd(&acc[(n * h + y) * w + x]"),
        "which names every index of the point"),
})
# A block per channel along z, as its spec says (grid_div_z: []): read swapped and tiled alike (helper-88).
VARIANTS["planar_to_packed_a_block_per_channel"] = ("shared_tile", PLANAR_TO_PACKED.model_validate(
    {**PLANAR_TO_PACKED.model_dump(), "grid_div_z": []}))
# A window's radius given by a #define, and its width by arithmetic of it: constants, which batch_loads takes ahead
# like any number (helper-88: it refused every loop using a macro).
BOX_ROWS_BY_DEFINE = spec(r"""
#define R 2
#define WIDTH (2 * R + 1)
// The horizontal pass of a separable box blur; the borders are left as they were.
extern "C" __global__ void box_rows(float *dst, const float *src, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (y < h && x >= R && x < w - R) {
        float acc = 0.0f;
        for (int k = -R; k <= R; ++k)
            acc += src[y * w + x + k];
        dst[y * w + x] = acc / WIDTH;
    }
}
""", "box_rows", [array("dst", ["h", "w"], role="inout"), array("src", ["h", "w"]), scalar("w", "w"),
                  scalar("h", "h")], {"w": 1001, "h": 77}, ["w", "h"], BLOCK_2D, TUNE_2D)
VARIANTS["box_rows_radius_by_define_batched"] = ("batch_loads", BOX_ROWS_BY_DEFINE)
# Grid-stride loops on a grid the spec fixes (problem_size [1024] blocks, grid_div_x []): read as one point per
# thread launched over the loop's bound, which every grid reaches; and a batch's row given by blockIdx.y before the
# loop, read as the point's y index.
TOTAL_ON_A_FIXED_GRID = spec(r"""
// A total by a grid-stride loop of atomics, launched on 1,024 blocks whatever the length.
extern "C" __global__ void total_gs(float *total, const float *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(total, x[i]);
}
""", "total_gs", [array("total", [1], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 3000017}, [1024],
    grid_div_x=[])
SCALE_ON_A_FIXED_GRID = spec(r"""
// y = a x by a grid-stride loop, launched on 264 blocks (two per SM) whatever the length.
extern "C" __global__ void scale_gs(float *y, const float *x, float a, int n)
{
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = a * x[i];
}
""", "scale_gs", [array("y", ["n"], role="out"), array("x", ["n"]), scalar("a", 1.5, "float32"), scalar("n", "n")],
    {"n": 1000003}, [264], grid_div_x=[])
BATCH_NORMS_GRID_STRIDE = spec(r"""
// The squared norm of each batch's row: a grid-stride loop along the row, the batch the block's y index.
extern "C" __global__ void batch_norms(float *norms, const float *x, int n)
{
    const int b = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = x[(size_t)b * n + i];
        atomicAdd(&norms[b], v * v);
    }
}
""", "batch_norms", [array("norms", ["batch"], role="out"), array("x", ["batch", "n"]), scalar("n", "n")],
    {"n": 100003, "batch": 12}, [64, "batch"], grid_div_x=[])
VARIANTS.update({
    "total_of_a_grid_stride_loop_on_a_fixed_grid": ("hierarchical_reduction", TOTAL_ON_A_FIXED_GRID),
    "scale_grid_stride_on_a_fixed_grid_elements": ("elements_per_thread", SCALE_ON_A_FIXED_GRID),
    "scale_grid_stride_on_a_fixed_grid_vectors": ("vectorize", SCALE_ON_A_FIXED_GRID),
    "batch_norms_grid_stride_by_row": ("hierarchical_reduction", BATCH_NORMS_GRID_STRIDE),
})
NOT_OF_SHAPE["row sums of more rows than a grid of a block per row holds"] = ("hierarchical_reduction",
    ROW_SUMS_2D_BLOCKS.with_sizes({"rows": 70000, "cols": 64}), "would pass CUDA's 65535 blocks")
# Rows walked by a grid-stride loop on a grid of 64 threads the spec fixes: read launched over the rows
# (helper-89 found it refused, as not starting by defining its thread index).
VARIANTS["row_maxima_grid_stride_on_a_fixed_grid"] = ("warp_per_row", spec(r"""
// Row maxima, rows walked by a grid-stride loop of a fixed grid of 64 threads' worth.
extern "C" __global__ void row_max_gs(float *out, const float *a, int rows, int cols)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += blockDim.x * gridDim.x) {
        float m = -INFINITY;
        for (int c = 0; c < cols; ++c) m = fmaxf(m, a[r * cols + c]);
        out[r] = m;
    }
}
""", "row_max_gs", [array("out", ["rows"], role="out"), array("a", ["rows", "cols"]), scalar("rows", "rows"),
                    scalar("cols", "cols")], {"rows": 300, "cols": 45}, [64], {"block_size_x": 32},
    {"block_size_x": [32, 64]}))
# helper-90: a bias's gradient over a batch whose images along z are under no guard: its rows (guarded) are
# marched, the images left a point per thread; and row and column sums together, refused with its reason.
BIAS_GRADIENT_OVER_A_BATCH = spec(r"""
// A bias's gradient over a batch of sequences: each channel's sum over every image's steps, images along z.
extern "C" __global__ void bias_grad3(float *db, const float *dy, int T, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int t = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.z;
    if (c < C && t < T) atomicAdd(&db[c], dy[((size_t)n * T + t) * C + c]);
}
""", "bias_grad3", [array("db", ["C"], role="out"), array("dy", ["N", "T", "C"]), scalar("T", "T"),
                    scalar("C", "C")], {"N": 7, "T": 501, "C": 70}, ["C", "T", "N"],
    {"block_size_x": 32, "block_size_y": 4})
VARIANTS["bias_gradient_over_a_batch_marching_its_rows"] = ("hierarchical_reduction", BIAS_GRADIENT_OVER_A_BATCH)
NOT_OF_SHAPE["row and column sums at once"] = ("hierarchical_reduction", spec(r"""
// Row sums and column sums together.
extern "C" __global__ void margins(float *rs, float *cs, const float *a, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        const float v = a[r * cols + c];
        atomicAdd(&rs[r], v);
        atomicAdd(&cs[c], v);
    }
}
""", "margins", [array("rs", ["rows"], role="out"), array("cs", ["cols"], role="out"), array("a", ["rows", "cols"]),
                 scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 23, "cols": 50}, ["cols", "rows"],
    {"block_size_x": 32, "block_size_y": 4}), "name every index of the point between them")
# helper-90: a warp per row in blocks of one warp, its first thread storing the warp's sum: block_size would tune
# blocks of several warps, whose other warps' sums nobody stores. block_size refuses any kernel working across a
# warp (helper-92 found more spellings of the lane test, scans over the lanes and cooperative groups' tiles).
ROW_SUM_A_WARP_PER_BLOCK = spec(r"""
// Each row's sum by one warp per row (blocks of 32 threads), rows along the grid's y.
extern "C" __global__ void row_sum_warp(float *out, const float *x, int cols)
{
    const int row = blockIdx.y;
    float v = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += x[row * cols + c];
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) out[row] = v;
}
""", "row_sum_warp", [array("out", ["rows"], role="out"), array("x", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 64, "cols": 1000}, [1, "rows"], {"block_size_x": 32})
NOT_OF_SHAPE.update({
    "a warp's sum stored by the block's first thread, in blocks of one warp": (
        "block_size", ROW_SUM_A_WARP_PER_BLOCK, "the kernel works across a warp (__shfl_down_sync)"),
    "a warp's sum stored by the block's first thread through a local, in blocks of one warp": ("block_size", edited(
        edited(ROW_SUM_A_WARP_PER_BLOCK, "const int row = blockIdx.y;",
               "const int row = blockIdx.y;\n    const unsigned tid = threadIdx.x;"), "if (threadIdx.x == 0)",
        "if (!tid)"), "the kernel works across a warp (__shfl_down_sync)"),
})
# helper-91: an elementwise body trading values across the warp: a lane of a vector (or a thread's next element)
# would trade with another element than the submitted thread's neighbour.
PAIR_POWER = spec(r"""
// Each element's square plus its neighbour's, traded across the warp.
__global__ void pair_power(float *y, const float *x, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = x[i] * x[i];
        y[i] = v + __shfl_xor_sync(0xffffffffu, v, 1);
    }
}
""", "pair_power", [array("y", ["n"], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 4096}, [4],
    tune_params={"block_size_x": [64, 128, 256]}, grid_div_x=[])
NOT_OF_SHAPE.update({
    "an elementwise body trading across the warp, vectorised": ("vectorize", PAIR_POWER,
                                                                "its body uses __shfl_xor_sync"),
    "an elementwise body trading across the warp, marched": ("elements_per_thread", PAIR_POWER,
                                                             "its body uses __shfl_xor_sync"),
})
# A spec naming the x block size alone, its rows a block per index along y (grid_div_y: []): the default there.
VARIANTS["batch_norms_grid_stride_one_block_size_named"] = ("hierarchical_reduction",
                                                            BATCH_NORMS_GRID_STRIDE.model_validate({
                                                                **BATCH_NORMS_GRID_STRIDE.model_dump(),
                                                                "block_size_names": ["block_size_x"],
                                                                "grid_div_y": []}))
# A grid-stride loop stepping by a block-size define (`#define THREADS 256`): a constant, which the loop's reading
# takes (helper-91 found the point form refused any macro of the source in the body).
CHANNEL_SQUARES_GRID_STRIDE = spec(r"""
#ifndef THREADS
#define THREADS 256
#endif
// Each channel's sum of squares over a batch's images, a grid-stride loop along the channel's plane.
extern "C" __global__ void channel_squares(float *sq, const float *x, int channels, int hw)
{
    const int c = blockIdx.y;
    const int n = blockIdx.z;
    for (int i = blockIdx.x * THREADS + threadIdx.x; i < hw; i += THREADS * gridDim.x) {
        const float v = x[((size_t)n * channels + c) * hw + i];
        atomicAdd(&sq[c], v * v);
    }
}
""", "channel_squares", [array("sq", ["channels"], role="out"), array("x", ["images", "channels", "hw"]),
                         scalar("channels", "channels"), scalar("hw", "hw")],
    {"images": 4, "channels": 24, "hw": 3001}, [2, "channels", "images"], {"THREADS": 256}, {"THREADS": [128, 256]},
    grid_div_x=[], block_size_names=["THREADS"])
VARIANTS["channel_squares_grid_stride_by_a_define"] = ("hierarchical_reduction", CHANNEL_SQUARES_GRID_STRIDE)
# An address through a local of the row indices (`const int o = n * C + c;`), spelled out in the block's atomic
# (helper-90 found it refused as a histogram).
IMAGE_CHANNEL_MEANS = spec(r"""
// The mean of each image's channel (global average pooling), channel along y and image along z.
extern "C" __global__ void channel_means(float *mean, const float *x, int C, int HW)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int c = blockIdx.y;
    const int n = blockIdx.z;
    if (i < HW) {
        const int o = n * C + c;
        atomicAdd(&mean[o], x[(size_t)o * HW + i] / HW);
    }
}
""", "channel_means", [array("mean", ["N", "C"], role="out"), array("x", ["N", "C", "HW"]), scalar("C", "C"),
                       scalar("HW", "HW")], {"N": 4, "C": 30, "HW": 3136}, ["HW", "C", "N"])
VARIANTS["image_channel_means_through_an_index_local"] = ("hierarchical_reduction", IMAGE_CHANNEL_MEANS)
# helper-92: block_size on dynamic shared memory of a fixed size, and on a grid the spec fixes that the kernel does
# not stride over; the elementwise shape on a body using cooperative groups, __syncthreads_or, or a helper
# shuffling through a macro.
TOTAL_IN_FIXED_DYNAMIC_SHARED = spec(r"""
extern "C" __global__ void total_smem(float *total, const float *x, int n)
{
    extern __shared__ float s[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(total, s[0]);
}
""", "total_smem", [array("total", [1], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 1000}, ["n"],
    {"block_size_x": 128}, smem_args={"size": 512})
SCALE_ON_FOUR_BLOCKS = spec(r"""
extern "C" __global__ void scale(float *y, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
""", "scale", [array("y", ["n"], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 1000}, [4],
    {"block_size_x": 256}, grid_div_x=[])
ELEMENTWISE_TALKING = spec(r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(float *y, const float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i] * x[i];
        auto tile = cg::tiled_partition<32>(cg::this_thread_block());
        y[i] = v + tile.shfl_xor(v, 1);
    }
}
""", "k", [array("y", ["n"], role="out"), array("x", ["n"]), scalar("n", "n")], {"n": 4096}, ["n"],
    tune_params={"block_size_x": [64, 128, 256]})
NOT_OF_SHAPE.update({
    "block_size on dynamic shared memory of a fixed size": ("block_size", TOTAL_IN_FIXED_DYNAMIC_SHARED,
                                                            "dynamic shared memory is 512 bytes whatever"),
    "block_size on a grid the spec fixes, not strided over": ("block_size", SCALE_ON_FOUR_BLOCKS,
                                                              "its grid along x is fixed"),
    "an elementwise body shuffling through a cooperative group's tile": ("vectorize", ELEMENTWISE_TALKING,
                                                                        "its body uses tiled_partition"),
    "an elementwise body voting through __syncthreads_or": ("elements_per_thread", edited(
        ELEMENTWISE_TALKING, "        auto tile = cg::tiled_partition<32>(cg::this_thread_block());\n"
        "        y[i] = v + tile.shfl_xor(v, 1);", "        y[i] = v + (float)__syncthreads_or(x[i] > 2.0f);"),
        "its body uses __syncthreads_or"),
    "an elementwise body calling a helper that shuffles through a macro": ("vectorize", edited(edited(
        ELEMENTWISE_TALKING, "namespace cg = cooperative_groups;",
        "namespace cg = cooperative_groups;\n#define SH(v) __shfl_xor_sync(0xffffffffu, v, 1)\n"
        "__device__ float twice(float v) { return v + SH(v); }"),
        "        auto tile = cg::tiled_partition<32>(cg::this_thread_block());\n"
        "        y[i] = v + tile.shfl_xor(v, 1);", "        y[i] = twice(v);"), "calls twice, which uses SH"),
})
# The block's y index read in the body itself, the spec naming the x block size alone (review, helper-93): it is
# the point's y index, read through a local canonical.py declares beside the thread's index.
ROW_SUMS_BY_BLOCK_INDEX = spec(r"""
__global__ void row_atomic(float *rowsum, const float *m, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) atomicAdd(&rowsum[blockIdx.y], m[blockIdx.y * cols + c]);
}
""", "row_atomic", [array("rowsum", ["rows"], role="out"), array("m", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 37, "cols": 5001}, ["cols", "rows"], tune_params={"block_size_x": [128, 256]})
SCALE_ROWS_BY_BLOCK_INDEX = spec(r"""
__global__ void scale_rows(float *out, const float *in, const float *gain, int w)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;  // the column; the row is blockIdx.y
    if (x >= w) return;
    out[blockIdx.y * w + x] = in[blockIdx.y * w + x] * gain[blockIdx.y];
}
""", "scale_rows", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), array("gain", ["h"]),
                    scalar("w", "w")], {"h": 33, "w": 4099}, ["w", "h"], tune_params={"block_size_x": [128, 256]})
VARIANTS.update({"row_sums_by_the_block_index_itself": ("hierarchical_reduction", ROW_SUMS_BY_BLOCK_INDEX),
                 "rows_scaled_by_the_block_index_itself": ("vectorize", SCALE_ROWS_BY_BLOCK_INDEX)})
# Accumulators of a template's type, the kernel named as an instance (review, helper-93: `T acc` was not read as a
# double or an integer).
ROW_DOT_TEMPLATE = spec(r"""
template <typename T, int SCALE>
__global__ void row_dot(T *y, const T *a, const T *x, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        T acc = 0;
        for (int c = 0; c < cols; ++c) acc += a[(size_t)r * cols + c] * x[c];
        y[r] = acc * SCALE;
    }
}
""", "row_dot<double, 2>", [array("y", ["rows"], "float64", role="out"), array("a", ["rows", "cols"], "float64"),
                            array("x", ["cols"], "float64"), scalar("rows", "rows"), scalar("cols", "cols")],
    {"rows": 333, "cols": 517}, ["rows"], tune_params={"block_size_x": [64, 128]})
COLUMN_SUMS_TEMPLATE = spec(r"""
template <class Acc, class In>
__global__ void column_sums(Acc *sums, const In *m, int rows, int cols)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < cols) {
        Acc total = 0;
        for (int r = 0; r < rows; r++) total += m[r * cols + c];
        sums[c] = total;
    }
}
""", "column_sums<long long, int>", [array("sums", ["cols"], "int64", role="out"), array("m", ["rows", "cols"], "int32"),
                                     scalar("rows", "rows"), scalar("cols", "cols")],
    {"rows": 1025, "cols": 999}, ["cols"], tune_params={"block_size_x": [64, 128]})
SPLIT_COLUMNS["column_sums_of_a_template_instance"] = COLUMN_SUMS_TEMPLATE
VARIANTS.update({"row_dot_of_a_template_instance": ("warp_per_row", ROW_DOT_TEMPLATE),
                 "split_column_sums_of_a_template_instance": ("split_columns", COLUMN_SUMS_TEMPLATE)})
# An unsigned index bounded as `x + 1 < w`, which cannot wrap below zero where w - 1 would (review, helper-93):
# canonical.py reads it as `w >= 1 && x < w - 1`.
GRADIENT_UNSIGNED = spec(r"""
__global__ void gradient(float *gx, float *gy, const float *img, unsigned int w, unsigned int h)
{
    unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && y >= 1 && x + 1 < w && y + 1 < h) {
        unsigned int i = y * w + x;
        gx[i] = 0.5f * (img[i + 1] - img[i - 1]);
        gy[i] = 0.5f * (img[i + w] - img[i - w]);
    }
}
""", "gradient", [array("gx", ["h", "w"], role="inout"), array("gy", ["h", "w"], role="inout"), array("img", ["h", "w"]),
                  scalar("w", "w", "uint32"), scalar("h", "h", "uint32")], {"w": 1600, "h": 900}, ["w", "h"],
    {"block_size_x": 32, "block_size_y": 8}, {"block_size_x": [32, 64], "block_size_y": [2, 4, 8]})
VARIANTS.update({"gradient_bounded_by_x_plus_one": ("register_blocking", GRADIENT_UNSIGNED),
                 "gradient_bounded_by_x_plus_one_vectors": ("vectorize", GRADIENT_UNSIGNED)})
# The same launched with a grid divided by 1 along y and z, spelled out (review, helper-95): a block per index too.
VARIANTS["bias_relu_nchw_grid_divided_by_one"] = ("vectorize", BIAS_RELU_NCHW.model_validate({
    **BIAS_RELU_NCHW.model_dump(), "grid_div_y": [1], "grid_div_z": ["1"]}))
# 1D kernels the elementwise reading refuses, reading around their point or under a lower bound: a stencil, a
# difference, an upwind step of an unsigned index, a tail scaled in place, pairs summed from a strided input.
# vectorize takes them as one row (point_vectors.py), and with elements_per_thread a thread takes that many
# vectors a block apart.
ONE_D = {
    "three_point_smooth": spec(r"""
extern "C" __global__ void smooth3(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1)
        out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}
""", "smooth3", [array("in", ["n"]), array("out", ["n"], role="inout"), scalar("n", "n")], {"n": 100003}, ["n"],
        tune_params={"block_size_x": [64, 128, 256]}),
    "forward_difference": spec(r"""
__global__ void forward_difference(const float* __restrict__ x, float* __restrict__ dx, int n)
{
    const int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i >= n - 1) return;
    dx[i] = x[i + 1] - x[i];
}
""", "forward_difference", [array("x", ["n"]), array("dx", ["n"], role="inout"), scalar("n", "n")], {"n": 65537},
        ["n"]),
    "upwind_unsigned": spec(r"""
extern "C" __global__ void upwind(float *u_next, const float *u, float courant, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0 || i >= n) return;
    u_next[i] = u[i] - courant * (u[i] - u[i - 1]);
}
""", "upwind", [array("u_next", ["n"], role="inout"), array("u", ["n"]), scalar("courant", 0.4, "float32"),
                scalar("n", "n", "uint32")], {"n": 50001}, ["n"]),
    "tail_scaled_in_place": spec(r"""
extern "C" __global__ void scale_tail(float *x, float factor, int start, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= start && i < n) x[i] *= factor;
}
""", "scale_tail", [array("x", ["n"], role="inout"), scalar("factor", 1.5, "float32"), scalar("start", 7),
                    scalar("n", "n")], {"n": 40009}, ["n"]),
    # a window walked by a loop over constant offsets, read unrolled (unrolled.py)
    "window_loop": spec(r"""
#define R 3
extern "C" __global__ void blur1d(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < R || i >= n - R) return;
    float s = 0.0f;
    for (int k = -R; k <= R; ++k) s += in[i + k];  // the window
    out[i] = s / (2 * R + 1);
}
""", "blur1d", [array("in", ["n"]), array("out", ["n"], role="inout"), scalar("n", "n")], {"n": 100003}, ["n"]),
    "pairs_summed": spec(r"""
extern "C" __global__ void pair_sums(const int *in, int *out, int pairs)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pairs) out[i] = in[2 * i] + in[2 * i + 1];
}
""", "pair_sums", [array("in", ["2 * pairs"], "int32"), array("out", ["pairs"], "int32", role="out"),
                   scalar("pairs", "pairs")], {"pairs": 30011}, ["pairs"]),
}
VARIANTS.update({f"one_d_{case}_vectors": ("vectorize", variant) for case, variant in ONE_D.items()})
# Thread indices defined with an offset into an interior, its first point skipped (`+ 1`): canonical.py reads the
# thread's point and the guard's bounds of it, so the stencils take register_blocking and the 1D kernel
# elements_per_thread. Their stores lie an element past the thread's first point, which vectors refuse.
INTERIOR_OFFSET = {
    "jacobi_2d": spec(r"""
extern "C" __global__ void jacobi_interior(const float *u, float *v, int nx, int ny)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x + 1;
    int y = blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (x < nx - 1 && y < ny - 1)
        v[y * nx + x] = 0.25f * (u[y * nx + x - 1] + u[y * nx + x + 1] + u[(y - 1) * nx + x] + u[(y + 1) * nx + x]);
}
""", "jacobi_interior", [array("u", ["ny", "nx"]), array("v", ["ny", "nx"], role="inout"), scalar("nx", "nx"),
                         scalar("ny", "ny")], {"nx": 515, "ny": 259}, ["nx", "ny"],
        {"block_size_x": 32, "block_size_y": 4}, {"block_size_x": [32, 64], "block_size_y": [2, 4, 8]}),
    "heat_3d_unsigned": spec(r"""
__global__ void heat_interior(float *out, const float *in, unsigned int nx, unsigned int ny, unsigned int nz)
{
    const unsigned int i = 1 + blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int j = 1 + blockIdx.y * blockDim.y + threadIdx.y;
    const unsigned int k = 1 + blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= nx - 1 || j >= ny - 1 || k >= nz - 1) return;
    const unsigned int c = (k * ny + j) * nx + i;
    out[c] = in[c] + 0.1f * (in[c - 1] + in[c + 1] + in[c - nx] + in[c + nx] + in[c - nx * ny] + in[c + nx * ny]
                             - 6.0f * in[c]);
}
""", "heat_interior", [array("out", ["nz", "ny", "nx"], role="inout"), array("in", ["nz", "ny", "nx"]),
                       scalar("nx", "nx", "uint32"), scalar("ny", "ny", "uint32"), scalar("nz", "nz", "uint32")],
        {"nx": 67, "ny": 33, "nz": 19}, ["nx", "ny", "nz"], {"block_size_x": 32, "block_size_y": 4, "block_size_z": 2},
        {"block_size_x": [32, 64], "block_size_y": [2, 4], "block_size_z": [1, 2]}),
    "smooth_1d": spec(r"""
extern "C" __global__ void smooth_interior(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x + 1;
    if (i < n - 1) out[i] = 0.5f * (in[i - 1] + in[i + 1]);
}
""", "smooth_interior", [array("in", ["n"]), array("out", ["n"], role="inout"), scalar("n", "n")], {"n": 70001},
        ["n"]),
}
VARIANTS.update({"interior_offset_jacobi_2d": ("register_blocking", INTERIOR_OFFSET["jacobi_2d"]),
                 "interior_offset_heat_3d_unsigned": ("register_blocking", INTERIOR_OFFSET["heat_3d_unsigned"]),
                 "interior_offset_smooth_1d": ("elements_per_thread", INTERIOR_OFFSET["smooth_1d"])})
# A batch taken from blockIdx.z beside the x index, y launched one block of one thread (problem size [n, 1, B], as
# Kernel Tuner users launch batches along z): axis_order.z_as_y reads it as the 2D kernel of x and the batch.
BATCH_ALONG_Z = spec(r"""
extern "C" __global__ void add_row_bias(const float *a, const float *bias, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int batch = blockIdx.z;
    if (i < n) c[batch * n + i] = a[batch * n + i] + bias[i];
}
""", "add_row_bias", [array("a", ["batches", "n"]), array("bias", ["n"]), array("c", ["batches", "n"], role="out"),
                      scalar("n", "n")], {"n": 4099, "batches": 6}, ["n", 1, "batches"],
    tune_params={"block_size_x": [64, 128, 256]}, grid_div_y=[], grid_div_z=[])
VARIANTS["batch_along_z_vectors"] = ("vectorize", BATCH_ALONG_Z)
# A block's shared-memory tree sum handed to one atomic (block_trees.py reads it as the accumulation it computes):
# unsigned counts, the load as an if with an else, the thread's index through a local, `0 == t`.
BLOCK_TREE_COUNT = spec(r"""
#define THREADS 128
extern "C" __global__ void count_odd(const int *v, unsigned int *count, unsigned int n)
{
    __shared__ unsigned int partial[THREADS];
    const unsigned int t = threadIdx.x;
    const unsigned int i = blockIdx.x * blockDim.x + t;
    if (i < n) partial[t] = v[i] & 1; else partial[t] = 0;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) partial[t] += partial[t + s];
        __syncthreads();
    }
    if (0 == t) atomicAdd(count, partial[0]);
}
""", "count_odd", [array("v", ["n"], "int32"), array("count", [1], "uint32", role="out"), scalar("n", "n", "uint32")],
    {"n": 1 << 20}, ["n"], {"block_size_x": 128}, {"block_size_x": [32, 64, 128]})
VARIANTS["block_tree_count"] = ("hierarchical_reduction", BLOCK_TREE_COUNT)
# The classic reduction with sequential addressing in dynamic shared memory (its size given at launch), the block's
# sum handed to one atomic.
BLOCK_TREE_DYNAMIC = spec(r"""
extern "C" __global__ void reduce_atomic(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? g_idata[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(g_odata, sdata[0]);
}
""", "reduce_atomic", [array("g_idata", ["n"]), array("g_odata", [1], role="out"), scalar("n", "n", "uint32")],
    {"n": 1 << 20}, ["n"], {"block_size_x": 256}, {"block_size_x": [128, 256, 512]},
    smem_args={"size": "block_size_x * 4"})
VARIANTS["block_tree_dynamic"] = ("hierarchical_reduction", BLOCK_TREE_DYNAMIC)
# A mean squared error: each thread's square computed in a block with a local of its own, the block's sum scaled
# by 1/n as it is added.
BLOCK_TREE_MSE = spec(r"""
#define BLOCK 256
extern "C" __global__ void mse(const float *a, const float *b, float *out, int n, float inv_n)
{
    __shared__ float cache[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    float d = 0.0f;
    if (i < n) {
        float e = a[i] - b[i];
        d = e * e;
    }
    cache[tid] = d;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, cache[0] * inv_n);
}
""", "mse", [array("a", ["n"]), array("b", ["n"]), array("out", [1], role="out"), scalar("n", "n"),
             scalar("inv_n", 1.0 / (1 << 20), "float32")], {"n": 1 << 20}, ["n"], {"block_size_x": 256},
    {"block_size_x": [64, 128, 256]})
VARIANTS["block_tree_mse"] = ("hierarchical_reduction", BLOCK_TREE_MSE)
# Harris's first two reductions: trees doubling their stride, by interleaved addressing (REDUCE_INTERLEAVED, one
# partial sum per block); and by a strided index (`index = 2 * s * tid`), the block's sum handed to one atomic.
HARRIS_STRIDED_ATOMIC = BLOCK_TREE_DYNAMIC.model_validate({
    **BLOCK_TREE_DYNAMIC.model_dump(), "kernel_name": "reduce1", "source": BLOCK_TREE_DYNAMIC.source.replace(
        "void reduce_atomic(", "void reduce1(").replace(
        "for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {\n        if (tid < s) sdata[tid] += sdata[tid + s];",
        "for (unsigned int s = 1; s < blockDim.x; s <<= 1) {\n        int index = 2 * s * tid;\n"
        "        if (index < blockDim.x) sdata[index] += sdata[index + s];")})
VARIANTS.update({"harris_interleaved": ("shuffle_reduction", REDUCE_INTERLEAVED),
                 "harris_strided_atomic": ("hierarchical_reduction", HARRIS_STRIDED_ATOMIC)})
# A sum of squares, each thread's value put in the array through a local (size_t indices).
BLOCK_TREE_SQUARES = spec(r"""
__global__ void sum_squares_tree(const float *__restrict__ x, float *__restrict__ result, size_t n)
{
    __shared__ float buf[512];
    const size_t gid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    float sq = 0.0f;
    if (gid < n) {
        sq = x[gid] * x[gid];
    }
    buf[threadIdx.x] = sq;
    __syncthreads();
    for (int half = blockDim.x >> 1; half >= 1; half = half >> 1) {
        if (threadIdx.x < half) buf[threadIdx.x] = buf[threadIdx.x] + buf[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(result, buf[0]);
}
""", "sum_squares_tree", [array("x", ["n"]), array("result", [1], role="out"), scalar("n", "n", "uint64")],
    {"n": 3000017}, ["n"], {"block_size_x": 256}, {"block_size_x": [128, 256, 512]})
VARIANTS["block_tree_squares"] = ("hierarchical_reduction", BLOCK_TREE_SQUARES)
# Doubles take vectors of two 8-byte lanes (elementwise.py, point_vectors.py).
VARIANTS.update({"daxpy_vectors": ("vectorize", DAXPY), "laplace_3d_double_vectors": ("vectorize", LAPLACE_3D_DOUBLE)})
# Rows strided along y by blockIdx.y (blocks one thread deep there) under a column's guard, an early return on the
# x index (grid_stride.py reads it as the points of the box, the guard kept): the launch fixes 7 block rows.
ROWS_STRIDED_ALONG_Y = spec(r"""
__global__ void add_bias_rows(float *out, const float *in, const float *bias, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        out[r * cols + c] = in[r * cols + c] + bias[c];
}
""", "add_bias_rows", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]), array("bias", ["cols"]),
                       scalar("rows", "rows"), scalar("cols", "cols")], {"rows": 45, "cols": 1001}, ["cols", 7],
    tune_params={"block_size_x": [64, 128, 256]}, grid_div_y=[])
VARIANTS["rows_strided_along_y_under_a_column_guard"] = ("vectorize", ROWS_STRIDED_ALONG_Y)
# The same, the column's bias loaded once before its rows (each point loads it again).
ROWS_STRIDED_WITH_A_VALUE_BEFORE = edited(
    ROWS_STRIDED_ALONG_Y, "    for (int r = blockIdx.y; r < rows; r += gridDim.y)\n        out[r * cols + c] = "
    "in[r * cols + c] + bias[c];", "    const float b = bias[c];\n    for (int r = blockIdx.y; r < rows; r += gridDim.y)\n"
    "        out[r * cols + c] = in[r * cols + c] + b;")
VARIANTS["rows_strided_with_a_value_loaded_before"] = ("vectorize", ROWS_STRIDED_WITH_A_VALUE_BEFORE)
# A grid-stride sum handed to a block's shared-memory tree (block_trees.py reads each thread's value handed to the
# atomic): the tree spelled as a for loop, and as CUDA by Example's dot product spells it, a while loop on `i != 0`,
# on a fixed grid of 32 blocks.
DOT_BY_EXAMPLE = spec(r"""
#define THREADS_PER_BLOCK 256
__global__ void dot(const float *a, const float *b, float *c, int N)
{
    __shared__ float cache[THREADS_PER_BLOCK];
    int tid = threadIdx.x + blockIdx.x * blockDim.x;
    int cacheIndex = threadIdx.x;
    float temp = 0;
    while (tid < N) {
        temp += a[tid] * b[tid];
        tid += blockDim.x * gridDim.x;
    }
    cache[cacheIndex] = temp;
    __syncthreads();
    int i = blockDim.x / 2;
    while (i != 0) {
        if (cacheIndex < i)
            cache[cacheIndex] += cache[cacheIndex + i];
        __syncthreads();
        i /= 2;
    }
    if (cacheIndex == 0)
        atomicAdd(c, cache[0]);
}
""", "dot", [array("a", ["N"]), array("b", ["N"]), array("c", [1], role="out"), scalar("N", "N")], {"N": 33 * 1024},
    [32], {"block_size_x": 256}, {"block_size_x": [64, 128, 256]}, grid_div_x=[])
VARIANTS.update({"weighted_sum_block_tree": ("hierarchical_reduction", WEIGHTED_SUM),
                 "dot_by_example": ("hierarchical_reduction", DOT_BY_EXAMPLE)})
# The horizontal pass of a separable box blur, its window loop read unrolled: a stencil along rows, which vectors take.
VARIANTS["box_rows_unrolled_vectors"] = ("vectorize", BOX_ROWS_BY_DEFINE)

# Zero-padded windows ("same" convolutions): the window loops skip, or add nothing for, the offsets outside the
# image, as users write them; and windows clamped to the image's edges. register_window's registers serve a patch
# whose whole window lies inside.
CONV_SAME = spec(r"""
// A "same" 2D convolution, zero padded: out has the image's size, and taps outside the image add nothing.
extern "C" __global__ void conv_same(const float *in, const float *filt, float *out, int H, int W, int K)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    int R = K / 2;
    float sum = 0.0f;
    for (int i = 0; i < K; i++) {
        for (int j = 0; j < K; j++) {
            int iy = y + i - R;
            int ix = x + j - R;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                sum += in[iy * W + ix] * filt[i * K + j];
        }
    }
    out[y * W + x] = sum;
}
""", "conv_same", [array("in", ["H", "W"]), array("filt", ["K", "K"]), array("out", ["H", "W"], role="out"),
                   scalar("H", "H"), scalar("W", "W"), scalar("K", "K")], {"H": 300, "W": 400, "K": 5}, ["W", "H"],
                 BLOCK_2D, TUNE_2D)
BLUR_SKIPPING_EDGES = spec(r"""
// A 5x5 box blur over the image's own pixels: rows and columns outside the image are skipped.
#define RADIUS 2
extern "C" __global__ void blur_skipping_edges(const float *src, float *dst, int h, int w)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < w && row < h) {
        float acc = 0.0f;
        for (int dy = -RADIUS; dy <= RADIUS; ++dy) {
            const int yy = row + dy;
            if (yy < 0 || yy >= h) continue;
            #pragma unroll
            for (int dx = -RADIUS; dx <= RADIUS; ++dx) {
                const int xx = col + dx;
                if (xx < 0 || xx >= w) continue;
                acc += src[yy * w + xx];
            }
        }
        dst[row * w + col] = acc * (1.0f / ((2 * RADIUS + 1) * (2 * RADIUS + 1)));
    }
}
""", "blur_skipping_edges", [array("src", ["h", "w"]), array("dst", ["h", "w"], role="out"), scalar("h", "h"),
                             scalar("w", "w")], {"h": 250, "w": 400}, ["w", "h"], BLOCK_2D, TUNE_2D)
GAUSS_TERNARY = spec(r"""
// A 5x5 Gaussian from constant memory; a tap outside the image reads as zero through a ternary.
#define KSIZE 5
#define HALF (KSIZE / 2)
__constant__ float c_gauss[KSIZE * KSIZE];

extern "C" __global__ void gauss_ternary(float *out, const float *img, int width, int height)
{
    const int px = blockIdx.x * blockDim.x + threadIdx.x;
    const int py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px < width && py < height) {
        float value = 0.0f;
        for (int ky = 0; ky < KSIZE; ++ky)
            for (int kx = 0; kx < KSIZE; ++kx)
                value += (py + ky - HALF >= 0 && py + ky - HALF < height && px + kx - HALF >= 0 &&
                          px + kx - HALF < width) ? img[(py + ky - HALF) * width + px + kx - HALF] *
                                                    c_gauss[ky * KSIZE + kx] : 0.0f;
        out[py * width + px] = value;
    }
}
""", "gauss_ternary", [array("out", ["height", "width"], role="out"), array("img", ["height", "width"]),
                       scalar("width", "width"), scalar("height", "height"), array("c_gauss", [25], role="constant")],
                     {"width": 400, "height": 250}, ["width", "height"], BLOCK_2D, TUNE_2D)
SHARPEN_DOUBLE = spec(r"""
// A 3x3 filter in double precision on a pitched image: each tap loads through __ldg into a local, zero outside.
extern "C" __global__ void sharpen_double(double *out, const double *__restrict__ in, const double *__restrict__ taps,
                                          int rows, int cols, int pitch)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= rows || c >= cols) return;
    double acc = 0.0;
    for (int a = -1; a <= 1; a++) {
        for (int b = -1; b <= 1; b++) {
            const int rr = r + a, cc = c + b;
            const double v = (rr >= 0 && rr < rows && cc >= 0 && cc < cols) ? __ldg(&in[rr * pitch + cc]) : 0.0;
            acc += v * taps[(a + 1) * 3 + b + 1];
        }
    }
    out[r * pitch + c] = acc;
}
""", "sharpen_double", [array("out", ["rows", "pitch"], "float64", "out"), array("in", ["rows", "pitch"], "float64"),
                        array("taps", [9], "float64"), scalar("rows", "rows"), scalar("cols", "cols"),
                        scalar("pitch", "pitch")], {"rows": 200, "cols": 300, "pitch": 304}, ["cols", "rows"],
                      BLOCK_2D, TUNE_2D)
EMBOSS_ROW_GUARD = spec(r"""
// A 3x5 emboss: a row outside the image is skipped by a guard around the inner loop; a column reads as zero.
extern "C" __global__ void emboss_row_guard(float *dst, const float *src, const float *k, int w, int h)
{
    int x = threadIdx.x + blockIdx.x * blockDim.x;
    int y = threadIdx.y + blockIdx.y * blockDim.y;
    if (x < w && y < h) {
        float s = 0.0f;
        for (int i = -1; i <= 1; i++) {
            int yy = y + i;
            if (yy >= 0 && yy <= h - 1) {
                for (int j = -2; j <= 2; j++) {
                    int xx = x + j;
                    s += (xx >= 0 && xx < w ? src[yy * w + xx] : 0.0f) * k[(i + 1) * 5 + j + 2];
                }
            }
        }
        dst[y * w + x] = 128.0f + s;
    }
}
""", "emboss_row_guard", [array("dst", ["h", "w"], role="out"), array("src", ["h", "w"]), array("k", [15]),
                          scalar("w", "w"), scalar("h", "h")], {"w": 400, "h": 250}, ["w", "h"], BLOCK_2D, TUNE_2D)
SMOOTH_CLAMPED = spec(r"""
// A 3x3 smoothing with replicated borders: a neighbour past an edge reads the edge's pixel.
extern "C" __global__ void smooth_clamped(const float *in, float *out, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        float s = 0.0f;
        for (int dy = -1; dy <= 1; dy++) {
            int sy = min(max(y + dy, 0), height - 1);
            for (int dx = -1; dx <= 1; dx++) {
                int sx = x + dx < 0 ? 0 : (x + dx > width - 1 ? width - 1 : x + dx);
                s += in[sy * width + sx];
            }
        }
        out[y * width + x] = s / 9.0f;
    }
}
""", "smooth_clamped", [array("in", ["height", "width"]), array("out", ["height", "width"], role="out"),
                        scalar("width", "width"), scalar("height", "height")], {"width": 400, "height": 250},
                      ["width", "height"], BLOCK_2D, TUNE_2D)
CONV_RADIUS = spec(r"""
// A zero-padded convolution whose loops run from -r to r, r a local of the filter's size k.
extern "C" __global__ void conv_radius(float *out, const float *in, const float *filt, int w, int h, int k)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const int r = k / 2;
    float acc = 0.0f;
    for (int dy = -r; dy <= r; dy++) {
        for (int dx = -r; dx <= r; dx++) {
            int yy = y + dy, xx = x + dx;
            if (yy >= 0 && yy < h && xx >= 0 && xx < w)
                acc += in[yy * w + xx] * filt[(dy + r) * k + (dx + r)];
        }
    }
    out[y * w + x] = acc;
}
""", "conv_radius", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), array("filt", ["k", "k"]),
                     scalar("w", "w"), scalar("h", "h"), scalar("k", "k")], {"w": 400, "h": 250, "k": 5}, ["w", "h"],
                   BLOCK_2D, TUNE_2D)
CLAMPED_BY_ASSIGNMENT = spec(r"""
// A 5x5 filter with replicated borders, each coordinate clamped by assignments; a tap loaded under a guard.
extern "C" __global__ void clamp_assigned(float *out, const float *in, const float *filt, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float sum = 0.0f;
    for (int dy = -2; dy <= 2; dy++) {
        for (int dx = -2; dx <= 2; dx++) {
            int r = y + dy, c = x + dx;
            if (r < 0) r = 0;
            if (r >= h) r = h - 1;
            c = max(0, min(c, w - 1));
            float v = 0.0f;
            if (c >= 0) v = in[r * w + c];
            sum += v * filt[(dy + 2) * 5 + dx + 2];
        }
    }
    out[y * w + x] = sum;
}
""", "clamp_assigned", [array("out", ["h", "w"], role="out"), array("in", ["h", "w"]), array("filt", [25]),
                        scalar("w", "w"), scalar("h", "h")], {"w": 400, "h": 250}, ["w", "h"], BLOCK_2D, TUNE_2D)
# Means over the taps inside the image: a count of them kept beside the sum, the border's points divided by fewer.
MEAN_OF_VALID = spec(r"""
// A 5x5 mean filter that averages only the pixels inside the image.
extern "C" __global__ void mean_valid(const float *in, float *out, int width, int height, int radius)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    float sum = 0.0f;
    int count = 0;
    for (int dy = -radius; dy <= radius; dy++) {
        for (int dx = -radius; dx <= radius; dx++) {
            int nx = x + dx, ny = y + dy;
            if (nx >= 0 && nx < width && ny >= 0 && ny < height) {
                sum += in[ny * width + nx];
                count++;
            }
        }
    }
    out[y * width + x] = sum / count;
}
""", "mean_valid", [array("in", ["height", "width"]), array("out", ["height", "width"], role="out"),
                    scalar("width", "width"), scalar("height", "height"), scalar("radius", "radius")],
                     {"width": 333, "height": 130, "radius": 2}, ["width", "height"], BLOCK_2D, TUNE_2D)
WEIGHTS_OF_VALID = spec(r"""
// A normalised 3x3 weighted blur: taps outside the image are skipped, and the weights of those inside renormalise.
extern "C" __global__ void weights_valid(const float *src, const float *w, float *dst, int W, int H)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < W && row < H) {
        float acc = 0.0f;
        float taps = 0.0f;
        for (int i = 0; i < 3; ++i) {
            const int r = row + i - 1;
            if (r < 0 || r >= H) continue;
            for (int j = 0; j < 3; ++j) {
                const int c = col + j - 1;
                if (c < 0 || c >= W) continue;
                taps += 1.0f;
                acc += w[i * 3 + j] * src[r * W + c];
            }
        }
        dst[row * W + col] = acc / taps;
    }
}
""", "weights_valid", [array("src", ["H", "W"]), array("w", [3, 3]), array("dst", ["H", "W"], role="out"),
                       scalar("W", "W"), scalar("H", "H")], {"W": 257, "H": 90}, ["W", "H"], BLOCK_2D, TUNE_2D)
# Reflect padding (OpenCV's BORDER_REFLECT_101): an index past a border is mirrored back into the image.
BLUR_REFLECT = spec(r"""
extern "C" __global__ void blur_reflect(const float *in, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float acc = 0.0f;
    for (int dy = -2; dy <= 2; dy++) {
        int sy = y + dy;
        if (sy < 0) sy = -sy;
        if (sy >= h) sy = 2 * h - sy - 2;
        for (int dx = -2; dx <= 2; dx++) {
            int sx = x + dx;
            if (sx < 0) sx = -sx;
            if (sx >= w) sx = 2 * w - sx - 2;
            acc += in[sy * w + sx] * 0.04f;
        }
    }
    out[y * w + x] = acc;
}
""", "blur_reflect", [array("in", ["h", "w"]), array("out", ["h", "w"], role="out"), scalar("w", "w"),
                      scalar("h", "h")], {"w": 400, "h": 250}, ["w", "h"], BLOCK_2D, TUNE_2D)
PADDED_WINDOWS = {"blur_reflect": BLUR_REFLECT, "mean_of_valid": MEAN_OF_VALID, "weights_of_valid": WEIGHTS_OF_VALID, "conv_same": CONV_SAME, "conv_radius": CONV_RADIUS, "clamp_assigned": CLAMPED_BY_ASSIGNMENT, "blur_skipping_edges": BLUR_SKIPPING_EDGES, "gauss_ternary": GAUSS_TERNARY,
                  "sharpen_double": SHARPEN_DOUBLE, "emboss_row_guard": EMBOSS_ROW_GUARD,
                  "smooth_clamped": SMOOTH_CLAMPED}
VARIANTS.update({name: ("register_window", padded) for name, padded in PADDED_WINDOWS.items()})

# Stencils of unsigned indices: a neighbour at `i - 1` is an address that wraps below zero where no guard holds. NVRTC
# (CUDA 13) unrolling several points' bodies shared such arithmetic between a point whose guard held and one whose
# did not (register_window's edge threads on gaussian3x3): the renderings that unroll points run on the GPU here.
UNSIGNED_STENCILS = {
    "smooth_unsigned_1d": spec(r"""
extern "C" __global__ void smooth_unsigned(float *out, const float *in, unsigned int n)
{
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 1 && i < n - 1)
        out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}
""", "smooth_unsigned", [array("out", ["n"], role="inout"), array("in", ["n"]), scalar("n", "n", "uint32")],
        {"n": 1 << 20}, ["n"], {"block_size_x": 256}, {"block_size_x": [128, 256, 512]}),
    "gradient_unsigned_2d": spec(r"""
extern "C" __global__ void grad2d_unsigned(float *out, const float *in, unsigned int w, unsigned int h)
{
    const unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && y >= 1 && x < w - 1 && y < h - 1)
        out[y * w + x] = in[y * w + x + 1] - in[y * w + x - 1] + in[(y + 1) * w + x] - in[(y - 1) * w + x];
}
""", "grad2d_unsigned", [array("out", ["h", "w"], role="inout"), array("in", ["h", "w"]), scalar("w", "w", "uint32"),
                         scalar("h", "h", "uint32")], {"w": 1024, "h": 512}, ["w", "h"], BLOCK_2D, TUNE_2D),
}
VARIANTS.update({"smooth_unsigned_1d_marched": ("elements_per_thread", UNSIGNED_STENCILS["smooth_unsigned_1d"]),
                 "smooth_unsigned_1d_vectors": ("vectorize", UNSIGNED_STENCILS["smooth_unsigned_1d"]),
                 "gradient_unsigned_2d_blocked": ("register_blocking", UNSIGNED_STENCILS["gradient_unsigned_2d"]),
                 "gradient_unsigned_2d_vectors": ("vectorize", UNSIGNED_STENCILS["gradient_unsigned_2d"])})
