"""Kernels that write one result per block, and whether the block size decides which inputs each result takes.

A kernel that writes `out[blockIdx.x]` (a global array at an address that depends on the block and on no thread
index) leaves a partial result per block: which inputs reach each output is the launch's partition of the
elements among blocks. A max, a count or an integer sum over another partition is another answer, not a
rounding of the same one, so a rewrite must keep it: one block per row (`in[blockIdx.x * len + c]` walked by
`c = threadIdx.x; c += blockDim.x`) covers its row whatever the block size, but a grid-stride share
(`i = blockIdx.x * block_size_x + threadIdx.x; i += gridDim.x * block_size_x`) changes with the block size, and
changes with anything that spreads the elements over the grid differently (vectors, elements per thread).

`partition(source, spec)` finds the per-block outputs and the block-size names their partition depends on: the
names that multiply blockIdx or gridDim of their axis anywhere in the kernel's index arithmetic (conservatively:
a kernel that also has an elementwise part, `out2[blockIdx.x * blockDim.x + threadIdx.x]`, counts too).
Along a y or z axis whose blocks are one thread deep (points.one_thread_along), blockIdx is the thread's index
there, `blockIdx.y * 1 + threadIdx.y`: `sums[blockIdx.y]` is then a result per row of points, not per block.
"""
import re
from collections.abc import Callable
from dataclasses import dataclass

from services.generator.rules import affine
from services.generator.rules.cuda_text import (EXTREMA, IDENTIFIER, closing, defined_functions, find_kernel,
                                                mask, split_top_level)
from services.generator.rules.points import ASSIGNMENT, one_thread_along
from services.generator.rules.statements import expression_end
from shared.domain.spec import KernelSpec

AXES = "xyz"


@dataclass(frozen=True)
class Partition:
    outputs: tuple[str, ...] = ()  # the per-block writes as written, e.g. "out[blockIdx.x]"
    widths: tuple[str, ...] = ()  # block-size names the outputs' partition depends on (only with outputs)

    def describe(self) -> str:
        return ", ".join(f"`{o}`" for o in self.outputs)


def partition(source: str, spec: KernelSpec) -> Partition:
    """The per-block outputs of the kernel and the block sizes their partition depends on; none for a kernel
    that cannot be read (the rules refuse it for that anyway)."""
    try:
        return _partition(source, spec)
    except ValueError:
        return Partition()


@dataclass(frozen=True)
class _Reading:
    """What the kernel's text says about its writes: its pointer parameters, and what each local is computed from
    (every name its right-hand sides hold, or only those outside loads: the index arithmetic a share follows)."""
    masked: str
    uncommented: str
    start: int
    end: int
    parameters: set[str]
    assigned: dict[str, list[str]]
    values: dict[str, set[str]]
    indices: dict[str, set[str]]

    def reach(self, names: set[str], depends: dict[str, set[str]] | None = None) -> set[str]:
        depends = self.indices if depends is None else depends
        seen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(depends.get(name, ()))
        return seen

    def writes(self) -> list[tuple[str, str, str, int, set[str]]]:
        """(text, array, address, offset, every name the array and address reach) of each write."""
        return [(text, base, address, at, self.reach(_names(address) | {base}, self.values))
                for text, base, address, at in _writes(self.masked, self.uncommented, self.start, self.end)]


def _read(source: str, spec: KernelSpec) -> _Reading:
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    start, end = kernel.body_open + 1, kernel.body_close
    parameters = set()
    for a, b in kernel.parameters(source):
        names = IDENTIFIER.findall(masked[a:b])
        if names and "*" in masked[a:b]:
            parameters.add(names[-1])
    assigned = _assignments(masked, start, end)
    values = {name: set().union(*(_names(rhs) for rhs in texts)) for name, texts in assigned.items()}
    indices = {name: set().union(*(_names(_without_subscripts(rhs)) for rhs in texts))
               for name, texts in assigned.items()}
    return _Reading(masked, uncommented, start, end, parameters, assigned, values, indices)


def per_thread_outputs(source: str, spec: KernelSpec, span: tuple[int, int],
                       element_loops: list[tuple[int, int, str]]) -> list[str]:
    """The writes outside `span` (a loop of the kernel) into its array parameters, stores or atomics, at an
    address that depends on the thread's place in its block (`partial[gid] = acc`, `out[gid / 32]`): results per
    thread or per warp, of whatever elements the thread (or warp) took. A store inside one of `element_loops`
    ((start, end, index) of loops spreading elements over threads) at an address computed from its index is the
    element's, not the thread's."""
    try:
        reading = _read(source, spec)
    except ValueError:
        return []
    threaded = {"threadIdx.x", *_thread_functions(reading.masked)}  # a helper's lane_id() reads it too
    return [text for text, _, address, at, names in reading.writes() if not span[0] <= at < span[1]
            and names & reading.parameters and names & threaded and
            not any(start <= at < end and index in reading.reach(_names(address), reading.values)
                    for start, end, index in element_loops)]


def _thread_functions(masked: str) -> set[str]:
    """The functions of the source that read threadIdx.x, themselves or through one they call (review, helper-87:
    a warp's output at `partial[global_warp()]`)."""
    bodies = {name: " ".join(masked[opening:close] for _, opening, close in found)
              for name, found in defined_functions(masked).items()}
    reading = {name for name, body in bodies.items() if re.search(r"\bthreadIdx\s*\.\s*x\b", body)}
    while more := {name for name, body in bodies.items() if name not in reading and
                   any(re.search(rf"\b{other}\s*\(", body) for other in reading)}:
        reading |= more
    return reading


def array_accesses(source: str, spec: KernelSpec) -> list[tuple[int, set[str], bool]]:
    """(offset, the array parameters it reaches, whether it writes) of each subscript of the kernel (`x[i]`, a
    pointer local's `row[c]` reaching x), each atomic's address, and each array parameter passed whole to a call
    (which may do either)."""
    try:
        reading = _read(source, spec)
    except ValueError:
        return []
    masked, params = reading.masked, reading.parameters
    found = [(at, names & params, True) for _, _, _, at, names in reading.writes()]
    written = {at for at, _, _ in found}
    for match in re.finditer(r"(?<![\w.\]>])([A-Za-z_]\w*)\s*\[", masked[reading.start:reading.end]):
        at = reading.start + match.start()
        if at not in written:
            found.append((at, reading.reach({match[1]}, reading.values) & params, False))
    for name in params:
        for match in re.finditer(rf"[(,]\s*{name}\s*[,)]", masked[reading.start:reading.end]):
            found.append((reading.start + match.start(), {name}, True))
    return found


def _partition(source: str, spec: KernelSpec) -> Partition:
    reading = _read(source, spec)
    threads = {f"blockIdx.{axis}" for number, axis in enumerate(AXES) if number and one_thread_along(spec, number)}
    outputs = []
    for text, _, _, _, names in reading.writes():
        by_thread = _any(names, "threadIdx.") or names & threads
        if names & reading.parameters and _any(names, "blockIdx.") and not by_thread and text not in outputs:
            outputs.append(text)
    outputs += [text for text in _blocks_combined_otherwise(reading) if text not in outputs]
    if not outputs:
        return Partition()
    masked, start, end, assigned, reach = reading.masked, reading.start, reading.end, reading.assigned, reading.reach
    expressions = [rhs for texts in assigned.values() for rhs in texts]
    expressions += [masked[m.end():closing(masked, m.end() - 1)]
                    for m in re.compile(r"[\w\]]\s*\[").finditer(masked, start, end)]
    widths = []
    for axis, name in zip(AXES, spec.block_size_names):
        grid, width = {f"blockIdx.{axis}", f"gridDim.{axis}"}, {f"blockDim.{axis}", name}
        if any(_multiplies(expression, reach, grid, width) for expression in expressions):
            widths.append(name)
    return Partition(tuple(outputs), tuple(widths))


_ATOMIC_COMBINES = {"atomicAdd": "+", "atomicMax": "max", "atomicMin": "min"}


def _blocks_combined_otherwise(reading: _Reading) -> list[str]:
    """Each atomic of a block's tree result (`atomicAdd(out, red[0])`) that combines the blocks' results
    otherwise than the tree combined the block's values (a maximum per block added up, a sum per block taken the
    largest of): a result per block, whose elements the partition decides (review, helper-100), as
    `out[blockIdx.x]` is."""
    masked, found = reading.masked, []
    for match in re.finditer(r"\b(atomic(?:Add|Max|Min))\s*\(", masked[reading.start:reading.end]):
        opening = reading.start + match.end() - 1
        arguments = split_top_level(masked[opening + 1:closing(masked, opening)], ",")
        trees = re.findall(r"([A-Za-z_]\w*)\s*\[\s*0\s*\]", arguments[-1]) if len(arguments) == 2 else []
        if any((combine := _tree_combine(masked, tree)) and combine != _ATOMIC_COMBINES[match[1]] for tree in trees):
            found.append(" ".join(reading.uncommented[reading.start + match.start():closing(masked, opening) + 1]
                                  .split()))
    return found


def _tree_combine(masked: str, array: str) -> str | None:
    """How the kernel combines entries of `array` into one another: "+" (`red[t] += red[t + s]`), "max" or "min"
    (`red[t] = fmaxf(red[t], red[t + s])`); None where it does not."""
    entry = rf"{array}\s*\[[^\]]*\]"
    if re.search(rf"{entry}\s*(?:\+=\s*{entry}|=\s*{entry}\s*\+\s*{entry})", masked):
        return "+"
    for combine, names in EXTREMA.items():
        if re.search(rf"{entry}\s*=\s*(?:{'|'.join(names)})\s*\(\s*{entry}\s*,\s*{entry}\s*\)", masked):
            return combine
    return None


def _names(text: str) -> set[str]:
    """The names in the text, members kept (`blockIdx.x`)."""
    return {re.sub(r"\s+", "", name) for name in re.findall(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*", text)}


def _any(names: set[str], prefix: str) -> bool:
    return any(name.startswith(prefix) for name in names)


def _assignments(masked: str, start: int, end: int) -> dict[str, list[str]]:
    """Every local's right-hand sides (`x = ...`, `x += ...`, declarations and loop headers alike)."""
    found: dict[str, list[str]] = {}
    for match in re.finditer(rf"(?<![\w.\]>])([A-Za-z_]\w*)\s*{ASSIGNMENT}", masked[start:end]):
        at = start + match.end()
        found.setdefault(match.group(1), []).append(masked[at:expression_end(masked, at, end)])
    return found


def _writes(masked: str, uncommented: str, start: int, end: int) -> list[tuple[str, str, str, int]]:
    """(text, array, address, offset) of each store `X[...] = ...` (or op=, ++, --) and each atomic's address."""
    found = []
    for match in re.finditer(r"(?<![\w.\]>])([A-Za-z_]\w*)\s*\[", masked[start:end]):
        opening = start + match.end() - 1
        close = closing(masked, opening)
        before = masked[:start + match.start()].rstrip()
        if re.match(rf"\s*(?:{ASSIGNMENT}|\+\+|--)", masked[close + 1:close + 8]) or before.endswith(("++", "--")):
            text = " ".join(uncommented[start + match.start():close + 1].split())
            found.append((text, match.group(1), masked[opening + 1:close], start + match.start()))
    for match in re.finditer(r"\batomic\w+\s*\(", masked[start:end]):
        opening = start + match.end() - 1
        first = masked[opening + 1:expression_end(masked, opening + 1, end)]
        names = IDENTIFIER.findall(first)
        if names:
            text = " ".join(uncommented[opening + 1:opening + 1 + len(first)].split())
            found.append((text, names[0], first, match.start() + start))
    return found


def _multiplies(expression: str, reach: Callable[[set[str]], set[str]], grid: set[str], width: set[str]) -> bool:
    """Whether a product in the expression takes a grid index (blockIdx, gridDim) and a block width, locals
    followed to what they are assigned (`i = blockIdx.x * bs + t` with `bs = blockDim.x`)."""
    expression = _without_subscripts(expression)  # a load's subscript is an expression of its own
    try:
        terms = [affine.names({term: 1}) for term in affine.parse(expression)]
    except affine.NotAffine:
        terms = [_names(expression)]
    return any(reach(names) & grid and reach(names) & width for names in terms)


def _without_subscripts(text: str) -> str:
    while (opening := text.find("[")) >= 0:
        try:
            text = text[:opening] + text[closing(text, opening) + 1:]
        except ValueError:
            return text.replace("[", " ")
    return text
