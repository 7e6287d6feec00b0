"""Histograms: atomics into a small array at data-dependent bins, restructured as per-block bins.

Recognised, whatever the names: the kernel is one grid-stride loop, or one point per thread (of a 1D, 2D or 3D
grid), whose body adds into elements of one array parameter, `atomicAdd(&hist[data[i]], 1u)` or
`atomicAdd(counts + key[i], w[i])`, and uses that array no other way; its length (its shape in args) is a number or
the value of one of the kernel's scalar parameters (a size then, not a number: the shared bins follow it), so the
code knows it, and it fits in shared memory. Thousands of threads then hit
the same few hundred addresses in global memory, each atomic a round trip to L2.

Rendered: each block keeps its own bins in dynamic shared memory (the candidate's smem_args: the array's length
times its element size), zeroed first; the loop adds into them with shared-memory atomics; after a barrier the
block adds each non-empty bin into the array with one global atomic per bin. The same additions are made,
grouped by block (for float weights, rounded in another order). When the launch divides the grid by the block
size, elements_per_thread becomes tunable, so each block covers more data per flush of its bins; a kernel of one
point per thread then runs its point body for that many points (points.march: a block width apart along x, or
consecutive rows or planes of a 2D or 3D grid).
"""
import re
from dataclasses import dataclass

from services.generator.rules.cuda_text import IDENTIFIER, Kernel, find_kernel, fresh_name, identifiers, mask
from services.generator.rules.loops import strided_loop
from services.generator.rules import points
from services.generator.rules.points import INDENT
from services.generator.rules.shape import Layout, NotRecognised, deeper_block, default_in, one_thread_per_point
from services.generator.rules.statements import body_of
from shared.domain.dtypes import host_dtype
from shared.domain.expressions import evaluate
from shared.domain.spec import KernelSpec

SHARED_ATOMIC_TYPES = {"int", "int32_t", "unsigned", "unsigned int", "uint32_t", "float", "double",
                       "unsigned long long", "unsigned long long int"}
MAX_SHARED_BYTES = 32 * 1024
EPT_VALUES = [4, 8, 16, 32, 64, 128, 256]


@dataclass(frozen=True)
class Binned:
    kernel: Kernel
    source: str
    array: str  # the histogram
    element: str  # its element type
    length_parameter: str  # the kernel parameter that holds its length, or that length where it is a number
    length: str  # that length as the spec writes it (an expression of sizes)
    itemsize: int
    sites: tuple[tuple[int, int], ...]  # the spans of the array's name in each atomic's address
    point: points.PointKernel | None = None  # a kernel of one point per thread, not a grid-stride loop


def recognise(spec: KernelSpec) -> Binned:
    source = spec.source
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    body = body_of(kernel, masked, NotRecognised)
    if re.search(r"\b(__syncthreads|__shared__)\b", masked[kernel.body_open:kernel.body_close]) or spec.smem_args:
        raise NotRecognised("it uses shared memory already")
    if len(body) == 1 and body[0].kind == "for":
        loop = body[0]
        header = strided_loop(masked, uncommented, loop, {"blockDim.x", spec.block_size_names[0]}, {})
        if header is None or "blockIdx" not in header[2]:
            raise NotRecognised("its loop is not a grid-stride loop over the global thread index")
        # A thread leaving the loop early would skip the block's flush of its bins, and which elements it left
        # undone would follow the grid (review, helper-85: a return inside the loop lost whole bins).
        if (escape := re.search(r"\b(return|break|goto)\b", masked[loop.body.start:loop.body.end])) is not None:
            raise NotRecognised(f"its loop uses {escape[1]}, which would leave the block's bins unflushed, and "
                                f"elements undone that depend on the grid")
        return _binned(spec, kernel, masked, (loop.body.start, loop.body.end), None)
    try:
        point = points.recognise(spec)
    except points.NotPointKernel:
        raise NotRecognised("its body is not one grid-stride loop, nor one point per thread") from None
    if len(point.axes) > len(spec.block_size_names) or \
            any(one_thread_per_point(spec, axis) is not None for axis in range(len(point.axes))):
        raise NotRecognised("its body is not one grid-stride loop, nor one point per thread of a grid launched "
                            "one thread per point")
    if (why := deeper_block(spec, len(point.axes))) is not None:  # each slice of the block would flush the bins
        raise NotRecognised(why)
    return _binned(spec, kernel, masked, (point.body_start, point.body_end), point)


def _binned(spec: KernelSpec, kernel: Kernel, masked: str, span: tuple[int, int],
            point: points.PointKernel | None) -> Binned:
    """The model, where the loop body or the point body (`span`) adds into one array's elements and nothing else."""
    source = spec.source
    inside = masked[span[0]:span[1]]
    calls = list(re.finditer(r"\b(atomic\w+)\s*\(\s*(&\s*)?([A-Za-z_]\w*)\s*(\[|\+)", inside))
    if not calls or len(calls) != len(re.findall(r"\batomic\w+\s*\(", inside)):
        raise NotRecognised("its loop makes no atomicAdd into an element of an array (`&hist[bin]`, `hist + bin`)")
    names = {m.group(3) for m in calls}
    if any(m.group(1) != "atomicAdd" for m in calls) or len(names) != 1:
        raise NotRecognised("its loop's atomics are not all atomicAdd into one array")
    array = names.pop()
    if len(re.findall(rf"\b{array}\b", inside)) != len(calls):
        raise NotRecognised(f"its loop uses {array} other than as the address of its atomicAdd")
    parameters = _parameters(source, kernel)
    if array not in parameters:
        raise NotRecognised(f"{array} is not a parameter of the kernel")
    position, element = parameters[array]
    if element not in SHARED_ATOMIC_TYPES:
        raise NotRecognised(f"{array} holds {element}, which shared-memory atomicAdd does not take")
    arg = spec.parameters[position] if position < len(spec.parameters) else None
    if arg is None or not arg.is_array or len(arg.shape or []) != 1:
        raise NotRecognised(f"{array} is not a 1D array of the spec")
    length = arg.shape[0]
    holder = next((name for name, (i, _) in parameters.items() if i < len(spec.parameters)
                   and not spec.parameters[i].is_array and str(spec.parameters[i].value) == str(length)), None)
    if holder is None and re.fullmatch(r"\d+", str(length)):
        holder = str(length)  # a fixed number of bins is its own length
    if holder is None:
        raise NotRecognised(f"no parameter of the kernel holds the length of {array} ({length})")
    if holder != str(length) and re.fullmatch(r"\d+", str(length)):
        raise NotRecognised(f"the kernel reads the length of {array} from {holder}, which args gives as the number "
                            f"{length}: bins in shared memory sized from that number would overflow on a call with "
                            f"more; declare it as a size (sizes: {{{holder}: {length}}}, shape [{holder}] and value "
                            f"{holder} in args) so that smem_args follows it")
    itemsize = host_dtype(arg.dtype).itemsize
    if evaluate(length, spec.sizes) * itemsize > MAX_SHARED_BYTES:
        raise NotRecognised(f"{array} is larger than the {MAX_SHARED_BYTES} bytes of bins a block keeps")
    sites = tuple((span[0] + m.start(3), span[0] + m.end(3)) for m in calls)
    return Binned(kernel, source, array, element, holder, str(length), itemsize, sites, point)


def _parameters(source: str, kernel: Kernel) -> dict[str, tuple[int, str]]:
    """Each parameter's name -> (position, the element type of a pointer, else its type)."""
    found = {}
    for position, (start, end) in enumerate(kernel.parameters(source)):
        text = mask(source[start:end])
        names = IDENTIFIER.findall(text)
        if names:
            words = [w for w in text.replace("*", " ").split()[:-1] if w not in ("const", "__restrict__", "volatile")]
            found[names[-1]] = (position, " ".join(words))
    return found


def _render(model: Binned) -> str:
    taken = identifiers(model.source)
    bins, b = fresh_name("block_bins", taken), fresh_name("b", taken)
    length = model.length_parameter
    if model.point is not None:
        return _render_points(model, bins, b, taken)
    edited = model.source
    for start, end in sorted(model.sites, reverse=True):
        edited = edited[:start] + bins + edited[end:]
    opening = model.kernel.body_open + 1
    close = model.kernel.body_close + len(edited) - len(model.source)
    loop = edited[opening:close].rstrip()
    found = re.search(r"\n([ \t]*)\S", loop)
    indent = found.group(1) if found else INDENT
    before = ["// Per-block bins in shared memory: the loop adds into them, then each block adds its non-empty bins",
              f"// into {model.array} with one atomic per bin.",
              f"extern __shared__ {model.element} {bins}[];",
              f"for (int {b} = threadIdx.x; {b} < {length}; {b} += blockDim.x) {bins}[{b}] = 0;",
              "__syncthreads();"]
    after = ["__syncthreads();",
             f"for (int {b} = threadIdx.x; {b} < {length}; {b} += blockDim.x) {{",
             f"{INDENT}if ({bins}[{b}] != 0) atomicAdd(&{model.array}[{b}], {bins}[{b}]);",
             "}"]
    lines = "".join(f"\n{indent}{line}" for line in before)
    ending = "".join(f"\n{indent}{line}" for line in after)
    return edited[:opening] + lines + loop + ending + "\n" + edited[close:]


def _render_points(model: Binned, bins: str, b: str, taken: set[str]) -> str:
    """A kernel of one point per thread as elements_per_thread points per thread (points.march: along x a block
    width apart, on a 2D or 3D grid consecutive rows or planes), adding into the block's bins, flushed as in a
    grid-stride loop's rendering by all the block's threads."""
    length = model.length_parameter
    renamed = [(start, end, bins) for start, end in model.sites]
    body = points.point_body(model.point, renamed)
    names = {name: fresh_name(name, taken) for name in ("first", "k", "point", "interior")}
    thread, threads = points.flattened_block(len(model.point.axes))
    if len(model.point.axes) > 1:
        thread, threads = f"(int)({thread})", f"(int)({threads})"
    prologue = ["// Per-block bins in shared memory: each thread adds its elements_per_thread points into them, then",
                f"// each block adds its non-empty bins into {model.array} with one atomic per bin.",
                f"extern __shared__ {model.element} {bins}[];",
                f"for (int {b} = {thread}; {b} < {length}; {b} += {threads}) {bins}[{b}] = 0;",
                "__syncthreads();"]
    epilogue = ["__syncthreads();",
                f"for (int {b} = {thread}; {b} < {length}; {b} += {threads}) {{",
                f"{INDENT}if ({bins}[{b}] != 0) atomicAdd(&{model.array}[{b}], {bins}[{b}]);",
                "}"]
    axis = len(model.point.axes) - 1
    return points.with_body(model.point, points.march(model.point, axis, "elements_per_thread", names, body,
                                                      prologue, epilogue,
                                                      interior=points.interior(model.point, axis, renamed)))


class BinnedAtomicsShape:
    name = "binned_atomics"
    kind = "a histogram (atomics into a small array at data-dependent bins)"
    rules = ("hierarchical_reduction",)

    def recognise(self, spec: KernelSpec) -> Binned:
        return recognise(spec)

    def reason(self, rule_id: str, model: Binned, spec: KernelSpec) -> str | None:
        point = model.point
        return None if point is None else points.marched_under_its_guard(point, len(point.axes) - 1, spec)

    def render(self, model: Binned, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        x = spec.block_size_names[0]
        space, defaults, divisors = {}, {}, {}
        if model.point is not None or x in (spec.grid_div_x or [x]):  # the grid follows the problem size
            space["elements_per_thread"] = EPT_VALUES
            defaults["elements_per_thread"] = default_in(EPT_VALUES, 64)
            axis = len(model.point.axes) - 1 if model.point is not None else 0
            divisors = {"xyz"[axis]: [spec.block_size_names[axis], "elements_per_thread"]}
        return _render(model), Layout(tune_params=space, defaults=defaults, grid_div=divisors,
                                      smem=f"({model.length}) * {model.itemsize}")
