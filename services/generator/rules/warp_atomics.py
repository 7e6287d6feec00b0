"""Per-thread accumulators combined by warp shuffles and one atomic per warp, restructured to one per block.

Recognised, whatever the names: the kernel declares accumulators (`long long s = 0; int lo = INT_MAX;`), runs
a grid-stride loop that updates them, then combines them within each warp by shuffles (`s +=
__shfl_down_sync(mask, s, offset)`, `lo = min(lo, __shfl_down_sync(...))`) and hands each to an atomic from
one lane per warp: `atomicAdd(total, s)`, `atomicMin(min_out, lo)`, `atomicMax(...)`, casts allowed where they
convert alike per warp and per block (an integer sum to another integer type of its width). Every
atomic takes a fixed address (parameters only) and one accumulator, and its operation tells how that
accumulator combines. Per warp, the same few addresses still take one atomic each from thousands of warps.

Rendered: the declarations and the loop stay as they are; what followed them becomes one block reduction per
accumulator (shuffles, one shared slot per warp, warp 0 combining the slots, lanes past the last warp
contributing the accumulator's initial value) and the original atomics, run by thread 0 alone with the block's
results. A sum must start at zero; a minimum or maximum may start anywhere, combining it twice changes
nothing. A kernel whose tail already shares values through shared memory (a barrier) is refused: it already
issues one atomic per block. When the launch divides the grid by the block size, elements_per_thread becomes
tunable there (the loop strides over whatever grid it gets).
"""
import re
from dataclasses import dataclass

from services.generator.rules.cuda_text import IDENTIFIER, Kernel, find_kernel, identifiers, mask, pointee
from services.generator.rules.loops import strided_loop
from services.generator.rules.points import INTEGER_TYPE
from services.generator.rules.reduction import ATOMICS, BLOCK_SIZES, EPT_VALUES, TYPE_WORDS, Partial, block_reduction
from services.generator.rules.shape import Layout, NotRecognised, block_values, default_in
from services.generator.rules.statements import Statement, body_of
from shared.domain.spec import KernelSpec

ZERO = re.compile(r"\(?\s*0+(?:\.0*)?[fFuUlL]*\s*\)?")
_TYPE = rf"(?:float|double|{INTEGER_TYPE})"
_SHUFFLE = r"__shfl_(?:down|xor)_sync\s*\([^;]*\)"


@dataclass(frozen=True)
class Accumulator:
    name: str
    type: str
    initial: str
    combine: str


@dataclass(frozen=True)
class WarpAtomics:
    kernel: Kernel
    source: str
    loop_end: int  # where the tail starts
    accumulators: tuple[Accumulator, ...]
    atomics: tuple[str, ...]  # the atomic statements, as written


def recognise(spec: KernelSpec) -> WarpAtomics:
    source = spec.source
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    body = body_of(kernel, masked, NotRecognised)
    at = next((i for i, s in enumerate(body) if s.kind != "simple"), None)
    if at is None or body[at].kind != "for":
        raise NotRecognised("it is not accumulators declared, then a loop")
    loop = body[at]
    header = strided_loop(masked, uncommented, loop, {"blockDim.x", spec.block_size_names[0]}, {})
    if header is None or "blockIdx" not in header[2]:
        raise NotRecognised("its loop is not a grid-stride loop over the global thread index")
    tail = body[at + 1:]
    if re.search(r"\b__syncthreads\b", masked[loop.end:kernel.body_close]):
        raise NotRecognised("what follows its loop already shares values through shared memory: one atomic per block")
    declared = _declarations(masked, uncommented, body[:at])
    atomics: list[str] = []
    combines: dict[str, str] = {}
    shuffled: dict[str, set[str]] = {}
    parameters = set(_parameter_names(source, kernel))
    lanes = _lane_numbers(masked, tail)
    for statement in tail:
        _tail_statement(masked, uncommented, statement, atomics, combines, shuffled, parameters, lanes)
    if not atomics:
        raise NotRecognised("no atomic follows its loop")
    loop_text = masked[loop.start:loop.end]
    accumulators = []
    for name, combine in combines.items():
        if name not in declared:
            raise NotRecognised(f"{name}, which an atomic takes, is not declared before the loop")
        type_, initial = declared[name]
        if combine == "+" and not ZERO.fullmatch(initial):
            raise NotRecognised(f"{name} starts at {initial}, not 0: its sum would change with the thread count")
        if set(IDENTIFIER.findall(mask(initial))) & (parameters | set(declared)):
            raise NotRecognised(f"{name} starts at {initial}, which depends on the kernel's values")
        if not re.search(rf"\b{name}\b", loop_text):
            raise NotRecognised(f"the loop does not update {name}")
        wrong = shuffled.get(name, set()) - {combine}
        if wrong:
            raise NotRecognised(f"{name} is combined by {', '.join(sorted(wrong))} across lanes but by {combine} in "
                                f"its atomic")
        accumulators.append(Accumulator(name, type_, initial, combine))
    types = {a.name: a.type for a in accumulators}
    pointees = dict(filter(None, (pointee(source[a:b]) for a, b in kernel.parameters(source))))
    for atomic in atomics:
        why = _conversion_reason(atomic, types, pointees)
        if why is not None:
            raise NotRecognised(why)
    return WarpAtomics(kernel, source, loop.end, tuple(accumulators), tuple(atomics))


def _conversion_reason(atomic: str, types: dict[str, str], pointees: dict[str, str]) -> str | None:
    """Why the block's combination, made in the accumulator's own type, could differ from the warps' atomics, which
    convert each warp's value (a cast, or the atomic's element type) before combining: an integer sum may take
    another integer type of its width (two's complement adds alike either way), but no other conversion, and a
    minimum or maximum none (a signed order is not an unsigned one). Found by review (helper-85): an int summed over
    a block overflowed where each warp's sum, widened to 64 bits first, did not; a float truncated once per block
    gave another count than truncated per warp."""
    call = re.fullmatch(r"(atomic\w+)\s*\((.*)\)\s*;", atomic)
    address, _, value = call[2].rpartition(",")
    accumulator = _stripped(value)
    casts = [m[1] or m[2] for m in
             re.finditer(r"static_cast\s*<\s*([^<>]*?)\s*>|\(\s*([A-Za-z_][\w\s]*?)\s*\)\s*(?=[\w(])", value)]
    target = re.search(r"(?:reinterpret_cast\s*<\s*|\(\s*)((?:const\s+)?[A-Za-z_][\w\s]*?)\s*\*\s*(?:>|\))", address)
    named = next((pointees[n] for n in IDENTIFIER.findall(address) if n in pointees), None)
    converted = [*casts, target[1] if target else named]
    own = _normal(types[accumulator])
    for kind in converted:
        if kind is None:
            return f"the element type of `{address.strip()}` is not in sight"
        kind = _normal(kind)
        alike = kind == own or (call[1] == "atomicAdd" and _WIDTHS.get(kind) is not None and
                                _WIDTHS.get(kind) == _WIDTHS.get(own))
        if not alike:
            return (f"`{atomic}` converts {accumulator} ({types[accumulator]}) to {kind} for each warp, which a "
                    f"block's combination in {types[accumulator]} would not do alike")
    return None


# The integer types by width, as _normal spells them: a sum of two's-complement values is the same in any of a width.
_WIDTHS = {**dict.fromkeys(("int", "unsigned int", "int32_t", "uint32_t"), 32),
           **dict.fromkeys(("long long", "unsigned long long", "long", "unsigned long", "int64_t", "uint64_t",
                            "size_t", "ptrdiff_t"), 64)}


def _normal(kind: str) -> str:
    words = [w for w in kind.replace("std::", "").split() if w not in ("const", "volatile", "signed")]
    if words[-1:] == ["int"] and len(words) > 1:
        words = words[:-1]
    return " ".join(words) + (" int" if words == ["unsigned"] else "") if words else "int"


def _parameter_names(source: str, kernel: Kernel) -> list[str]:
    found = []
    for start, end in kernel.parameters(source):
        names = IDENTIFIER.findall(mask(source[start:end]))
        if names:
            found.append(names[-1])
    return found


def _declarations(masked: str, uncommented: str, before: list[Statement]) -> dict[str, tuple[str, str]]:
    declared = {}
    for statement in before:
        text = masked[statement.start:statement.end]
        match = re.fullmatch(rf"\s*(?P<type>{_TYPE})\s+(?P<rest>[^;]*);\s*", text, re.DOTALL)
        if match is None:
            raise NotRecognised(f"before its loop it does more than declare accumulators: "
                                f"`{' '.join(text.split())}`")
        at = statement.start + match.start("rest")
        for part in match["rest"].split(","):
            named = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(.+)", part, re.DOTALL)
            if named is not None:
                initial_at = at + named.start(2)
                initial = " ".join(uncommented[initial_at:initial_at + len(named.group(2))].split())
                declared[named.group(1)] = (" ".join(match["type"].split()), initial)
            at += len(part) + 1
    return declared


def _lane_numbers(masked: str, tail: list[Statement]) -> set[str]:
    """The integer locals the tail declares from threadIdx alone (lane and warp numbers)."""
    found = set()
    for statement in tail:
        text = masked[statement.start:statement.end]
        if statement.kind != "simple" or not re.match(rf"\s*(?:const\s+)?{INTEGER_TYPE}\s", text):
            continue
        for name, initial in re.findall(r"([A-Za-z_]\w*)\s*=([^,;]*)", text):
            if set(IDENTIFIER.findall(initial)) <= {"threadIdx", "x", "warpSize"} | found:
                found.add(name)
    return found


def _tail_statement(masked: str, uncommented: str, statement: Statement, atomics: list[str],
                    combines: dict[str, str], shuffled: dict[str, set[str]], parameters: set[str],
                    lanes: set[str], in_loop: bool = False) -> None:
    """Accept what a per-warp combination does after the loop, or refuse the kernel: shuffles of the
    accumulators, lane numbers, and atomics chosen by the lane alone (run once each, not in a loop)."""
    text = " ".join(masked[statement.start:statement.end].split())
    if statement.kind in ("for", "if", "block"):
        if statement.kind == "if":
            condition = set(IDENTIFIER.findall(masked[statement.head[0]:statement.head[1]]))
            if not condition <= {"threadIdx", "x", "warpSize"} | lanes:
                raise NotRecognised(f"an atomic after its loop depends on "
                                    f"{', '.join(sorted(condition - {'threadIdx', 'x', 'warpSize'} - lanes))}, not "
                                    f"only on the lane")
        for child in statement.children(masked):
            _tail_statement(masked, uncommented, child, atomics, combines, shuffled, parameters, lanes,
                            in_loop or statement.kind == "for")
        return
    if statement.kind in ("empty", "directive"):
        return
    call = re.fullmatch(r"(atomic\w+)\s*\((.*)\)\s*;", text)
    if call is not None and in_loop:
        raise NotRecognised("an atomic after its loop sits in a loop of its own")
    if call is not None:
        operation = ATOMICS.get(call.group(1))
        if operation is None:
            raise NotRecognised(f"it uses {call.group(1)}; the hierarchical reduction takes atomicAdd, atomicMin "
                                f"and atomicMax")
        address, _, value = call.group(2).rpartition(",")
        outside = set(IDENTIFIER.findall(address)) - parameters - TYPE_WORDS
        if outside:
            raise NotRecognised(f"an atomic's address `{address.strip()}` depends on {', '.join(sorted(outside))}")
        accumulator = _stripped(value)
        if accumulator is None:
            raise NotRecognised(f"an atomic adds `{value.strip()}`, not one accumulator")
        if combines.setdefault(accumulator, operation) != operation:
            raise NotRecognised(f"{accumulator} goes to two different atomics")
        atomics.append(" ".join(uncommented[statement.start:statement.end].split()))
        return
    if re.fullmatch(rf"(?:const\s+)?{INTEGER_TYPE}\s+[^;]*;", text) and "__shfl" not in text:
        return  # lane and warp numbers
    shuffle = re.fullmatch(rf"([A-Za-z_]\w*)\s*\+=\s*{_SHUFFLE}\s*;", text)
    if shuffle is not None:
        shuffled.setdefault(shuffle.group(1), set()).add("+")
        return
    shuffle = re.fullmatch(rf"([A-Za-z_]\w*)\s*=\s*(\w+)\s*\(\s*(\w+)\s*,\s*{_SHUFFLE}\s*\)\s*;", text)
    if shuffle is not None and shuffle.group(1) == shuffle.group(3):
        shuffled.setdefault(shuffle.group(1), set()).add(_function(shuffle.group(2)))
        return
    raise NotRecognised(f"after its loop it does more than combine warps and call atomics: `{text}`")


def _function(name: str) -> str:
    return {"fminf": "min", "fmin": "min", "fmaxf": "max", "fmax": "max"}.get(name, name)


def _stripped(value: str) -> str | None:
    """The accumulator an atomic's value is, through casts: static_cast<unsigned long long>(s) -> s."""
    text = value.strip()
    while True:
        cast = re.fullmatch(r"static_cast\s*<[^<>]*>\s*\((.*)\)|\(\s*[A-Za-z_][\w\s]*\)\s*(.*)|\((.*)\)", text)
        if cast is None:
            break
        text = next(g for g in cast.groups() if g is not None).strip()
    return text if re.fullmatch(r"[A-Za-z_]\w*", text) else None


def _render(model: WarpAtomics) -> str:
    taken = identifiers(model.source)
    partials = [Partial(a.name, a.type, a.combine, f"({a.type})({a.initial})") for a in model.accumulators]
    lines = ["// One atomic per block instead of one per warp: each accumulator is combined over the block (warp",
             "// shuffles, then warp 0 over one shared slot per warp) and thread 0 hands the block's results to the",
             "// atomics.",
             *block_reduction(partials, "blockDim.x", taken, list(model.atomics))]
    line_start = model.source.rfind("\n", 0, model.loop_end)
    indent = re.match(r"\n?([ \t]*)", model.source[line_start:]).group(1)
    tail = "".join(f"\n{indent}{line}" if line else "\n" for line in lines)
    return model.source[:model.loop_end] + tail + "\n" + model.source[model.kernel.body_close:]


class WarpAtomicsShape:
    name = "warp_atomics"
    kind = "per-thread accumulators handed to atomics per warp"
    rules = ("hierarchical_reduction",)

    def recognise(self, spec: KernelSpec) -> WarpAtomics:
        return recognise(spec)

    def reason(self, rule_id: str, model: WarpAtomics, spec: KernelSpec) -> str | None:
        return None

    def render(self, model: WarpAtomics, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        x = spec.block_size_names[0]
        values = block_values(spec, 0, lambda v: v % 32 == 0 and 32 <= v <= 1024, BLOCK_SIZES)
        space = {x: values}
        defaults = {x: default_in(values, spec.params.get(x), 256)}
        divisors = {}
        # The grid follows the problem size: choose how much a thread takes. Not on a grid the spec fixes
        # (grid_div_x: [], a block per unit of the problem size), which the grid-stride loop relies on.
        if x in (spec.grid_div_x if spec.grid_div_x is not None else [x]):
            space["elements_per_thread"] = EPT_VALUES
            defaults["elements_per_thread"] = 16
            divisors = {"x": [x, "elements_per_thread"]}
        return _render(model), Layout(tune_params=space, defaults=defaults, grid_div=divisors)
