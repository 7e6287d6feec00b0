"""The shapes the recognisers know, most specific first; a kernel is of the first shape that recognises it.

- elementwise (elementwise.py): one guarded block per index, or a grid-stride loop of it, arrays indexed [i]:
  elements_per_thread, vectorize;
- row loop (rows.py): one row per thread, loops over the row adding into sums or taking maxima or minima (or
  their places), and
  storing along it (GEMV, row sums, softmax or layer normalisation a thread per row): warp_per_row. Ahead of
  the atomics: a thread's loop over its row with an atomic after it (a loss summed over rows) is a row's loads
  strided across the warp, one atomic per row, and coalescing the loads is what pays;
- atomic accumulation (reduction.py): one point per thread adding into a few fixed addresses (or a few per row of
  points along y or z) with atomicAdd:
  hierarchical_reduction;
- warp atomics (warp_atomics.py): accumulators, a grid-stride loop, then shuffles and atomics per warp:
  hierarchical_reduction;
- binned atomics (binning.py): a grid-stride loop of atomicAdds into a small array's data-dependent bins (a
  histogram): hierarchical_reduction;
- column loop (columns.py): one column per thread, one loop down the column adding into sums or taking maxima or
  minima, its loads side by side across threads (column sums or norms): split_columns;
- row passes (row_passes.py): a block (or a warp) passing over an input row in several loops: row_in_registers
  (row_registers.py) or row_in_shared (row_cache.py);
- transposed (tile.py): 2D, one store strided along x and contiguous along y, loads contiguous along x:
  shared_tile;
- window sum (window.py): 2D, an accumulator adding a window of an input walked by two loops of its own, read
  along rows (a convolution): register_window;
- stencil (marching.py): 2D/3D, an input read around the point written: register_blocking, vectorize;
- points (marching.py): one point per thread, anything else: elements_per_thread.

The textual rules (restrict, launch_bounds, unroll, block_size in textual.py; vectorize_loops in loops.py;
shuffle_reduction in tree.py; shuffle_scan in scan.py; scan_vectors in scan_vectors.py) recognise what they edit
by themselves and compose with every shape.
"""
from typing import Any

from services.generator.rules import axis_order, block_trees, flat_index, grid_stride, unrolled
from services.generator.rules.binning import BinnedAtomicsShape
from services.generator.rules.canonical import canonical
from services.generator.rules.columns import ColumnLoopShape
from services.generator.rules.elementwise import ElementwiseShape
from services.generator.rules.marching import PointsShape, StencilShape
from services.generator.rules.reduction import AtomicAccumulationShape
from services.generator.rules.row_cache import RowPassesShape
from services.generator.rules.rows import RowLoopShape
from services.generator.rules.shape import Shape
from services.generator.rules.tile import TransposedShape
from services.generator.rules.warp_atomics import WarpAtomicsShape
from services.generator.rules.window import WindowShape
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

SHAPES: tuple[Shape, ...] = (ElementwiseShape(), RowLoopShape(), AtomicAccumulationShape(), WarpAtomicsShape(),
                             BinnedAtomicsShape(), ColumnLoopShape(), RowPassesShape(), TransposedShape(), WindowShape(),
                             StencilShape(), PointsShape())


def recognise(spec: KernelSpec) -> tuple[Shape | None, Any, dict[str, str]]:
    """(shape, model, {}) for the first shape that recognises the submitted kernel, read in its canonical spelling
    (reading), else (None, None, why each shape refused it, by name)."""
    return _read(spec)[1][1:]


def reading(spec: KernelSpec) -> KernelSpec:
    """The spelling of the submitted kernel the shapes read (canonical.py), its pointers into arrays and calls of
    one-return functions inlined only where that lets a more specific shape read it, or the same shape render more
    of its rules: a row loop's `const float *a = A + row * n` hides its rows from the recognisers, and an accessor
    `at(img, x - 1, y, w)` a stencil's neighbours, while a block's pointer to its row is what row_in_registers
    caches the row through. Likewise, only where it reads better so, a nest of grid-stride loops is read as the one
    point per thread it stands for (grid_stride.py), a flat index split by / and % as its coordinates
    (flat_index.py), a 3D kernel with its y and z axes swapped and one of x and z alone as 2D (axis_order.py), a
    grid-stride nest's point form too, each launched so, a block's shared-memory tree sum handed to one atomic
    as the accumulation it computes (block_trees.py), and loops over a few constant values unrolled (unrolled.py)."""
    return _read(spec)[0]


Found = tuple[int, Shape | None, Any, dict[str, str]]  # the shape's place in SHAPES (len(SHAPES): none), ...


_READINGS: dict[str, tuple[KernelSpec, Found]] = {}  # the last specs read, by their JSON: checking and applying
_KEPT_READINGS = 64  # each rule reads the same spec again


def _read(spec: KernelSpec) -> tuple[KernelSpec, Found]:
    key = spec.model_dump_json()
    if key not in _READINGS:
        if len(_READINGS) >= _KEPT_READINGS:
            del _READINGS[next(iter(_READINGS))]
        _READINGS[key] = _reading(spec)
    return _READINGS[key]


def _reading(spec: KernelSpec) -> tuple[KernelSpec, Found]:
    spec = _a_block_per_index(spec)
    kept, inlined = canonical(spec, inline=False), canonical(spec)
    pointed = [p for s in (kept, inlined) if (p := grid_stride.point_form(s)) is not None]
    # A flat index's coordinates are taken too where they render every rule of the shape, as the flat spelling
    # does: their vectors' lanes then read the coordinates as indices, where the flat ones divide for them.
    spellings = [(inlined, False), *((p, False) for p in pointed),
                 *((respelt, form is flat_index.point_form) for s in (kept, inlined, *pointed)
                   for form in (flat_index.point_form, axis_order.swapped, axis_order.z_as_y,
                                block_trees.atomic_form, unrolled.unrolled_form)
                   if (respelt := form(s)) is not None)]
    best = kept, _first(kept)
    for spelling, coordinates in spellings:
        if spelling.source == best[0].source:
            continue
        other = _first(spelling)
        unrendered = _unrendered(spelling, other)
        if other[0] < best[1][0] or other[0] == best[1][0] and _dense(spelling, kept) and \
                (unrendered < _unrendered(*best) or coordinates and unrendered == 0):
            best = spelling, other
    return best


_A_BLOCK_PER_INDEX = ([], [1], ["1"])  # grid divisors launching a block per index along an axis


def _a_block_per_index(spec: KernelSpec) -> KernelSpec:
    """The spec with each axis launched a block per index (grid_div_y: [] or [1] where the block is one thread deep,
    as a kernel taking its channel from blockIdx.y and its image from blockIdx.z is launched) divided by that block
    size instead, or left to the default where the spec names no block size there (blocks one thread deep): the
    same grid, which the recognisers read as one thread per point along the axis."""
    baseline, divided = spec.baseline_params(), {}
    for axis, name in enumerate(spec.block_size_names[1:], start=1):
        letter = "xyz"[axis]
        if getattr(spec, f"grid_div_{letter}") in _A_BLOCK_PER_INDEX and baseline.get(name) == 1 and \
                set(spec.tune_params.get(name, [1])) == {1}:
            divided[f"grid_div_{letter}"] = [name]
    for letter in "xyz"[max(1, len(spec.block_size_names)):]:  # no block size named: blocks one thread deep
        if getattr(spec, f"grid_div_{letter}") in _A_BLOCK_PER_INDEX:
            divided[f"grid_div_{letter}"] = None
    return spec.model_validate({**spec.model_dump(), **divided}) if divided else spec


def _unrendered(spec: KernelSpec, found: Found) -> int:
    """How many of the shape's rules cannot render the kernel so read."""
    _, shape, model, _ = found
    return 0 if shape is None else sum(shape.reason(rule, model, spec) is not None for rule in shape.rules)


def _dense(spelling: KernelSpec, kept: KernelSpec) -> bool:
    """Whether the spelling launches its points as densely as submitted: the same problem size, or rows of at least
    4 blocks of the smallest width tuned (a flat index read as rows of 49 points would leave most of each block
    idle, which more rules rendering does not make up for)."""
    if spelling.problem_size == kept.problem_size:
        return True
    try:
        width = evaluate(spelling.problem_size[0], spelling.variables(spelling.baseline_params()))
    except ExpressionError:
        return False
    return width >= 4 * grid_stride.smallest_block(spelling, 0)


def _first(spec: KernelSpec) -> Found:
    """The first shape that recognises the kernel, with its model, else why each shape refused it, by name."""
    reasons = {}
    for number, shape in enumerate(SHAPES):
        try:
            return number, shape, shape.recognise(spec), {}
        except ValueError as exc:
            reasons[shape.name] = str(exc)
    return len(SHAPES), None, None, reasons


def offering(rule_id: str) -> list[Shape]:
    return [shape for shape in SHAPES if rule_id in shape.rules]
