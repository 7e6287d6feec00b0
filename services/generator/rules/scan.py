"""shuffle_scan: shared-memory Hillis-Steele block scans replaced by warp-shuffle scans.

Recognised anywhere in the source (a kernel or a __device__ helper), whatever the names:

    for (int offset = 1; offset < blockDim.x; offset *= 2) {   // or block_size_x; offset <<= 1, offset = offset * 2
        const int t = tid >= offset ? buf[tid - offset] : 0;    // or int t = 0; if (tid >= offset) t = buf[...];
        __syncthreads();
        buf[tid] += t;                                          // or if (tid >= offset) buf[tid] += t;
        __syncthreads();
    }

with `buf` a __shared__ array (static or extern) or a pointer a helper receives, `tid` threadIdx.x or a local
equal to it, the temporary declared in the loop with buf's element type, and the threads below the offset adding
zero (or, under the if, nothing). Before the loop each thread has put its value in buf[tid]; after it buf[i]
holds buf[0] + ... + buf[i] for every i below the block size, seen by every thread. The replacement keeps that
contract: each thread takes buf[tid], every warp scans its 32 values with __shfl_up_sync, lane 31 puts its warp's
total in a __shared__ array of 32, warp 0 scans those totals, and each thread adds the total of the warps before
its own and writes buf[tid] before a last barrier: three barriers and no shared-memory traffic per step instead of
two barriers per doubling.
The block must be whole warps, at most 32 of them (the rule restricts the block size to multiples of 32 up to
1024), and one row of threads: the warps' totals are kept by threadIdx.x alone, so a block whose rows of threads
each scan their own is refused. Integer sums come out the same; floating-point sums are added in another order,
so they round differently, within the rounding of the sum, as any reordered sum does (a prefix of -0.0 values
stays -0.0, where the loop's added zeros made it +0.0). Each thread still scans one element:
more per thread changes what surrounds the loop (the chunk the kernel loads into buf, its stores, its reads of buf
after), which scan_vectors.py rewrites where it recognises it.

A double-buffered (ping-pong) scan, reading one half of its buffer and writing the other with one barrier per
step, is refused with that reason: its result lies in the half the loop's parity picks, through indices the loop
swaps, which this rule does not follow.
"""
import re
from dataclasses import dataclass

from services.generator.rules.cuda_text import fresh_name, identifiers, mask, split_top_level
from services.generator.rules.points import INDENT
from services.generator.rules.statements import Statement, Unparsed, for_loops, statements
from services.generator.rules.tree import compact, is_thread_x, replace_loops, shared_arrays, whole_warps_reason
from shared.domain.spec import KernelSpec

BARRIER = "__syncthreads();"
ZERO = re.compile(r"(?:\([A-Za-z_]\w*\))?\(?(?:0+\.?0*|\.0+)[fFlLuU]*\)?")  # 0, 0.0f, .0, 0u, (float)0 (compacted)
_DOUBLINGS = ("{o}*=2", "{o}<<=1", "{o}={o}*2", "{o}=2*{o}", "{o}={o}<<1", "{o}+={o}", "{o}={o}+{o}")


@dataclass(frozen=True)
class Scan:
    loop: Statement
    array: str
    type: str  # the array's element type
    thread: str  # threadIdx.x or the local that holds it
    width: str  # blockDim.x or the block-size define the offset doubles up to


class _Refused(ValueError):
    pass


def shuffle_scan_reason(source: str, spec: KernelSpec) -> str | None:
    found, refused = scan_loops(source, spec)
    if found:
        return one_row_of_threads_reason(spec) or whole_warps_reason(spec)
    if refused:
        return "no loop doubling an offset up to the block size is a block scan: " + "; ".join(refused)
    return ("the kernel has no shared-memory block scan (a loop doubling offset from 1 to the block size, "
            "`t = tid >= offset ? buf[tid - offset] : 0; __syncthreads(); buf[tid] += t; __syncthreads();`)")


def one_row_of_threads_reason(spec: KernelSpec) -> str | None:
    """Why a block may be more than one thread deep, which the scans' rewrites cannot take: their slots of one total
    per warp are indexed by threadIdx.x alone, so a block two rows deep, each row scanning its own, wrote every
    row's totals into the same slots (review, helper-84); None when every block is one row of threads."""
    baseline = spec.baseline_params()
    for name in spec.block_size_names[1:]:
        depths = spec.tune_params.get(name, [baseline.get(name, 1)])
        if any(depth != 1 for depth in depths):
            return (f"its blocks may be more than one thread deep ({name} {depths}): the warps' totals are kept "
                    f"for one row of threads")
    return None


def shuffle_scan_edit(source: str, spec: KernelSpec) -> str:
    taken = identifiers(source)
    found, _ = scan_loops(source, spec)
    return replace_loops(source, [(scan.loop, _replacement(scan, taken)) for scan in found])


def scan_loops(source: str, spec: KernelSpec) -> tuple[list[Scan], list[str]]:
    """The block scans of the source, and why each other loop doubling an offset up to the block size is not one."""
    masked = mask(source)
    shared = shared_arrays(masked)
    widths = ("blockDim.x", spec.block_size_names[0])
    found, refused = [], []
    for loop in for_loops(masked):
        head = _doubling(masked, loop, widths)
        if head is None:
            continue
        offset, width = head
        try:
            found.append(_scan(masked, loop, offset, width, shared))
        except _Refused as exc:
            refused.append(f"the loop doubling {offset} up to {width} {exc}")
    return found, refused


def _doubling(masked: str, loop: Statement, widths: tuple[str, ...]) -> tuple[str, str] | None:
    """(offset, width) of `for (int offset = 1; offset < width; offset *= 2)`, width one of `widths`."""
    parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    if len(parts) != 3:
        return None
    declared = re.fullmatch(r"\s*(?:unsigned\s+int|unsigned|int)\s+([A-Za-z_]\w*)\s*=\s*1[uU]?\s*", parts[0])
    if declared is None:
        return None
    o = declared.group(1)
    condition, step = compact(parts[1]), compact(parts[2])
    bound = re.fullmatch(rf"{o}<([\w.]+)|([\w.]+)>{o}", condition)
    width = bound and (bound.group(1) or bound.group(2))
    if width not in widths or step not in (d.format(o=o) for d in _DOUBLINGS):
        return None
    return o, width


def _scan(masked: str, loop: Statement, o: str, width: str, shared: dict[str, str]) -> Scan:
    if loop.body.kind != "block":
        raise _Refused("has no braced body")
    try:
        inside = [s for s in statements(masked, *loop.body.inner) if s.kind != "empty"]
    except Unparsed as exc:
        raise _Refused(f"could not be read: {exc}") from None
    barriers = [i for i, s in enumerate(inside) if compact(s.text(masked)) == BARRIER]
    if not barriers:
        raise _Refused("has no barrier: its threads would add values others are still reading")
    if len(barriers) == 1:
        raise _Refused("has one barrier per step, as a double-buffered (ping-pong) scan has, whose result lies in the "
                       "half of the buffer the loop's parity picks; the rule rewrites the in-place scan (read, "
                       "barrier, add, barrier)")
    if len(barriers) != 2 or barriers[1] != len(inside) - 1:
        raise _Refused("is not a read, a barrier, an add and a barrier")
    temp, type_, array, thread, zeroed = _read(masked, inside[:barriers[0]], o)
    _add(masked, inside[barriers[0] + 1:barriers[1]], o, temp, array, thread, zeroed)
    if array not in shared:
        raise _Refused(f"scans {array}, which is neither a __shared__ array nor a pointer parameter")
    if " ".join(type_.split()) not in (shared[array], "auto"):
        raise _Refused(f"reads {array} ({shared[array]}) into {temp} of another type ({type_})")
    if not is_thread_x(masked, thread):
        raise _Refused(f"indexes {array} by {thread}, which is not threadIdx.x")
    return Scan(loop, array, shared[array], thread, width)


def _read(masked: str, part: list[Statement], o: str) -> tuple[str, str, str, str, bool]:
    """(temp, its type, array, thread, whether the threads below the offset hold zero in it) of the read before
    the first barrier: `T t = tid >= o ? X[tid - o] : 0;`, or `T t = 0;` (or `T t;`) then
    `if (tid >= o) t = X[tid - o];`."""
    refused = _Refused(f"does not read X[tid - {o}] into a temporary before its first barrier "
                       f"(`T t = tid >= {o} ? X[tid - {o}] : 0;`, or `T t = 0; if (tid >= {o}) t = X[tid - {o}];`)")
    if not part or part[0].kind != "simple":
        raise refused
    declared = re.fullmatch(r"\s*(?:const\s+)?([A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*?)\s+([A-Za-z_]\w*)\s*(?:=(.*))?;\s*",
                            part[0].text(masked), re.S)
    if declared is None:
        raise refused
    type_, temp, value = declared.group(1), declared.group(2), compact(declared.group(3) or "")
    if len(part) == 1:
        choice = re.fullmatch(r"\(?([^?:]+?)\)?\?([^?:]+):([^?:]+)", value)
        if choice is None:
            raise refused
        condition, chosen, other = choice.groups()
        above, below = _at_or_above(condition, o), _below(condition, o)
        thread, read, other = (above, chosen, other) if above else (below, other, chosen)
        if thread is None or not re.fullmatch(rf"[A-Za-z_]\w*\[{re.escape(thread)}-{o}\]", read):
            raise refused
        return temp, type_, read.split("[")[0], thread, bool(ZERO.fullmatch(other))
    if len(part) != 2 or part[1].kind != "if" or part[1].orelse is not None:
        raise refused
    thread = _at_or_above(compact(masked[part[1].head[0]:part[1].head[1]]), o)
    if thread is None:
        raise refused
    read = re.fullmatch(rf"{temp}=([A-Za-z_]\w*)\[{re.escape(thread)}-{o}\];", unbraced(masked, part[1].body))
    if read is None:
        raise refused
    return temp, type_, read.group(1), thread, bool(ZERO.fullmatch(value))


def _add(masked: str, part: list[Statement], o: str, temp: str, array: str, thread: str, zeroed: bool) -> None:
    """A check that what lies between the barriers adds the temporary into X[tid]: on every thread when the
    threads below the offset hold zero in it, else under `if (tid >= o)`."""
    mine = f"{array}[{thread}]"
    sums = (f"{mine}+={temp};", f"{mine}={mine}+{temp};", f"{mine}={temp}+{mine};")
    if len(part) == 1 and compact(part[0].text(masked)) in sums:
        if not zeroed:
            raise _Refused(f"adds {temp} to {mine} on every thread, and the threads below {o} do not hold 0 in it")
        return
    guarded = len(part) == 1 and part[0].kind == "if" and part[0].orelse is None
    if not (guarded and _at_or_above(compact(masked[part[0].head[0]:part[0].head[1]]), o) == thread
            and unbraced(masked, part[0].body) in sums):
        raise _Refused(f"does not add {temp} to {mine} between its barriers (`{mine} += {temp};`)")


def _at_or_above(condition: str, o: str) -> str | None:
    """The thread of `tid >= o` or `o <= tid` (compacted)."""
    test = re.fullmatch(rf"([A-Za-z_][\w.]*)>={o}|{o}<=([A-Za-z_][\w.]*)", condition)
    return test and (test.group(1) or test.group(2))


def _below(condition: str, o: str) -> str | None:
    """The thread of `tid < o` or `o > tid` (compacted)."""
    test = re.fullmatch(rf"([A-Za-z_][\w.]*)<{o}|{o}>([A-Za-z_][\w.]*)", condition)
    return test and (test.group(1) or test.group(2))


def unbraced(masked: str, statement: Statement) -> str:
    """A statement compacted, or the one statement of a block."""
    text = compact(statement.text(masked))
    return text[1:-1] if text.startswith("{") and text.endswith("}") else text


def _replacement(scan: Scan, taken: set[str]) -> list[str]:
    names = ShuffleNames.fresh(taken)
    v = fresh_name("value", taken)
    t, buf, type_ = scan.thread, scan.array, scan.type
    return ["{",
            f"{INDENT}// A warp-shuffle scan instead of Hillis-Steele in shared memory: each warp scans its values in",
            f"{INDENT}// registers, warp 0 the warps' totals; after the last barrier {buf}[i] holds the sum of what "
            f"{buf}[0..i] held.",
            f"{INDENT}__shared__ {type_} {names.sums}[32];",
            f"{INDENT}const int {names.lane} = {t} % 32, {names.warp} = {t} / 32;",
            f"{INDENT}{type_} {v} = {buf}[{t}];",
            *(INDENT + line for line in shuffle_block_scan(type_, v, scan.width, names)),
            f"{INDENT}if ({names.warp} > 0) {v} += {names.sums}[{names.warp} - 1];",
            f"{INDENT}{buf}[{t}] = {v};",
            f"{INDENT}{BARRIER}",
            "}"]


@dataclass(frozen=True)
class ShuffleNames:
    """The identifiers of a shuffle block scan, fresh in the kernel: the warps' totals in shared memory, the
    thread's lane and warp, warp 0's value, the doubling offset and the value shuffled up."""
    sums: str
    lane: str
    warp: str
    warp_value: str
    offset: str
    up: str

    @classmethod
    def fresh(cls, taken: set[str]) -> "ShuffleNames":
        return cls(*(fresh_name(name, taken) for name in ("warp_sums", "lane", "warp", "warp_value", "offset", "up")))


def shuffle_block_scan(type_: str, value: str, width: str, names: ShuffleNames) -> list[str]:
    """Lines after which `value` holds the sum of its warp's values up to its lane's, and sums[w] (seen by every
    thread) the sum of warps 0 .. w's values; the caller declares sums, lane and warp, and the block is whole
    warps, at most 32 of them."""
    lane, warp, sums, w = names.lane, names.warp, names.sums, names.warp_value
    return [*_warp_scan(type_, value, names),
            f"if ({lane} == 31) {sums}[{warp}] = {value};",
            BARRIER,
            f"if ({warp} == 0) {{",
            f"{INDENT}{type_} {w} = {lane} < {width} / 32 ? {sums}[{lane}] : ({type_})0;",
            *(INDENT + line for line in _warp_scan(type_, w, names)),
            f"{INDENT}{sums}[{lane}] = {w};",
            "}",
            BARRIER]


def _warp_scan(type_: str, value: str, names: ShuffleNames) -> list[str]:
    """`value` becomes the sum of the warp's values up to the lane's own."""
    o, up = names.offset, names.up
    return ["#pragma unroll",
            f"for (int {o} = 1; {o} < 32; {o} *= 2) {{",
            f"{INDENT}const {type_} {up} = __shfl_up_sync(0xffffffffu, {value}, {o});",
            f"{INDENT}if ({names.lane} >= {o}) {value} += {up};",
            "}"]
