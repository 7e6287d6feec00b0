"""Several points per thread for kernels of one point per thread: elements_per_thread for any such kernel
(1D, 2D or 3D, whatever its body), register_blocking for stencils.

Both march each thread over a tunable number of points along the slowest axis of the grid (x for a 1D kernel,
y for 2D, z for 3D), the grid along it shrunk by the same factor. A stencil is a kernel that reads one of its
inputs around the point it writes: at several offsets of the same subscript, a whole number of an index's strides
apart (`in[i - 1]`, `in[i + nx]`; an RGBA pixel's channels `p[4 * i + 1]` are its own), or
through a window that a loop of its own walks (`image[(y + i) * width + x + j]`). Its thread then takes
consecutive rows (planes in 3D), so the rows a point shares with the next are loaded by the same thread, where
the unrolled loop can keep them in registers (with __restrict__ pointers, which the restrict rule gives).
"""
from services.generator.rules import affine, point_vectors, points
from services.generator.rules.cuda_text import fresh_name, identifiers
from services.generator.rules.points import PointKernel
from services.generator.rules.shape import Layout, NotRecognised, one_thread_per_point
from shared.domain.spec import KernelSpec

EPT_VALUES, BLOCKING_VALUES = [1, 2, 4, 8, 16], [1, 2, 4, 8, 16]


def _marchable(spec: KernelSpec) -> PointKernel:
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    if not any(access.write for access in kernel.accesses) and "atomic" not in kernel.source:
        raise NotRecognised("its point body writes no array")
    axis = len(kernel.axes) - 1
    if axis >= len(spec.block_size_names):
        raise NotRecognised(f"the spec names no block size for its {'xyz'[axis]} axis")
    if (why := one_thread_per_point(spec, axis)) is not None:
        raise NotRecognised(why)
    if (why := points.changed_parameter(kernel)) is not None:
        raise NotRecognised(why)
    return kernel


def neighbourhood(kernel: PointKernel) -> str | None:
    """The input the kernel reads around its point, or None when it reads none that way."""
    written = {a.array for a in kernel.accesses if a.write}
    indices = kernel.index_names
    reads: dict[str, list[affine.Poly]] = {}
    for access in kernel.accesses:
        if access.array in written or access.poly is None or not affine.names(access.poly) & indices:
            continue
        reads.setdefault(access.array, []).append(access.poly)
        if affine.names(access.poly) & kernel.loop_variables:  # a window walked by the body's own loop
            return access.array
    for array, polys in reads.items():
        distinct = {tuple(sorted(p.items())) for p in polys}
        if len(distinct) < 2:
            continue
        first = polys[0]
        offsets = [affine.minus(p, first) for p in polys]
        if any(affine.names(offset) & indices for offset in offsets):
            continue
        strides = [affine.stride(first, index) for index in indices]
        if any(_steps(offset, stride) for offset in offsets for stride in strides if stride):
            return array
    return None


def _steps(offset: affine.Poly, stride: affine.Poly) -> bool:
    """Whether `offset` is a whole nonzero number of `stride`s: a neighbouring point's element, not another element
    of the point's own (an RGBA pixel's channels at +1 and +2 of a stride of 4)."""
    term, coefficient = next(iter(stride.items()))
    if term not in offset or offset[term] % coefficient:
        return False
    steps = offset[term] // coefficient
    return steps != 0 and offset == {t: c * steps for t, c in stride.items()}


def _vectors_reason(kernel: PointKernel, spec: KernelSpec) -> str | None:
    try:
        point_vectors.model(kernel, spec)
    except NotRecognised as exc:
        return str(exc)
    return None


def march_axis(kernel: PointKernel, spec: KernelSpec) -> int:
    """The axis elements_per_thread marches along: the slowest, or x where a guard bounds x but none the slowest
    (a batch the grid covers exactly, `c[b * n + i]` for b = blockIdx.y): a march along the batch would reach past
    it, and one along x takes points a block width apart, as in 1D."""
    slowest = len(kernel.axes) - 1
    if slowest and points.unbounded(kernel, slowest, spec) is not None and \
            points.unbounded(kernel, 0, spec) is None and one_thread_per_point(spec, 0) is None:
        return 0
    return slowest


def _vectors(kernel: PointKernel, factor: str | None, spec: KernelSpec, along: int) -> tuple[str, Layout]:
    """Vectors along x (point_vectors.py), and with `factor` that many rows a thread along the axis `along` (or
    along x, that many vectors)."""
    rows = point_vectors.model(kernel, spec)
    grid = {"x": [spec.block_size_names[0], rows.lanes]}
    if factor is not None:
        grid["xyz"[along]] = [*(grid["x"] if along == 0 else [spec.block_size_names[along]]), factor]
    return points.with_body(kernel, point_vectors.render(rows, factor, spec, along)), Layout(grid_div=grid)


def _render(kernel: PointKernel, factor: str, spec: KernelSpec, note: list[str], axis: int) -> tuple[str, Layout]:
    taken = identifiers(kernel.source)
    names = {key: fresh_name(key, taken) for key in ("first", "k", "point")}
    lines = [*note, *points.march(kernel, axis, factor, names)]
    letter = "xyz"[axis]
    return points.with_body(kernel, lines), Layout(grid_div={letter: [spec.block_size_names[axis], factor]})


class PointsShape:
    name = "points"
    kind = "a kernel of one point per thread"
    rules = ("elements_per_thread", "vectorize")

    def recognise(self, spec: KernelSpec) -> PointKernel:
        return _marchable(spec)

    def reason(self, rule_id: str, kernel: PointKernel, spec: KernelSpec) -> str | None:
        return _vectors_reason(kernel, spec) if rule_id == "vectorize" else \
            points.unbounded(kernel, march_axis(kernel, spec), spec)

    def render(self, kernel: PointKernel, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        along = march_axis(kernel, spec)
        if "vectorize" in features:
            return _vectors(kernel, "elements_per_thread" if "elements_per_thread" in features else None, spec,
                            along)
        axis = "xyz"[along]
        spacing = "a block width apart" if axis == "x" else "consecutive"
        note = [f"// Each thread runs the point body for elements_per_thread points along {axis}, {spacing};",
                f"// the grid along {axis} is that many times smaller."]
        return _render(kernel, "elements_per_thread", spec, note, along)


class StencilShape:
    name = "stencil"
    kind = "a stencil (it reads an input around the point it writes)"
    rules = ("register_blocking", "vectorize")

    def recognise(self, spec: KernelSpec) -> PointKernel:
        kernel = _marchable(spec)
        if len(kernel.axes) < 2:
            raise NotRecognised("a stencil here is 2D or 3D: it has one index")
        if neighbourhood(kernel) is None:
            raise NotRecognised("it reads no input around the point it writes (at several offsets of one "
                                "subscript, or through a window walked by a loop)")
        return kernel

    def reason(self, rule_id: str, kernel: PointKernel, spec: KernelSpec) -> str | None:
        return _vectors_reason(kernel, spec) if rule_id == "vectorize" else \
            points.unbounded(kernel, len(kernel.axes) - 1, spec)

    def render(self, kernel: PointKernel, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        slowest = len(kernel.axes) - 1
        if "vectorize" in features:
            return _vectors(kernel, "points_per_thread" if "register_blocking" in features else None, spec, slowest)
        axis = "xyz"[slowest]
        array = neighbourhood(kernel)
        note = [f"// Register blocking: each thread computes points_per_thread consecutive points along {axis}, "
                f"unrolled,",
                f"// so the values of {array} that neighbouring points share are loaded once and kept in registers;",
                f"// the grid along {axis} is points_per_thread times smaller."]
        return _render(kernel, "points_per_thread", spec, note, slowest)
