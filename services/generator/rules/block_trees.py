"""A block's shared-memory tree sum handed to one atomic, read as the accumulation it computes.

    __shared__ float cache[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cache[tid] = (i < n) ? in[i] : 0.0f;              // or an if with an else, or a zero then an if, or a local
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {    // a tree tree.py reads, adding
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, cache[0]);

adds every block's values, each once, into *total: where the block size is a power of two no larger than the
shared array, the tree adds each of the block's entries into cache[0]. So the kernel computes what

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(total, (float)(in[i]));

computes, but for the order of the additions (which a sum of floats takes in any order on the GPU's atomics too):
the shapes read it so (shapes.reading), and hierarchical_reduction renders the reduction that spells out what the
tree spelled by hand, with its own block size and elements per thread. Each value is evaluated as the kernel
evaluates it, once by its thread where the condition holds, converted to the shared array's type as the store into
it converts it.

The load may be spelled `if (i < n) cache[tid] = in[i]; else cache[tid] = 0;`, `cache[tid] = 0; if (i < n)
cache[tid] = in[i];`, or through a local, `float v = 0; if (i < n) v = in[i]; cache[tid] = v;` (the value then
converted to the local's type first, as the kernel converts it). A thread may also compute its value with
statements of its own before handing it (`float temp = 0; for (...) temp += a[i] * b[i]; cache[t] = temp;`, CUDA
by Example's dot product): those statements are kept, and every thread hands its value to the atomic, unguarded
(`atomicAdd(c, temp);`), where they name neither the array nor a barrier, a return or another thread's value.
Read only where the body is exactly that, in that order: the shared array's declaration and integer locals of the
launch geometry (in any order; those the rest does not read go), the load, a barrier, the tree (a while loop
halving its index to 0 is the for loop canonical.py reads it as), and the one atomicAdd of cache[0] by the thread
whose index is 0 into an address of parameters and numbers alone, of the shared array's element type (a tree
in a narrower type wraps, or rounds, where the total does not); the array read nowhere else and the condition
and value not reading it; every block size the spec may launch (its own and each it tunes) a power of two no
larger than the array.
"""
import re

from services.generator.rules.cuda_text import find_kernel, mask, pointee, unparenthesised
from services.generator.rules.points import INDENT, parameters_of
from services.generator.rules.row_passes import SIZES
from services.generator.rules.statements import Statement, Unparsed, statements
from services.generator.rules.tree import is_thread_x, tree_loops
from shared.domain.spec import KernelSpec

_ZERO = r"\(?\s*(?:0[uUlL]*|0\.0*|\.0+|0\.?0*[fF])\s*\)?"
_SHARED = re.compile(r"\s*(?P<extern>extern\s+)?__shared__\s+(?:volatile\s+)?[A-Za-z_][\w ]*?\s+"
                     r"(?P<name>[A-Za-z_]\w*)\s*\[\s*(?P<size>\w*)\s*\]\s*;\s*")
_LOCAL = re.compile(r"\s*(?:const\s+)?(?:unsigned\s+int|unsigned|int|long\s+long|size_t)\s+(?P<name>[A-Za-z_]\w*)\s*"
                    r"=[^;]*;\s*")
_ARITHMETIC = r"(?:float|double|int|unsigned\s+int|unsigned|long\s+long|unsigned\s+long\s+long)"
_GEOMETRY = re.compile(r"\b(?:threadIdx|blockIdx|blockDim)\s*\.\s*[xyz]\b")


def atomic_form(spec: KernelSpec) -> KernelSpec | None:
    """The spec with its kernel read as the accumulation its tree computes (above); None where it is not such a
    kernel."""
    try:
        kernel = find_kernel(spec.source, spec.kernel_name)
        masked = mask(spec.source)
        body = statements(masked, kernel.body_open + 1, kernel.body_close)
    except (ValueError, Unparsed):
        return None
    trees = [t for t in tree_loops(spec.source, spec) if kernel.body_open < t.loop.start < kernel.body_close]
    if len(trees) != 1 or trees[0].combine != "+":
        return None
    tree = trees[0]
    place = next((k for k, s in enumerate(body) if s.start <= tree.loop.start < s.end), None)
    if place is None or place < 2 or len(body) != place + 2 or body[place].kind != "for" or \
            re.sub(r"\s", "", masked[body[place - 1].start:body[place - 1].end]) != "__syncthreads();":
        return None
    array, element = tree.array, " ".join(tree.type.split())
    # the tree's thread index however the kernel spells it: threadIdx.x, or a local holding it (`tid`)
    holding = re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*=\s*threadIdx\s*\.\s*x\s*;",
                         masked[kernel.body_open:kernel.body_close])
    names = sorted({name for name in (tree.thread, *holding) if is_thread_x(masked, name)} - {"threadIdx.x"})
    thread = "(?:" + "|".join([r"threadIdx\s*\.\s*x\b", *(rf"{re.escape(name)}\b" for name in names)]) + ")"
    shared = [s for s in body[:place - 1] if _SHARED.fullmatch(_text(masked, s))]
    kept = [s for s in body[:place - 1] if s not in shared and _LOCAL.fullmatch(_text(masked, s)) and
            _GEOMETRY.search(_text(masked, s))]
    load = [s for s in body[:place - 1] if s not in shared and s not in kept]
    declared = _SHARED.fullmatch(_text(masked, shared[0])) if len(shared) == 1 else None
    if declared is None or declared["name"] != array or not load or \
            load != body[place - 1 - len(load):place - 1] or \
            any(re.search(rf"(?<![\w.]){array}\b", _text(masked, s)) for s in kept):
        return None
    uncommented = mask(spec.source, literals=False)
    parameters = parameters_of(spec.source, kernel)
    loaded = _load(spec.source, masked, (load[0].start, load[-1].end), array, thread, parameters)
    handed = None if loaded is not None else _handed(uncommented, masked, load, array, thread)
    found = _added(uncommented, masked, body[place + 1], array, thread, parameters)
    if loaded is None and handed is None or found is None or bool(declared["extern"]) == bool(declared["size"]) or \
            not _powers_of_two_within(spec, declared["size"], element) or _target_type(found[0], parameters) != element:
        return None  # a tree in another type than the total's wraps or rounds there (review, helper-97)
    added, scaled = found
    if scaled and element not in ("float", "double"):
        return None  # an integer sum divided, or wrapping, otherwise than its terms would
    if loaded is not None:
        condition, value, prelude = loaded
        atomic = f"atomicAdd({added}, ({element})({value}){scaled});"
        lines = [f"if ({unparenthesised(condition)}) {{ {prelude} {atomic} }}" if prelude else
                 f"if ({unparenthesised(condition)}) {atomic}"]
    else:
        prologue, value = handed
        of_its_type = re.search(rf"(?:^|;|\{{)\s*(?:const\s+)?{re.escape(element)}\s+{re.escape(value)}\s*[=;]",
                                " ".join(prologue))
        lines = [*prologue, f"atomicAdd({added}, {value if of_its_type else f'({element})({value})'}{scaled});"]
    # the locals of the launch geometry the rest reads, the last first (the tree's own thread index goes)
    for statement in reversed(kept):
        text = " ".join(uncommented[statement.start:statement.end].split())
        if re.search(rf"\b{_LOCAL.fullmatch(text)['name']}\b", " ".join(lines)):
            lines.insert(0, text)
    source = spec.source[:kernel.body_open + 1] + "".join(f"\n{INDENT}{line}" for line in lines) + "\n" + \
        spec.source[kernel.body_close:]
    return spec.model_copy(update={"source": source})


def _text(masked: str, statement: Statement) -> str:
    return masked[statement.start:statement.end]


def _load(source: str, masked: str, span: tuple[int, int], array: str, thread: str,
          parameters: dict[str, str]) -> tuple[str, str, str] | None:
    """(the condition, the value, the declarations computing it) of the statements that put a thread's value into
    the array, as written: `ARRAY[t] = COND ? VALUE : 0;`, `if (COND) ARRAY[t] = VALUE; else ARRAY[t] = 0;`,
    `ARRAY[t] = 0; if (COND) ARRAY[t] = VALUE;`, or `T v = 0; if (COND) v = VALUE; ARRAY[t] = v;` (VALUE then
    converted to T), whose if may declare locals first (`{ float e = a[i] - b[i]; v = e * e; }`); None otherwise,
    or where any of them reads the array."""
    at, text = thread, masked[span[0]:span[1]]
    slot = rf"{array}\s*\[\s*{at}\s*\]"
    declarations = rf"(?P<d>(?:\s*(?:const\s+)?{_ARITHMETIC}\s+[A-Za-z_]\w*\s*=[^;]+;)+)"
    found = re.fullmatch(rf"\s*{slot}\s*=(?P<c>[^?;]+)\?(?P<v>[^:;]+):\s*{_ZERO}\s*;\s*", text) or \
        re.fullmatch(rf"\s*if\s*\((?P<c>.+)\)\s*\{{?\s*{slot}\s*=(?P<v>[^;]+);\s*\}}?"
                     rf"\s*else\s*\{{?\s*{slot}\s*=\s*{_ZERO}\s*;\s*\}}?\s*", text, re.DOTALL) or \
        re.fullmatch(rf"\s*{slot}\s*=\s*{_ZERO}\s*;\s*if\s*\((?P<c>.+)\)\s*\{{?\s*{slot}\s*=(?P<v>[^;]+);"
                     rf"\s*\}}?\s*", text, re.DOTALL) or \
        re.fullmatch(rf"\s*(?P<t>{_ARITHMETIC})\s+(?P<n>[A-Za-z_]\w*)\s*=\s*{_ZERO}\s*;\s*if\s*\((?P<c>.+)\)"
                     rf"\s*(?:\{{{declarations}|\{{?)\s*(?P=n)\s*=(?P<v>[^;]+);\s*\}}?\s*{slot}\s*=\s*(?P=n)\s*;\s*",
                     text, re.DOTALL)
    prelude = found and found.groupdict().get("d") or ""
    if found is None or any(re.search(rf"(?<![\w.]){array}\b", found[g]) for g in ("c", "v")) or \
            re.search(rf"(?<![\w.]){array}\b|\+\+|--|\b(?:__syncthreads|__shfl\w*|atomic\w*)\b", prelude) or \
            found.groupdict().get("n") and re.search(rf"(?<![\w.]){found['n']}\b",
                                                     " ".join((found["v"], found["c"], prelude))) or \
            set(re.findall(rf"{_ARITHMETIC}\s+([A-Za-z_]\w*)\s*=", prelude)) & set(parameters):
        return None  # a value reading its own local (review, helper-100), or a local hiding a parameter
    condition, value = (source[span[0] + found.start(g):span[0] + found.end(g)].strip() for g in ("c", "v"))
    if prelude:
        prelude = " ".join(source[span[0] + found.start("d"):span[0] + found.end("d")].split())
    return condition, f"({' '.join(found['t'].split())})({value})" if found.groupdict().get("t") else value, prelude


def _handed(uncommented: str, masked: str, load: list[Statement], array: str,
            thread: str) -> tuple[list[str], str] | None:
    """(the statements before it, the value) where the load ends in `ARRAY[t] = VALUE;` after statements of the
    thread's own (a grid-stride loop summing into a local, as the dot product of CUDA by Example does): every
    thread hands its value, its statements run as written; None where any of them names the array, waits at a
    barrier, returns or exchanges values between threads."""
    store = re.fullmatch(rf"\s*{array}\s*\[\s*{thread}\s*\]\s*=(?P<v>[^;]+);\s*", _text(masked, load[-1]))
    before = masked[load[0].start:load[-1].start] if len(load) > 1 else ""
    if store is None or re.search(rf"(?<![\w.]){array}\b", store["v"] + before) or \
            re.search(r"\b(?:__syncthreads|__syncwarp|return|goto|__shfl\w*|atomic\w*|__shared__)\b", before):
        return None
    value = uncommented[load[-1].start + store.start("v"):load[-1].start + store.end("v")].strip()
    return [" ".join(uncommented[s.start:s.end].split()) for s in load[:-1]], value


def _target_type(address: str, parameters: dict[str, str]) -> str | None:
    """The element type of the array the atomic's address points into (`total`, `&total[k]`), const dropped."""
    name = re.search(r"[A-Za-z_]\w*", address)
    found = pointee(parameters.get(name[0], "")) if name else None
    return " ".join(found[1].replace("const", " ").split()) if found else None


def _added(uncommented: str, masked: str, statement: Statement, array: str, thread: str,
           parameters: dict[str, str]) -> tuple[str, str] | None:
    """The address of `if (t == 0) atomicAdd(ADDRESS, ARRAY[0]);`, of parameters and numbers alone, and what
    scales the sum (` * (F)` or ` / (F)` of `ARRAY[0] * F`, `F * ARRAY[0]` or `ARRAY[0] / F`, F a scalar parameter
    or a number, cast to float or double or not, or a parenthesis of those; else ""); else None (t the tree's
    thread index, which tree.py has read as threadIdx.x)."""
    at, factor = thread, r"(?:\(\s*(?:float|double)\s*\)\s*)?(?:[A-Za-z_]\w*|\d[\w.]*)|\([^;()]*\)"
    found = re.fullmatch(rf"\s*if\s*\(\s*(?:{at}\s*==\s*0|0\s*==\s*{at})\s*\)\s*\{{?\s*atomicAdd\s*\("
                         rf"(?P<a>[^,;]+),\s*(?:(?P<f>{factor})\s*\*\s*)?{array}\s*\[\s*0\s*\]"
                         rf"\s*(?:(?P<op>[*/])\s*(?P<g>{factor})\s*)?\)\s*;\s*\}}?\s*", _text(masked, statement))
    if found is None or found["f"] and found["op"]:
        return None
    address = found["a"].strip()
    scale = found["f"] or found["g"]
    scalars = {name for name, declared in parameters.items() if pointee(declared) is None}
    if not set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", address)) <= set(parameters) or \
            scale and not set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", scale)) <= scalars | {"float", "double"}:
        return None
    if not scale:
        return address, ""
    group = "f" if found["f"] else "g"
    written = uncommented[statement.start + found.start(group):statement.start + found.end(group)]
    return address, f" {found['op'] or '*'} ({' '.join(written.split())})"


def _powers_of_two_within(spec: KernelSpec, size: str, element: str) -> bool:
    """Whether every block size the spec may launch along x is a power of two of at most the array's elements:
    `size` of them (a number, or the block size's own name), or for an extern array ("") as many as the launch's
    dynamic shared memory holds. Each value it tunes and its own (restrictions aside, which other parameters may
    let through; review, helper-97)."""
    name = spec.block_size_names[0]
    baseline = spec.baseline_params()
    values = [*spec.tune_params.get(name, []), baseline.get(name)]

    def held(value: int) -> int:
        if size == name:  # `__shared__ float red[block_size_x];`, Kernel Tuner's way: a block's entries
            return value
        if size.isdigit():
            return int(size)
        try:
            return spec.shared_memory_bytes({**baseline, name: value}) // SIZES.get(element, 1 << 30)
        except ValueError:
            return 0
    return all(isinstance(v, int) and 0 < v <= held(v) and v & (v - 1) == 0 for v in values) and \
        all(len(spec.tune_params.get(n, [1])) == 1 and baseline.get(n, 1) == 1 for n in spec.block_size_names[1:])
