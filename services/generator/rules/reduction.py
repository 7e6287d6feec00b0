"""Accumulation into a few fixed addresses with atomics, restructured as a hierarchical reduction.

Recognised: a kernel of one point per thread (services/generator/rules/points.py), on a 1D, 2D or 3D grid, whose
point body
adds into one or a few addresses that do not depend on the point, `atomicAdd(total, x[i])`,
`atomicAdd(&out[0], a[i] * b[i])`, `atomicAdd(sums + 1, v)`, or takes their minimum or maximum on integers
(`atomicMin(lo, v)`, `atomicMax(&range[1], v)`), each call a statement of its own and each address taking one of
the three. Every such atomic serialises on its address, so the kernel runs at the speed of one address's atomics.
An address may also name some of the point's indices, not all:
- its y or z index (`atomicAdd(&sums[b], x[b * n + i])`, b = blockIdx.y: a sum per row, batch or channel): the
  address is fixed along x, the reduction runs along x, and the rewrite's blocks are one thread deep along y and z,
  so that every thread of a block adds into the same addresses;
- its x index (`atomicAdd(&db[c], dy[r * cols + c])`: a sum per column, a bias's gradient): each thread marches
  along the slowest axis the address does not name, adding its points into registers, and makes one atomic per
  address for them (its neighbours' addresses differ, so there is nothing to combine across the block).

Rendered: each thread runs the point body for elements_per_thread points (a block width apart along x, so loads
stay coalesced; on a 2D or 3D grid consecutive rows or planes, as elements_per_thread marches there), adding
each value into a register of the address's element type instead of the atomic (or keeping the smaller or larger,
from the type's largest or smallest value); each warp then combines its 32 registers with __shfl_down_sync, warp 0
combines the warps' (one shared slot per warp), and one atomic per block and address adds (or takes the minimum
or maximum of) the block's. The additions happen in another order, which for floats is the rounding any
reordered sum has (the verifier's tolerance for a kernel whose sum depends on the order); a minimum or maximum is
the same in any order.
Blocks must be whole warps: the rewrite tunes block_size_x over multiples of 32, and a 2D or 3D block over the
spec's sizes whose threads make whole warps (x fastest, as the hardware makes warps of them).
Where an address names an index, a block's (or thread's) atomic adds only where one of its points reached the
atomic it stands for (a flag combined with the sums): a row or column the submitted kernel's guard or data left
alone stays untouched, and its address may not even exist.
"""
import itertools
import math
import re
from dataclasses import dataclass

from services.generator.rules import affine, points
from services.generator.rules.coverage import GRID_LIMIT, values_around
from services.generator.rules.cuda_text import IDENTIFIER, closing, fresh_name, identifiers, mask, split_top_level
from services.generator.rules.points import INDENT, PointKernel
from services.generator.rules.shape import (Layout, NotRecognised, block_values, deeper_block, default_in,
                                            one_thread_per_point)
from services.generator.rules.statements import walk
from shared.domain.spec import KernelSpec

# Element types __shfl_down_sync and atomicAdd both take.
SUMMABLE = {"float", "double", "int", "int32_t", "unsigned", "unsigned int", "uint32_t", "long long", "long long int",
            "unsigned long long", "unsigned long long int"}
MAX_TARGETS = 4
# atomicMin and atomicMax: the integer types they take, with the identity of each (a register's start, and what a
# lane past the block's last warp contributes).
EXTREMES = {"int": ("2147483647", "(-2147483647 - 1)"), "int32_t": ("2147483647", "(-2147483647 - 1)"),
            "unsigned": ("0xffffffffu", "0u"), "unsigned int": ("0xffffffffu", "0u"), "uint32_t": ("0xffffffffu", "0u"),
            "long long": ("9223372036854775807LL", "(-9223372036854775807LL - 1)"),
            "long long int": ("9223372036854775807LL", "(-9223372036854775807LL - 1)"),
            "unsigned long long": ("0xffffffffffffffffull", "0ull"),
            "unsigned long long int": ("0xffffffffffffffffull", "0ull")}
ATOMICS = {"atomicAdd": "+", "atomicMin": "min", "atomicMax": "max"}
TYPE_WORDS = {"int", "unsigned", "long", "short", "char", "size_t", "const", "float", "double", "reinterpret_cast",
              "static_cast"}
BLOCK_SIZES = [128, 256, 512, 1024]
EPT_VALUES = [1, 2, 4, 8, 16, 32, 64]


@dataclass(frozen=True)
class Target:
    address: str  # as written, e.g. `&out[0]`
    type: str  # the element type it points to
    atomic: str  # atomicAdd, atomicMin or atomicMax
    axes: frozenset[int] = frozenset()  # the axes whose index the address names (0: x)

    @property
    def start(self) -> str:
        """What the register starts from: the combination's identity."""
        if self.atomic == "atomicAdd":
            return f"({self.type})0"
        smallest_first, largest_first = EXTREMES[self.type]
        return smallest_first if self.atomic == "atomicMin" else largest_first

    def combined(self, register: str, value: str) -> str:
        """The register taking one value as the atomic took it: converted to the element type first (review,
        helper-85: `atomicAdd(int *, float)` truncates each value, a float added into an int register did not)."""
        if self.atomic == "atomicAdd":
            return f"{register} += ({self.type})({value});"
        return f"{register} = {ATOMICS[self.atomic]}({register}, ({self.type})({value}));"


@dataclass(frozen=True)
class Site:
    start: int  # the atomicAdd statement's span in the source
    end: int
    target: int  # index into Accumulation.targets
    value: str  # what it adds, as written


@dataclass(frozen=True)
class Accumulation:
    kernel: PointKernel
    targets: tuple[Target, ...]
    sites: tuple[Site, ...]
    marched: int  # the axis each thread marches along (_marched)

    @property
    def named(self) -> frozenset[int]:
        """The axes whose index some address names."""
        return _named(self.targets)

    @property
    def by_row(self) -> bool:
        """Whether the reduction runs along x alone, an address naming the point's y or z index and not its x."""
        return bool(self.named) and 0 not in self.named

    @property
    def by_thread(self) -> bool:
        """Whether each thread adds its own points into an address its neighbours along x do not share."""
        return 0 in self.named


def _named(targets) -> frozenset[int]:
    return frozenset().union(*(target.axes for target in targets))


def _marched(kernel: PointKernel, targets: list[Target], spec: KernelSpec) -> int:
    """The axis each thread marches along: x for sums by row; the slowest for fixed addresses (consecutive rows or
    planes); for sums by column, the slowest the addresses do not name that a guard bounds within the problem
    size (a batch's images along z, `n = blockIdx.z` under no guard, stay a point per thread: its rows are
    marched instead), else the slowest they do not name."""
    named = _named(targets)
    if named and 0 not in named:
        return 0
    free = [a.axis for a in kernel.axes if a.axis not in named]
    if not named:
        return free[-1]
    return max([axis for axis in free if points.marched_under_its_guard(kernel, axis, spec) is None] or free)


def recognise(spec: KernelSpec) -> Accumulation:
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    dimensions = len(kernel.axes)
    for axis in range(dimensions):
        if (why := one_thread_per_point(spec, axis)) is not None:
            raise NotRecognised(why)
    if (why := deeper_block(spec, dimensions)) is not None:
        raise NotRecognised(why)
    source, masked = spec.source, mask(spec.source)
    uncommented = mask(source, literals=False)
    body = masked[kernel.body_start:kernel.body_end]
    others = sorted({m.group(1) for m in re.finditer(r"\b(atomic\w+)\s*\(", body)} - set(ATOMICS))
    if others:
        raise NotRecognised(f"it uses {', '.join(others)}; the hierarchical reduction takes atomicAdd sums, "
                            f"atomicMin and atomicMax")
    targets: list[Target] = []
    sites: list[Site] = []
    calls = len(re.findall(r"\batomic(?:Add|Min|Max)\s*\(", body))
    for statement, _ in walk(masked, list(kernel.statements)):
        text = masked[statement.start:statement.end]
        if statement.kind != "simple" or not re.search(r"\batomic(?:Add|Min|Max)\b", text):
            continue
        call = re.match(r"\s*(atomic(?:Add|Min|Max))\s*\(", text)
        if call is None:
            raise NotRecognised("an atomic's result is used, or it is not a statement of its own")
        opening = statement.start + call.end() - 1
        close = closing(masked, opening)
        if masked[close + 1:statement.end].strip() != ";":
            raise NotRecognised("an atomicAdd's result is used, or it is not a statement of its own")
        arguments = split_top_level(masked[opening + 1:close], ",")
        if len(arguments) != 2:
            raise NotRecognised("an atomicAdd does not take two arguments")
        address_at = opening + 1
        value_at = address_at + len(arguments[0]) + 1
        address = " ".join(uncommented[address_at:address_at + len(arguments[0])].split())
        target = _target(address, kernel, call.group(1))
        if clash := next((t for t in targets if t.address == address and t != target), None):
            raise NotRecognised(f"`{address}` takes both {clash.atomic} and {target.atomic}")
        if target not in targets:
            targets.append(target)
        value = uncommented[value_at:close].strip()
        sites.append(Site(statement.start, statement.end, targets.index(target), value))
    if not sites:
        raise NotRecognised("it makes no atomicAdd, atomicMin or atomicMax")
    if len(sites) != calls:
        raise NotRecognised("an atomicAdd is not a statement of its own")
    if len(targets) > MAX_TARGETS:
        raise NotRecognised(f"it adds into {len(targets)} addresses; the reduction keeps at most {MAX_TARGETS} sums "
                            f"per thread")
    rest = points.replace_spans(body, [(s.start - kernel.body_start, s.end - kernel.body_start, "") for s in sites])
    for target in targets:
        array = next(n for n in IDENTIFIER.findall(target.address) if n in kernel.array_types)
        if re.search(rf"\b{array}\b", rest):
            raise NotRecognised(f"it reads or writes {array} besides adding into it, which a deferred sum would change")
    if len(_named(targets)) == dimensions:
        raise NotRecognised(f"its atomics' addresses ({', '.join(f'`{t.address}`' for t in targets)}) name every "
                            f"index of the point between them: no axis is left along which a thread's points add "
                            f"into the same addresses")
    model = Accumulation(kernel, tuple(targets), tuple(sites), _marched(kernel, targets, spec))
    # Blocks flattened over every axis are tuned by the axes' block sizes, and a march by its axis's; sums by row
    # run blocks one thread deep along y and z, which need none.
    needed = 0 if model.by_row else model.marched + 1 if model.by_thread else dimensions
    if needed > len(spec.block_size_names):
        raise NotRecognised(f"the spec names no block size for its {'xyz'[needed - 1]} axis")
    return model


def _target(address: str, kernel: PointKernel, atomic: str) -> Target:
    names = [n for n in IDENTIFIER.findall(address) if n not in TYPE_WORDS]
    outside = [n for n in names if n not in kernel.parameters and n not in kernel.index_names]
    # A local defined once by arithmetic of the indices and parameters (`const int slot = n * C + c;`) is spelled
    # out: the block's atomic, after the point body, does not see the body's locals (review, helper-90).
    known = set(kernel.parameters) | kernel.index_names
    spelled = {n: affine.spelled(kernel.locals[n]) for n in outside
               if n in kernel.locals and affine.names(kernel.locals[n]) <= known}
    if spelled and all(spelled.values()):
        address = re.sub(rf"\b({'|'.join(spelled)})\b", lambda m: f"({spelled[m[1]]})", address)
        names = [n for n in IDENTIFIER.findall(address) if n not in TYPE_WORDS]
        outside = [n for n in names if n not in known]
    if outside:
        raise NotRecognised(f"an atomicAdd adds into `{address}`, which depends on {', '.join(outside)}: a "
                            f"different address per point (a histogram), not a sum")
    axes = frozenset(a.axis for a in kernel.axes if a.name in names)
    if len(axes) == len(kernel.axes):
        raise NotRecognised(f"an atomicAdd adds into `{address}`, which names every index of the point: a "
                            f"different address per point, not a sum")
    pointers = [n for n in names if n in kernel.array_types]
    if len(pointers) != 1 or not re.fullmatch(r"&?\s*\(?\s*\w+\s*(?:\[.*\]|[-+].*)?\)?", address):
        raise NotRecognised(f"the atomicAdd address `{address}` is not one array's element")
    element = kernel.array_types[pointers[0]]
    if atomic != "atomicAdd" and element not in EXTREMES:
        raise NotRecognised(f"{pointers[0]} holds {element}; {atomic} takes {', '.join(sorted(EXTREMES))}")
    if element not in SUMMABLE:
        raise NotRecognised(f"{pointers[0]} holds {element}; warp shuffles add {', '.join(sorted(SUMMABLE))}")
    return Target(address, element, atomic, axes)


@dataclass(frozen=True)
class Partial:
    """A register holding what one thread contributes to a block's result."""

    name: str
    type: str
    combine: str  # "+" or a function of two values: min, max, fminf, ...
    pad: str  # what the lanes past the block's last warp contribute: the combination's identity


def block_reduction(partials: list[Partial], width: str, taken: set[str], finish: list[str],
                    thread: str = "threadIdx.x") -> list[str]:
    """Lines that combine each partial over the block of `width` threads, a whole number of warps (warp shuffles,
    one shared slot per warp, warp 0 combining the slots), leaving the block's results in the registers of its
    thread 0, where `finish` runs. `thread` is a thread's place in the block: its x index in a 1D block, in a 2D
    or 3D one its x, y and z indices flattened as the warps are made of them (x fastest)."""
    lane, warp, offset = (fresh_name(n, taken) for n in ("lane", "warp", "offset"))
    slots = [fresh_name(f"warp_{p.name}", taken) for p in partials]

    def combined(p: Partial, other: str) -> str:
        return f"{p.name} += {other};" if p.combine == "+" else f"{p.name} = {p.combine}({p.name}, {other});"

    shuffle = ["#pragma unroll",
               f"for (int {offset} = 16; {offset} > 0; {offset} /= 2) {{",
               *(INDENT + combined(p, f"__shfl_down_sync(0xffffffffu, {p.name}, {offset})") for p in partials),
               "}"]
    return [*(f"__shared__ {p.type} {slot}[32];" for p, slot in zip(partials, slots)),
            f"const int {lane} = {thread} % 32, {warp} = {thread} / 32;",
            *shuffle,
            f"if ({lane} == 0) {{",
            *(f"{INDENT}{slot}[{warp}] = {p.name};" for p, slot in zip(partials, slots)),
            "}",
            "__syncthreads();",
            f"if ({warp} == 0) {{",
            *(f"{INDENT}{p.name} = {lane} < ({width} + 31) / 32 ? {slot}[{lane}] : {p.pad};"
              for p, slot in zip(partials, slots)),
            *(INDENT + line for line in shuffle),
            f"{INDENT}if ({lane} == 0) {{",
            *(INDENT * 2 + line for line in finish),
            f"{INDENT}}}",
            "}"]


def _render(model: Accumulation, spec: KernelSpec) -> str:
    kernel = model.kernel
    taken = identifiers(kernel.source)
    names = {key: fresh_name(key, taken) for key in ("first", "k", "point", "interior")}
    registers = {"atomicAdd": "sum", "atomicMin": "low", "atomicMax": "high"}
    sums = [fresh_name(f"{registers[t.atomic]}{j}", taken) for j, t in enumerate(model.targets)]
    flags = [fresh_name(f"reached{j}", taken) for j in range(len(model.targets))] if model.named else []

    def site(s: Site) -> str:
        combined = model.targets[s.target].combined(sums[s.target], s.value)
        return f"{{ {combined} {flags[s.target]} = 1; }}" if flags else combined
    combined = [(s.start, s.end, site(s)) for s in model.sites]
    body = points.point_body(kernel, combined)
    if model.by_thread:
        comment = ["// Each thread combines its elements_per_thread points in registers, and one atomic per address",
                   "// takes them where one of its points reached the address's atomic."]
    else:
        comment = ["// Hierarchical reduction: each thread combines its elements_per_thread points in registers, each",
                   "// warp combines its threads' with shuffles, warp 0 combines the warps', and one atomic per block",
                   "// and address takes the block's" + (" where one of its points reached the address's atomic."
                                                         if flags else ".")]
    prologue = [*comment,
                *(f"{t.type} {s} = {t.start};" for t, s in zip(model.targets, sums)),
                *(f"int {flag} = 0;" for flag in flags)]
    partials = [Partial(s, t.type, ATOMICS[t.atomic], t.start) for t, s in zip(model.targets, sums)]
    partials += [Partial(flag, "int", "max", "0") for flag in flags]
    finish = [f"{t.atomic}({t.address}, {s});" for t, s in zip(model.targets, sums)]
    if flags:
        finish = [f"if ({flag}) {line}" for flag, line in zip(flags, finish)]
    if model.by_thread:
        epilogue = finish
    elif len(kernel.axes) == 1 or model.by_row:
        epilogue = block_reduction(partials, kernel.axes[0].block, taken, finish)
    else:
        thread, threads = points.flattened_block(len(kernel.axes))
        epilogue = block_reduction(partials, threads, taken, finish, f"(int)({thread})")
    lines = points.march(kernel, model.marched, "elements_per_thread", names, body, prologue, epilogue,
                         interior=points.interior(kernel, model.marched, combined))
    return points.with_body(kernel, lines)


def _block_layout(spec: KernelSpec, dimensions: int) -> Layout:
    """The block sizes a 2D or 3D reduction tunes over: the spec's (else common ones) for each axis, restricted to
    blocks of whole warps and at most 1024 threads; the spec's block where it is one of them."""
    names = spec.block_size_names[:dimensions]
    fallback = [[32, 64, 128, 256], [1, 2, 4, 8], [1, 2, 4]]
    values = {name: block_values(spec, axis, lambda v: 1 <= v <= 1024, fallback[axis])
              for axis, name in enumerate(names)}
    threads = " * ".join(names)
    restrictions = (f"({threads}) % 32 == 0", f"{threads} <= 1024")

    def whole_warps(values: dict[str, list[int]]) -> list[dict[str, int]]:
        return [dict(zip(names, c)) for c in itertools.product(*values.values())
                if math.prod(c) % 32 == 0 and math.prod(c) <= 1024]
    combinations = whole_warps(values)
    if not combinations:
        values = {name: fallback[axis] for axis, name in enumerate(names)}
        combinations = whole_warps(values)
    given = {name: spec.params.get(name, 1) for name in names}
    block = given if given in combinations else \
        min(combinations, key=lambda c: abs(math.prod(c.values()) - 256))
    return Layout(tune_params={**values, "elements_per_thread": EPT_VALUES}, defaults={**block,
                  "elements_per_thread": 16}, restrictions=restrictions,
                  grid_div={"xyz"[dimensions - 1]: [names[-1], "elements_per_thread"]})


class AtomicAccumulationShape:
    name = "atomic_accumulation"
    kind = ("an accumulation into a few fixed addresses (or a few per row or column) with atomicAdd (or atomicMin, "
            "atomicMax)")
    rules = ("hierarchical_reduction",)

    def recognise(self, spec: KernelSpec) -> Accumulation:
        return recognise(spec)

    def reason(self, rule_id: str, model: Accumulation, spec: KernelSpec) -> str | None:
        return points.marched_under_its_guard(model.kernel, model.marched, spec) or _rows_beyond(model, spec)

    def render(self, model: Accumulation, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        if model.by_thread:  # the spec's block, whatever its warps: no shuffles
            axis = model.marched
            return _render(model, spec), Layout(
                tune_params={"elements_per_thread": EPT_VALUES}, defaults={"elements_per_thread": 16},
                grid_div={"xyz"[axis]: [spec.block_size_names[axis], "elements_per_thread"]})
        if len(model.kernel.axes) > 1 and not model.by_row:
            return _render(model, spec), _block_layout(spec, len(model.kernel.axes))
        x = spec.block_size_names[0]
        values = block_values(spec, 0, lambda v: v % 32 == 0 and 32 <= v <= 1024, BLOCK_SIZES)
        flat = {spec.block_size_names[a.axis]: 1 for a in model.kernel.axes[1:]
                if not points.one_thread_along(spec, a.axis)}
        if flat:  # the spec's widths were for blocks deeper along y or z: the flat block offers wider ones too
            values = sorted({*values, *BLOCK_SIZES})
        counts = sorted({*EPT_VALUES, *_filling_a_row(spec, values)})
        layout = Layout(tune_params={x: values, "elements_per_thread": counts, **{n: [1] for n in flat}},
                        defaults={x: default_in(values, spec.params.get(x), 256), "elements_per_thread": 16, **flat},
                        grid_div={"x": [x, "elements_per_thread"]})
        return _render(model, spec), layout


def _filling_a_row(spec: KernelSpec, widths: list[int]) -> list[int]:
    """The counts of points per thread with which one to four blocks of a width cover the x extent at the spec's
    sizes at least 90% full. The powers of two leave short rows half empty: two blocks of 128 threads and 16 points
    cover 4,096 points, of which a row of 56 x 56 (a ResNet channel) fills 77% (channel_stats, 83% of the copy on
    the H200); 25 points fill one such block 98%."""
    dims = spec.dimensions
    length = (values_around(spec, dims[0]) or [None])[0]
    if not isinstance(length, int | float) or length < 1:
        return []
    found = set()
    for width in widths:
        for blocks in range(1, 5):
            count = math.ceil(length / (blocks * width))
            if count <= max(EPT_VALUES) and length >= 0.9 * blocks * width * count:
                found.add(count)
    return sorted(found)


def _rows_beyond(model: Accumulation, spec: KernelSpec) -> str | None:
    """Why sums by row cannot make the blocks one thread deep along y or z: the submitted blocks are deeper there,
    so its grid may pass the problem size along the axis, and only a guard bounding the axis's index within the
    problem size says its points past it do nothing (the rewrite's grid stops at the problem size); and a grid of a
    block per row must stay within CUDA's 65535 blocks along y and z, at the spec's sizes and around them."""
    if not model.by_row:
        return None
    dims = spec.dimensions
    for axis in model.kernel.axes[1:]:
        if points.one_thread_along(spec, axis.axis):
            continue
        letter = "xyz"[axis.axis]
        if points.marched_under_its_guard(model.kernel, axis.axis, spec) is not None:
            return (f"it adds by row, which the reduction runs with blocks one thread deep along {letter}, and its "
                    f"blocks are deeper there without one guard bounding {axis.name} within the problem size "
                    f"(`if ({axis.name} < rows && ...)`): the submitted grid's points past the problem size along "
                    f"{letter} might do work the rewrite's grid, stopping there, would not")
        rows = values_around(spec, dims[axis.axis])
        if rows is None or max(rows) > GRID_LIMIT:
            return (f"it adds by row, which the reduction runs with blocks one thread deep along {letter}, and a "
                    f"block per row along {letter} would pass CUDA's {GRID_LIMIT} blocks")
    return None
