"""scan_vectors: a block that walks a row in chunks of its width, scanning each chunk, takes four consecutive
elements per thread through one 128-bit vector.

Recognised whatever the names, around a block scan that scan.py recognises:

    for (int base = 0; base < n; base += blockDim.x) {      // or block_size_x; base = base + width
        const int i = base + tid;                           // optional: `base + tid` may be written out instead
        buf[tid] = i < n ? src[i] : 0;                      // or if (i < n) buf[tid] = src[i]; else buf[tid] = 0;
        __syncthreads();
        <the block scan of buf>
        if (i < n) dst[i] = carry + buf[tid];               // src and dst may take an offset: dst[row * n + i]
        carry += buf[blockDim.x - 1];
        __syncthreads();
    }

with src, dst and buf of one 4-byte element type (int, unsigned or float) and buf read nowhere after the loop.
Each chunk of the rewrite spans four block widths: thread t reads elements 4t .. 4t+3 of it as one vector where
they lie within the row and 16-byte aligned (tested at run time; one by one otherwise, zero past the row), adds
them up in registers, and the block scans the threads' totals with warp shuffles (shuffle_scan's scheme); each
thread then adds the total before its own to its four and stores them as it read them. Four elements per load
instead of one put four times the bytes in flight per thread: a scan of one element per thread keeps too few
loads in flight to reach the memory's bandwidth. Integer sums come out the same; floating-point ones are added in
another order, within the rounding of the sum, as any reordered sum is. The block must be whole warps, at most 32
of them. shuffle_scan rewrites the same scan with one element per thread: the two are alternatives.
"""
import re
from dataclasses import dataclass

from services.generator.rules.cuda_text import closing, fresh_name, identifiers, mask, split_top_level
from services.generator.rules.loops import LANES, VECTORS, aligned_16
from services.generator.rules.points import INDENT
from services.generator.rules.scan import (BARRIER, ZERO, Scan, ShuffleNames, one_row_of_threads_reason, scan_loops,
                                          shuffle_block_scan, unbraced)
from services.generator.rules.statements import Statement, Unparsed, for_loops, statements
from services.generator.rules.tree import UNROLL, compact, replace_loops, unroll_pragma, whole_warps_reason
from shared.domain.spec import KernelSpec

_LOWER_THAN_PLUS = re.compile(r"[?:<>=&|^,]")  # an offset holding one of these would not add as written


@dataclass(frozen=True)
class _Access:
    array: str
    offset: str | None  # what the subscript adds to the chunk's index, as written


@dataclass(frozen=True)
class ChunkedScan:
    loop: Statement  # the loop over the chunks
    scan: Scan
    head: tuple[str, str]  # the loop's initialisation and condition, as written
    base: str
    width: str
    length: str  # the row's length, as the condition writes it
    index: tuple[str, str]  # the chunk's index variable and its type ('' and int where written out)
    read: _Access
    written: _Access
    carry: str
    carry_first: bool  # the store adds `carry + buf[tid]` rather than `buf[tid] + carry`


class _Refused(ValueError):
    pass


def scan_vectors_reason(source: str, spec: KernelSpec) -> str | None:
    found, refused = chunked_scans(source, spec)
    if found:
        return one_row_of_threads_reason(spec) or whole_warps_reason(spec)
    if refused:
        return "no block scan walks a row in chunks as the rule reads them: " + "; ".join(refused)
    return ("the kernel has no shared-memory block scan inside a loop over a row's chunks of the block's width "
            "(load buf[tid], barrier, scan, store carry + buf[tid], carry += buf[width - 1], barrier)")


def scan_vectors_edit(source: str, spec: KernelSpec) -> str:
    taken = identifiers(source)
    found, _ = chunked_scans(source, spec)
    return replace_loops(source, [(chunked.loop, _replacement(chunked, unroll_pragma(source, chunked.loop.start)[1],
                                                              taken)) for chunked in found])


def chunked_scans(source: str, spec: KernelSpec) -> tuple[list[ChunkedScan], list[str]]:
    """The block scans of the source that walk a row in chunks, and why each other block scan is not one."""
    masked = mask(source)
    widths = ("blockDim.x", spec.block_size_names[0])
    scans, _ = scan_loops(source, spec)
    loops = list(for_loops(masked))
    found, refused = [], []
    for scan in scans:
        around = [loop for loop in loops if loop.start < scan.loop.start and scan.loop.end <= loop.end]
        if not around:
            refused.append(f"the block scan of {scan.array} lies in no loop over chunks")
            continue
        try:
            found.append(_chunked(masked, max(around, key=lambda loop: loop.start), scan, widths))
        except _Refused as exc:
            refused.append(f"the loop around the block scan of {scan.array} {exc}")
    return found, refused


def _chunked(masked: str, loop: Statement, scan: Scan, widths: tuple[str, ...]) -> ChunkedScan:
    init, condition, base, length, width = _head(masked, loop, widths)
    if loop.body.kind != "block":
        raise _Refused("has no braced body")
    try:
        inside = [s for s in statements(masked, *loop.body.inner) if s.kind != "empty" and not UNROLL.match(s.text(masked))]
    except Unparsed as exc:
        raise _Refused(f"could not be read: {exc}") from None
    buf, tid = scan.array, scan.thread
    index = _index(masked, inside[0], base, tid) if inside else None
    if index is not None:
        inside = inside[1:]
    forms = {index[0]} if index else {f"{base}+{tid}", f"{tid}+{base}"}
    # What an offset before i may not name: i, and what i is made of (an offset naming the thread or the chunk
    # would read another element than i's in each lane).
    moving = {*re.findall(r"[\w.]+", "+".join(forms)), base, tid, "threadIdx.x"}
    texts = [compact(s.text(masked)) for s in inside]
    if (len(inside) != 6 or texts[1] != BARRIER or inside[2].start != scan.loop.start or texts[5] != BARRIER):
        raise _Refused(f"is not a load of {buf}[{tid}], a barrier, the scan, a store, the carry's update and a "
                       f"barrier")
    read = _load(masked, inside[0], buf, tid, forms, compact(length), moving)
    written, carry, carry_first = _store(masked, inside[3], buf, tid, forms, compact(length), moving)
    if texts[4] not in {f"{carry}+={buf}[{w}-1];" for w in widths} | {f"{carry}={carry}+{buf}[{w}-1];"
                                                                        for w in widths}:
        raise _Refused(f"does not add the chunk's total to {carry} (`{carry} += {buf}[{width} - 1];`)")
    if re.search(rf"\b{re.escape(buf)}\b", masked[loop.end:]):
        raise _Refused(f"leaves {buf} holding the last chunk's scan, which the code after it reads")
    if scan.type not in VECTORS:
        raise _Refused(f"scans {scan.type}, which has no vector of four 4-byte elements")
    for access in (read, written):
        if (element := _element_type(masked, access.array)) != scan.type:
            raise _Refused(f"moves {access.array} ({element or 'of a type the rule cannot tell'}) through {buf} "
                           f"({scan.type}): vectors of {access.array} would be another width")
    return ChunkedScan(loop, scan, (init, condition), base, width, length, index or ("", "int"), read, written,
                       carry, carry_first)


def _head(masked: str, loop: Statement, widths: tuple[str, ...]) -> tuple[str, str, str, str, str]:
    """(initialisation, condition, base, length, width) of `for (int base = 0; base < n; base += width)`."""
    parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    if len(parts) != 3:
        raise _Refused("is not a counted loop")
    declared = re.fullmatch(r"\s*(?:unsigned\s+int|unsigned|int)\s+([A-Za-z_]\w*)\s*=\s*0[uU]?\s*", parts[0])
    if declared is None:
        raise _Refused("does not start a chunk at 0")
    base = declared.group(1)
    bound = re.fullmatch(rf"\s*{base}\s*<\s*([^<>=]+?)\s*", parts[1])
    step = compact(parts[2])
    width = next((w for w in widths if step in (f"{base}+={w}", f"{base}={base}+{w}", f"{base}={w}+{base}")), None)
    if bound is None or width is None:
        raise _Refused(f"does not step {base} by the block's width up to the row's length")
    return parts[0].strip(), parts[1].strip(), base, bound.group(1), width


def _index(masked: str, statement: Statement, base: str, tid: str) -> tuple[str, str] | None:
    """(name, type) of `const int i = base + tid;`, or None when the statement is not that."""
    declared = re.fullmatch(r"\s*(?:const\s+)?(unsigned\s+int|unsigned|int)\s+([A-Za-z_]\w*)\s*=\s*([^;]+);\s*",
                            statement.text(masked))
    if declared is None or compact(declared.group(3)) not in (f"{base}+{tid}", f"{tid}+{base}"):
        return None
    return declared.group(2), " ".join(declared.group(1).split())


def _within(condition: str, forms: set[str], length: str) -> bool:
    """Whether a compacted condition is `i < n` (or `n > i`, in parentheses or not)."""
    condition = condition[1:-1] if condition.startswith("(") and condition.endswith(")") else condition
    return any(condition in (f"{i}<{length}", f"{length}>{i}") for i in forms)


def _load(masked: str, statement: Statement, buf: str, tid: str, forms: set[str], length: str,
          moving: set[str]) -> _Access:
    """The row's element that `buf[tid] = i < n ? src[i] : 0;` (or the if-else) reads."""
    mine = f"{buf}[{tid}]="
    text = compact(statement.text(masked))
    if statement.kind == "simple" and text.startswith(mine):
        choice = re.fullmatch(r"(.+?)\?([A-Za-z_]\w*\[.+\]):(.+);", text[len(mine):])
        if choice and _within(choice.group(1), forms, length) and ZERO.fullmatch(choice.group(3)):
            return _access(masked, statement, choice.group(2), forms, moving)
    elif statement.kind == "if" and statement.orelse is not None:
        then, orelse = unbraced(masked, statement.body), unbraced(masked, statement.orelse)
        if (_within(compact(masked[statement.head[0]:statement.head[1]]), forms, length)
                and then.startswith(mine) and orelse.startswith(mine) and ZERO.fullmatch(orelse[len(mine):-1])):
            return _access(masked, statement.body, then[len(mine):-1], forms, moving)
    raise _Refused(f"does not load {buf}[{tid}] from the row, zero past it (`{buf}[{tid}] = i < n ? src[i] : 0;`)")


def _store(masked: str, statement: Statement, buf: str, tid: str, forms: set[str],
           length: str, moving: set[str]) -> tuple[_Access, str, bool]:
    """The row's element that `if (i < n) dst[i] = carry + buf[tid];` writes, the carry, and its side."""
    refused = _Refused(f"does not store carry + {buf}[{tid}] within the row (`if (i < n) dst[i] = carry + "
                       f"{buf}[{tid}];`)")
    if statement.kind != "if" or statement.orelse is not None:
        raise refused
    stored = re.fullmatch(rf"([A-Za-z_]\w*\[.+\])=(?:([A-Za-z_]\w*)\+{re.escape(buf)}\[{re.escape(tid)}\]|"
                          rf"{re.escape(buf)}\[{re.escape(tid)}\]\+([A-Za-z_]\w*));", unbraced(masked, statement.body))
    if stored is None or not _within(compact(masked[statement.head[0]:statement.head[1]]), forms, length):
        raise refused
    return _access(masked, statement.body, stored.group(1), forms, moving), stored.group(2) or stored.group(3), \
        stored.group(2) is not None


def _access(masked: str, statement: Statement, element: str, forms: set[str], moving: set[str]) -> _Access:
    """The array and offset of `X[offset + i]` (compacted in `element`, which must be that subscript and nothing
    else: `src[i] * src[i]` is no element of the row), the offset as the statement writes it."""
    array = element.split("[")[0]
    if not re.fullmatch(r"[A-Za-z_]\w*\[.*\]", element) or closing(element, len(array)) != len(element) - 1:
        raise _Refused(f"moves `{element}`, not one element of a row, into the scan")
    at = re.search(rf"\b{array}\s*\[", masked[statement.start:statement.end])
    opening = statement.start + at.end() - 1
    subscript = masked[opening + 1:closing(masked, opening)].strip()
    for i in forms:
        if compact(subscript) == i:
            return _Access(array, None)
        tail = re.search(r"\+\s*" + r"\s*".join(re.escape(c) for c in i) + r"\s*$", subscript)
        offset = subscript[:tail.start()].strip() if tail else ""
        if offset and not _LOWER_THAN_PLUS.search(offset) and not set(re.findall(r"[\w.]+", offset)) & moving:
            return _Access(array, offset)
    raise _Refused(f"reaches the row through {array}[{subscript}], not {array}[offset + i]")


def _element_type(masked: str, array: str) -> str | None:
    """The element type of the pointer `array` (a parameter or a local), as declared."""
    declared = re.search(rf"(?<![\w*])(?:const\s+)?([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*?)\s*\*\s*(?:const\s+)?"
                         rf"(?:__restrict__\s+)?{re.escape(array)}\s*[,)=;]", masked)
    return " ".join(declared.group(1).split()) if declared else None


def _replacement(chunked: ChunkedScan, pragma: str, taken: set[str]) -> list[str]:
    """The loop over chunks of four block widths, under the loop's unroll pragma if it had one (replace_loops takes
    it away with the loop; the scan's own goes with the scan)."""
    c, t = chunked, chunked.scan.type
    vector, lanes, tid, width = VECTORS[t], len(LANES), chunked.scan.thread, chunked.width
    i = c.index[0] or fresh_name("i", taken)
    names = ShuffleNames.fresh(taken)
    v, total, left = (fresh_name(base, taken) for base in ("v", "total", "left"))
    lane, warp, sums = names.lane, names.warp, names.sums
    n = c.length if re.fullmatch(r"[\w.]+", c.length) else f"({c.length})"
    zero = f"({t})0"
    plus = [f" + {k}" if k else "" for k in range(lanes)]
    loads = [f"{v}.{x} = {i}{plus[k]} < {n} ? {_element(c.read, i, k)} : {zero};" for k, x in enumerate(LANES)]
    stores = [f"if ({i}{plus[k]} < {n}) {_element(c.written, i, k)} = {v}.{x};" for k, x in enumerate(LANES)]
    carried = [f"{v}.{x} = {c.carry} + {v}.{x};" if c.carry_first else f"{v}.{x} = {v}.{x} + {c.carry};"
               for x in LANES]
    body = [
        "// scan_vectors: four consecutive elements per thread, read and written as one 128-bit vector where they",
        "// lie within the row and are 16-byte aligned; each thread adds up its four in registers, the warps scan",
        "// the threads' totals with shuffles, and each thread adds the total before its own to its four.",
        f"__shared__ {t} {sums}[32];",
        f"const {c.index[1]} {i} = {c.base} + {lanes} * {tid};",
        f"{vector} {v};",
        f"if ({i} + {lanes - 1} < {n} && {aligned_16('&' + _element(c.read, i, 0))}) {{",
        f"{INDENT}{v} = *reinterpret_cast<const {vector} *>(&{_element(c.read, i, 0)});",
        "} else {",
        *(INDENT + line for line in loads),
        "}",
        " ".join(f"{v}.{b} += {v}.{a};" for a, b in zip(LANES, LANES[1:])),
        f"const int {lane} = {tid} % 32, {warp} = {tid} / 32;",
        f"{t} {total} = {v}.{LANES[-1]};  // its four's sum, then the sum up to its own in the warp",
        *shuffle_block_scan(t, total, width, names),
        f"{t} {left} = __shfl_up_sync(0xffffffffu, {total}, 1);  // the sum of the elements before its four",
        f"if ({lane} == 0) {left} = {zero};",
        f"if ({warp} > 0) {left} += {sums}[{warp} - 1];",
        " ".join(f"{v}.{x} += {left};" for x in LANES),
        " ".join(carried),
        f"if ({i} + {lanes - 1} < {n} && {aligned_16('&' + _element(c.written, i, 0))}) {{",
        f"{INDENT}*reinterpret_cast<{vector} *>(&{_element(c.written, i, 0)}) = {v};",
        "} else {",
        *(INDENT + line for line in stores),
        "}",
        f"{c.carry} += {sums}[{width} / 32 - 1];",
        BARRIER,
    ]
    return [*([pragma] if pragma else []), f"for ({c.head[0]}; {c.head[1]}; {c.base} += {lanes} * {width}) {{",
            *(INDENT + line for line in body), "}"]


def _element(access: _Access, i: str, k: int) -> str:
    """Element i + k of the row through `access`."""
    return f"{access.array}[{access.offset + ' + ' if access.offset else ''}{i}{f' + {k}' if k else ''}]"
