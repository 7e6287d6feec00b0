"""A 3D kernel of one point per thread read with its y and z axes swapped, and a kernel of x and z alone read as
the 2D kernel of x and y.

    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int c = blockIdx.z;                            // blocks one thread deep along z
    if (x < W && y < H && c < C)
        chw[(c * H + y) * W + x] = hwc[(y * W + x) * C + c];

is a transpose across x and z (the channels), where the shapes look for one across x and y. Each thread runs one
point, which depends on nothing but its indices (points.py), so the same points may be launched with c along y
and y along z, one thread deep:

    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int c = blockIdx.y * blockDim.y + threadIdx.y;
    const int y = blockIdx.z * blockDim.z + threadIdx.z;

over the problem size with its y and z swapped. Made only where the spec launches blocks one thread deep along z,
divides the grid by the block sizes alone (grid_div_y and grid_div_z left out or naming the block size), and the
point body is one guard bounding y and z each below a scalar argument its problem size covers
(coverage.bound_covered): both launches then run every point of that box,
and the guard skips the rest. Along z the new grid must stay within CUDA's 65535 blocks, at the spec's sizes and
around them.

A kernel whose batch is blockIdx.z beside its x index (`int b = blockIdx.z;`), launched one block of one thread
along y (problem size 1 there), names no y of the launch geometry anywhere in its source: launched with z's
blocks along y instead, every z of the source read as y, it runs the same points, the 2D kernel the shapes read.
"""
import re

from services.generator.rules import points
from services.generator.rules.cuda_text import find_kernel, mask, top_level_conjuncts
from services.generator.rules.coverage import GRID_LIMIT, bound_covered, values_around
from services.generator.rules.shape import one_thread_per_point
from shared.domain.spec import KernelSpec


def swapped(spec: KernelSpec) -> KernelSpec | None:
    """The spec with its y and z axes swapped, launched so; None where the kernel is not one point per thread on
    a 3D grid one thread deep along z, guarded as above."""
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel:
        return None
    dims = spec.dimensions
    if len(kernel.axes) != 3 or len(dims) != 3 or len(spec.block_size_names) < 3 or \
            not points.one_thread_along(spec, 2) or one_thread_per_point(spec, 1) or one_thread_per_point(spec, 2) or \
            len(kernel.statements) != 1 or kernel.statements[0].kind != "if":
        return None
    masked = mask(spec.source)
    guard = kernel.statements[0]
    conjuncts = top_level_conjuncts(masked[guard.head[0]:guard.head[1]])
    for axis in kernel.axes[1:]:
        bounds = [re.fullmatch(rf"\s*{axis.name}\s*<(?P<b>[^<>=!&|?,]+)", c) for c in conjuncts]
        if not any(b and bound_covered(spec, axis.axis, b["b"]) for b in bounds):
            return None
    rows = values_around(spec, dims[1])
    if rows is None or max(rows) > GRID_LIMIT:
        return None
    x, y, z = kernel.axes
    definitions = [points.definition(x), f"{z.type} {z.name} = blockIdx.y * blockDim.y + threadIdx.y;",
                   f"{y.type} {y.name} = blockIdx.z * blockDim.z + threadIdx.z;"]
    source = points.replace_spans(spec.source, [(kernel.kernel.body_open + 1, kernel.body_start, "".join(
        f"\n{points.INDENT}{line}" for line in definitions))])
    return spec.model_copy(update={"source": source, "problem_size": [dims[0], dims[2], dims[1]]})


_GEOMETRY_OF = r"\b(?P<name>blockIdx|threadIdx|blockDim|gridDim)\s*\.\s*{}\b"


def z_as_y(spec: KernelSpec) -> KernelSpec | None:
    """The spec of a kernel of x and z alone (above) with z read and launched as y; None where the source names the
    launch's y, reads no z, or the spec launches more than one block of one thread along y, or z with blocks
    deeper than one thread."""
    dims = spec.dimensions
    if len(dims) != 3 or not points.one_thread_along(spec, 1) or not points.one_thread_along(spec, 2) or \
            one_thread_per_point(spec, 1) or one_thread_per_point(spec, 2) or \
            set(values_around(spec, dims[1]) or [0]) != {1}:
        return None
    try:
        find_kernel(spec.source, spec.kernel_name)
    except ValueError:
        return None
    masked = mask(spec.source)
    uses = list(re.finditer(_GEOMETRY_OF.format("z"), masked))
    if not uses or re.search(_GEOMETRY_OF.format("y"), masked):
        return None
    source = spec.source
    for use in reversed(uses):
        source = f"{source[:use.start()]}{use['name']}.y{source[use.end():]}"
    # both axes launch a block per index (one_thread_per_point), so y's divisor serves z's points
    return spec.model_copy(update={"source": source, "problem_size": [dims[0], dims[2]], "grid_div_z": None})
