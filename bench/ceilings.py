"""On a GPU machine: what hand-written kernels of the corpus's memory-bound shapes reach against a device copy of
the same bytes, at the corpus's sizes and at 8 times them (issue 21: is 85% of the copy within reach of a shape
at a size, whatever a rule writes?).

    python bench/ceilings.py [--scales 1,8] [--json OUT]

The kernels (bench/ceilings.cu) are the usual fast structure of each shape, written by hand: a GEMV with a warp or
a block per row and 128-bit loads, block-per-row sums, a softmax holding its row in registers, the 3D and 2D
stencils marching along their slowest axis, a gather with 128-bit index loads. Each is launched with cupy and
timed by bench/memory_bound_table.py's own timer, as it times the copy: L2 evicted before each launch, CUDA
events around it, the median of 30 after 5 warm-ups; the copy of the same bytes comes from that bench's
copy_times, so the shares here and in its table are alike. A gather's random lookups move a 32-byte sector each,
so its row also prints the sector traffic: with the table in L2 it runs near L2's throughput, not DRAM's.
"""
import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from memory_bound_table import copy_times, cupy_event_ms, median_ms  # noqa: E402

SOURCE = (ROOT / "bench" / "ceilings.cu").read_text()


def cases(scale: int):
    """(shape, configuration, bytes one launch moves, launch, sectors) of every hand-written kernel at `scale`
    times the corpus's size; sectors counts a gather's 32-byte lookups."""
    import cupy

    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
    k = module.get_function
    rng = cupy.random.default_rng(1)
    i32 = cupy.int32

    rows, cols = 4096 * scale, 2048  # gemv
    a, x = rng.random(rows * cols, dtype=cupy.float32), rng.random(cols, dtype=cupy.float32)
    y = cupy.empty(rows, cupy.float32)
    moved = a.nbytes + x.nbytes + y.nbytes
    for per_block in (4, 16):
        yield ("gemv", f"warp per row, {per_block} rows a block", moved,
               lambda b=per_block: k("gemv_warp")((rows // b,), (32, b), (y, a, x, i32(rows), i32(cols))), 0)
    for threads in (64, 256):
        yield ("gemv", f"block of {threads} per row", moved,
               lambda t=threads: k("gemv_block")((rows,), (t,), (y, a, x, i32(rows), i32(cols))), 0)

    rows, cols = 8192 * scale, 1024  # row_sum
    m, sums = rng.random(rows * cols, dtype=cupy.float32), cupy.empty(rows, cupy.float32)
    for threads in (64, 128):
        yield ("row_sum", f"block of {threads} per row", m.nbytes + sums.nbytes,
               lambda t=threads: k("row_sum_block")((rows,), (t,), (sums, m, i32(cols))), 0)

    rows, cols = 4096 * scale, 1024  # softmax
    src = rng.random(rows * cols, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    for name, threads in (("softmax_v1", 256), ("softmax_v2", 128)):
        yield ("softmax", f"row in registers, {cols // 4 // threads} float4 x {threads} threads", 2 * src.nbytes,
               lambda n=name, t=threads: k(n)((rows,), (t,), (dst, src, i32(cols))), 0)

    n = 256  # laplace3d (its 134 MB already pass the L2 by far: one size)
    if scale == 1:
        field, lap = rng.random(n ** 3, dtype=cupy.float32), cupy.zeros(n ** 3, cupy.float32)
        for bx, by, zc in ((64, 4, 16), (64, 8, 64)):
            yield ("laplace3d", f"march along z, {bx}x{by}, {zc} planes", 2 * field.nbytes,
                   lambda bx=bx, by=by, zc=zc: k("laplace3d_march")(
                       (n // bx, n // by, math.ceil(n / zc)), (bx, by, 1),
                       (lap, field, i32(n), i32(n), i32(n), i32(zc))), 0)

    nx, ny = 2048, 2048 * scale  # jacobi2d
    grid_in, grid_out = rng.random(nx * ny, dtype=cupy.float32), cupy.zeros(nx * ny, cupy.float32)
    for bx, by, yc in ((64, 2, 8), (128, 1, 4)):
        yield ("jacobi2d", f"march along y, {bx}x{by}, {yc} rows", 2 * grid_in.nbytes,
               lambda bx=bx, by=by, yc=yc: k("jacobi2d_march")(
                   (nx // bx, math.ceil(ny / (by * yc))), (bx, by), (grid_out, grid_in, i32(nx), i32(ny), i32(yc))), 0)

    if scale != 1:
        return
    lookups = 1 << 24  # gather, at one size: the corpus's 4M-entry table fits the L2, 64M entries do not
    for entries in (1 << 22, 1 << 26):
        table, out = rng.random(entries, dtype=cupy.float32), cupy.empty(lookups, cupy.float32)
        idx = cupy.random.randint(0, entries, lookups, dtype=cupy.int32)
        yield ("gather", f"4 per thread, table of {entries * 4 >> 20} MB", out.nbytes + idx.nbytes + table.nbytes,
               lambda t=table, i=idx, o=out: k("gather4")((lookups // 1024,), (256,), (o, t, i, i32(lookups // 4))),
               lookups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,8", help="comma-separated multiples of the corpus's sizes")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()
    import cupy

    l2 = cupy.cuda.Device().attributes["L2CacheSize"]
    flush = cupy.zeros(2 * l2, dtype=cupy.uint8)  # read to flush L2, as memory_bound_table's copies do
    rows = []
    for scale in map(int, args.scales.split(",")):
        for shape, how, moved, launch, sectors in cases(scale):
            ms = median_ms(launch, lambda: flush.sum(), cupy_event_ms, reps=30)
            rows.append(dict(scale=scale, shape=shape, how=how, bytes=moved, ms=ms, sectors=sectors))
    flush = None
    copies, copier = copy_times({r["bytes"] for r in rows}, l2, flush=True)
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: copy with {copier}, L2 evicted")
    for r in rows:
        r["share"] = copies[r["bytes"]] / r["ms"]
        sectors = f"; lookups' sectors {r['sectors'] * 32 / r['ms'] / 1e6:,.0f} GB/s" if r["sectors"] else ""
        print(f"x{r['scale']} {r['shape']:<10} {r['how']:<40} {r['bytes'] / 1e6:7.1f} MB {r['ms']:.4f} ms "
              f"{r['bytes'] / r['ms'] / 1e6:6,.0f} GB/s {r['share']:6.1%} of the copy{sectors}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
