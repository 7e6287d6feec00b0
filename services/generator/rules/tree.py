"""shuffle_reduction: shared-memory tree reductions replaced by warp shuffles.

Recognised anywhere in the source (a kernel or a __device__ helper), whatever the names:

    for (int s = blockDim.x / 2; s > 0; s /= 2) {          // or block_size_x, >> 1, s >= 1, s >>= 1, s = s / 2
        if (tid < s) red[tid] += red[tid + s];              // or red[tid] = fmaxf(red[tid], red[tid + s]) ...
        __syncthreads();                                    // or first in the loop's body
    }

with `red` a __shared__ array (static or extern) or a pointer a helper receives, `tid` threadIdx.x or a local
equal to it, and the combination +, or fmaxf/fminf/max/min/fmax/fmin; or a tree doubling its stride, as Harris's
first reductions do: `for (s = 1; s < blockDim.x; s *= 2)` combining into red[tid] where `tid % (2 * s) == 0`, or
into red[index] where `index = 2 * s * tid` is below the block size. Before the loop each thread has put its
value in red[tid] and passed a barrier; after it red[0] holds the block's result, seen by every thread. The
replacement keeps that contract: each thread takes red[tid], every warp combines its 32 values with
__shfl_down_sync, the warps' results go to red[0..warps-1], warp 0 combines those, and red[0] is written before a
last barrier: three barriers and no shared-memory traffic per step instead of one barrier per halving. The other
entries of red no longer hold the tree's partial results. The block must be whole warps (the rule restricts the
block size to multiples of 32). Only the block's combination changes: each block takes the same elements, and
where the kernel writes one result per block from elements taken by block size (a grid-stride share), the engine
keeps the block size at the submitted kernel's (services/generator/rules/partition.py).
"""
import re
from dataclasses import dataclass

from services.generator.rules.cuda_text import (EXTREMA, closing, declared_parameters, fresh_name, identifiers, mask,
                                                split_top_level)
from services.generator.rules.partition import partition
from services.generator.rules.points import INDENT
from services.generator.rules.statements import Statement, Unparsed, for_loops, statements
from shared.domain.spec import KernelSpec

UNROLL = re.compile(r"\s*#\s*pragma\s+unroll\b")
FUNCTIONS = (*EXTREMA["max"], *EXTREMA["min"])


@dataclass(frozen=True)
class Tree:
    loop: Statement
    array: str
    type: str  # the shared array's element type
    thread: str  # threadIdx.x or the local that holds it
    width: str  # blockDim.x or the block-size define the halving starts from
    combine: str  # "+" or one of FUNCTIONS
    barrier_first: bool = False  # each step starts with its barrier rather than ending with it


def shuffle_reduction_reason(source: str, spec: KernelSpec) -> str | None:
    if tree_loops(source, spec):
        return whole_warps_reason(spec)
    return ("the kernel has no shared-memory tree reduction (a loop halving s from the block size, "
            "`if (tid < s) red[tid] += red[tid + s]; __syncthreads();`)")


def shuffle_reduction_edit(source: str, spec: KernelSpec) -> str:
    taken = identifiers(source)
    return replace_loops(source, [(tree.loop, _replacement(tree, taken)) for tree in tree_loops(source, spec)])


def whole_warps_reason(spec: KernelSpec) -> str | None:
    """Why the kernel runs at no block size of whole warps, which warp shuffles need; None when it may."""
    x = spec.block_size_names[0]
    values = spec.tune_params.get(x) or [spec.baseline_params().get(x)]
    if x in partition(spec.source, spec).widths:  # one result per block: the block size stays (engine.py)
        values = [spec.baseline_params().get(x)]
    if not any(isinstance(v, int) and v % 32 == 0 for v in values):
        return f"no value of {x} ({values}) is a multiple of 32, which warp shuffles need"
    return None


def replace_loops(source: str, replacements: list[tuple[Statement, list[str]]]) -> str:
    """Each loop replaced by its lines, the later ones at the loop's indentation; the loop's unroll pragma goes
    with it. The last loop first, so the earlier ones' offsets hold."""
    for loop, lines in sorted(replacements, key=lambda r: r[0].start, reverse=True):
        start, _ = unroll_pragma(source, loop.start)
        line_start = source.rfind("\n", 0, start) + 1
        indent = re.match(r"[ \t]*", source[line_start:]).group()
        text = "\n".join(lines[:1] + [indent + line if line else line for line in lines[1:]])
        source = source[:start] + text + source[loop.end:]
    return source


def unroll_pragma(source: str, at: int) -> tuple[int, str]:
    """Where the edit of the loop at `at` starts, and the `#pragma unroll` line right before it ('' without one,
    the edit then starting at the loop)."""
    before = mask(source)[:at].rstrip()
    line_start = before.rfind("\n") + 1
    if not UNROLL.match(before[line_start:]):
        return at, ""
    hash_at = before.index("#", line_start)
    return hash_at, source[hash_at:len(before)]


def tree_loops(source: str, spec: KernelSpec) -> list[Tree]:
    masked = mask(source)
    shared = shared_arrays(masked)
    widths = ("blockDim.x", spec.block_size_names[0])
    return [tree for loop in for_loops(masked) if (tree := _tree(masked, loop, shared, widths)) is not None]


def shared_arrays(masked: str) -> dict[str, str]:
    """The element type of each array a block can share: __shared__ arrays, and pointers a helper receives
    (`float *red`) where every call of the helper passes it one of those, which the block's barriers make as
    visible to it as shared ones. A kernel's pointer parameters are global memory (review, helper-85: a tree over
    a global array was rewritten, and its entries past the first, outputs there, were left otherwise)."""
    arrays = {}
    for match in re.finditer(r"__shared__\s+(?:volatile\s+)?([A-Za-z_][\w ]*?)\s+([A-Za-z_]\w*)\s*\[", masked):
        arrays[match.group(2)] = " ".join(match.group(1).split())
    kernels = set(re.findall(r"__global__\s+[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", masked))
    helpers = [(name, parameters) for name, parameters in declared_parameters(masked) if name not in kernels]
    found = True
    while found:  # a helper passing its pointer on to another
        found = False
        for name, parameters in helpers:
            for place, parameter in enumerate(split_top_level(parameters, ",")):
                pointer = re.fullmatch(r"\s*(?:const\s+)?(?:volatile\s+)?([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*?)\s*\*\s*"
                                       r"(?:__restrict__\s+)?([A-Za-z_]\w*)\s*", parameter)
                if pointer and pointer[2] not in arrays and _passed_shared(masked, name, place, arrays):
                    arrays[pointer[2]] = " ".join(pointer[1].split())
                    found = True
    return arrays


def _passed_shared(masked: str, function: str, place: int, arrays: dict[str, str]) -> bool:
    """Whether every call of the function passes, at `place`, one of `arrays` (`red`, `red + k`, `&red[k]`), and
    there is one."""
    calls = 0
    for match in re.finditer(rf"\b{function}\s*\(", masked):
        close = closing(masked, match.end() - 1)
        if re.match(r"\s*(?:const\s*)?[{;]", masked[close + 1:]) and \
                re.search(r"\b(?!return\b|else\b|case\b|do\b)[A-Za-z_]\w*[\s*&]+$",
                          masked[max(0, match.start() - 80):match.start()]):
            continue  # its declaration or definition, a type before its name
        arguments = split_top_level(masked[match.end():close], ",")
        if place >= len(arguments) or not re.fullmatch(
                rf"\s*(?:&\s*)?({'|'.join(map(re.escape, arrays)) or '(?!)'})\b\s*(?:\[[^\]]*\])?\s*(?:\+[^,]*)?",
                arguments[place]):
            return False
        calls += 1
    return calls > 0


def compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def is_thread_x(masked: str, name: str) -> bool:
    """Whether `name` is threadIdx.x or a local set to it."""
    return name == "threadIdx.x" or re.search(rf"\b{re.escape(name)}\s*=\s*threadIdx\s*\.\s*x\s*;", masked) is not None


def _tree(masked: str, loop: Statement, shared: dict[str, str], widths: tuple[str, ...]) -> Tree | None:
    parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    if len(parts) != 3 or loop.body.kind != "block":
        return None
    init, condition, step = (compact(p) for p in parts)
    halving = re.fullmatch(r"(?:const)?(?:unsignedint|unsigned|int)([A-Za-z_]\w*)=(.+?)(?:/2|>>1)", init)
    doubling = re.fullmatch(r"(?:unsignedint|unsigned|int)([A-Za-z_]\w*)=1", init)
    if halving and halving.group(2) in widths:
        s, width = halving.group(1), halving.group(2)
        if condition not in (f"{s}>0", f"0<{s}", f"{s}>=1", f"{s}!=0", f"0!={s}") \
                or step not in (f"{s}/=2", f"{s}>>=1", f"{s}={s}/2", f"{s}={s}>>1"):
            return None
    elif doubling and (width := condition.removeprefix(f"{doubling.group(1)}<")) in widths:
        s = doubling.group(1)
        if step not in (f"{s}*=2", f"{s}<<=1", f"{s}={s}*2", f"{s}=2*{s}", f"{s}={s}<<1"):
            return None
    else:
        return None
    try:
        inside = statements(masked, *loop.body.inner)
    except Unparsed:
        return None
    # The barrier after each step, or before it (the replacement then starts with one, as the loop did).
    barriers = [compact(masked[st.start:st.end]) == "__syncthreads();" for st in inside]
    if barriers not in ([False, True], [True, False]) and not (doubling and barriers == [False, False, True]):
        return None
    guard = inside[barriers.index(True) - 1] if not barriers[0] else inside[1]
    if guard.kind != "if" or guard.orelse is not None:
        return None
    t, at = _stepped(masked, inside[0] if len(inside) == 3 else None, guard, s, width if doubling else None)
    if t is None or not is_thread_x(masked, t):
        return None
    action = compact(masked[guard.body.start:guard.body.end])
    if action.startswith("{") and action.endswith("}"):
        action = action[1:-1]
    for name, element in shared.items():
        mine, other = f"{name}[{at}]", f"{name}[{at}+{s}]"
        if action in (f"{mine}+={other};", f"{mine}={mine}+{other};", f"{mine}={other}+{mine};"):
            return Tree(loop, name, element, t, width, "+", barriers[0])
        for function in FUNCTIONS:
            if action in (f"{mine}={function}({mine},{other});", f"{mine}={function}({other},{mine});"):
                return Tree(loop, name, element, t, width, function, barriers[0])
    return None


def _stepped(masked: str, declared: Statement | None, guard: Statement, s: str,
             width: str | None) -> tuple[str | None, str]:
    """(the thread index, the entry a step combines into): a halving tree's `if (t < s)` combines into t; a
    doubling tree's (`width` its bound) `if (t % (2 * s) == 0)` into t, Harris's interleaved addressing, or
    `int index = 2 * s * t; if (index < width)` into index, his strided one. Each combines every entry of a
    block of a power of two threads into entry 0; (None, "") for any other step."""
    tested = compact(masked[guard.head[0]:guard.head[1]])
    if width is None:
        found = declared is None and re.fullmatch(rf"([A-Za-z_][\w.]*)<{s}", tested)
        return (found.group(1), found.group(1)) if found else (None, "")
    if declared is None:
        twice = rf"(?:2\*{s}|{s}\*2)"
        found = re.fullmatch(rf"\(?([A-Za-z_][\w.]*)%\({twice}\)\)?==0|0==\(?([A-Za-z_][\w.]*)%\({twice}\)\)?",
                             tested)
        thread = found and (found.group(1) or found.group(2))
        return (thread, thread) if thread else (None, "")
    index = re.fullmatch(r"(?:const)?(?:unsignedint|unsigned|int)([A-Za-z_]\w*)=([^;]+);",
                         compact(masked[declared.start:declared.end]))
    factors = index.group(2).split("*") if index else []
    thread = [f for f in factors if f not in (s, "2")]
    if index is None or tested != f"{index.group(1)}<{width}" or sorted(factors) != sorted([s, "2", *thread]) or \
            len(thread) != 1 or not re.fullmatch(r"[A-Za-z_][\w.]*", thread[0]):
        return None, ""
    return thread[0], index.group(1)


def _replacement(tree: Tree, taken: set[str]) -> list[str]:
    v, o = fresh_name("value", taken), fresh_name("offset", taken)
    t, red = tree.thread, tree.array

    def combined(other: str) -> str:
        return f"{v} += {other};" if tree.combine == "+" else f"{v} = {tree.combine}({v}, {other});"

    pad = f"({tree.type})0" if tree.combine == "+" else f"{red}[0]"
    shuffle = ["#pragma unroll",
               f"for (int {o} = 16; {o} > 0; {o} /= 2) {{",
               f"{INDENT}{combined(f'__shfl_down_sync(0xffffffffu, {v}, {o})')}",
               "}"]
    return ["{",
            f"{INDENT}// Warp shuffles instead of a tree in shared memory: each warp combines its values in registers,",
            f"{INDENT}// then warp 0 the warps' results; {red}[0] holds the block's result for every thread after.",
            *([f"{INDENT}__syncthreads();  // as the loop's first step did"] if tree.barrier_first else []),
            f"{INDENT}{tree.type} {v} = {red}[{t}];",
            f"{INDENT}__syncthreads();  // every value is read before warps overwrite {red}[0..]",
            *(INDENT + line for line in shuffle),
            f"{INDENT}if ({t} % 32 == 0) {red}[{t} / 32] = {v};",
            f"{INDENT}__syncthreads();",
            f"{INDENT}if ({t} < 32) {{",
            f"{INDENT * 2}{v} = {t} < ({tree.width} + 31) / 32 ? {red}[{t}] : {pad};",
            *(INDENT * 2 + line for line in shuffle),
            f"{INDENT * 2}if ({t} == 0) {red}[0] = {v};",
            f"{INDENT}}}",
            f"{INDENT}__syncthreads();",
            "}"]
