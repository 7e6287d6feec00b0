"""The rules that edit any kernel's text in place: restrict, launch_bounds, unroll and block_size.

Each is a pair: `*_reason(source, spec)` says why the edit would change nothing (None when it would change
something) and `*_edit(source, spec)` makes it. The edits are local and idempotent, so the engine can re-apply
them on top of a freshly rendered elementwise kernel and get what applying them in sequence would have given.
"""
import re

from services.generator.rules.cuda_text import GROUP_TILES, WARP_COLLECTIVES, find_kernel, mask
from shared.domain.spec import KernelSpec

UNROLL_FACTOR = "loop_unroll_factor"
_QUALIFIERS = {"const", "__restrict__", "__restrict"}


# --- restrict: promise the compiler that no two arrays overlap (kforge passes distinct buffers) ----------
def restrict_reason(source: str, spec: KernelSpec) -> str | None:
    pointers = _pointer_parameters(source, spec)
    if isinstance(pointers, str):
        return pointers
    if not pointers:
        return "the kernel has no pointer parameters"
    if all({"__restrict__", "__restrict"} & set(_pointer_parts(text)[1]) for _, _, text, _ in pointers):
        return "every pointer parameter already carries __restrict__"
    return None


def restrict_edit(source: str, spec: KernelSpec) -> str:
    pointers = _pointer_parameters(source, spec)
    assert not isinstance(pointers, str), pointers
    kernel = find_kernel(source, spec.kernel_name)
    body = mask(source)[kernel.body_open + 1:kernel.body_close]
    for start, end, text, role in reversed(pointers):
        read_only = role == "in" and _only_read(body, _pointer_parts(text)[2])
        source = source[:start] + _restricted(text, read_only) + source[end:]
    return source


def _only_read(body: str, name: str) -> bool:
    """Whether the (masked) body uses the array only through subscripts read in place, so that declaring it const
    leaves the kernel compiling: not passed on, offset, cast or assigned to a pointer (`float *row = in + i`), its
    element's address taken but for __ldg or a const pointer, nor bound to a reference that is not const."""
    for use in re.finditer(rf"(?<![\w.>]){name}\b", body):
        if not re.match(r"\s*\[", body[use.end():]):
            return False
        before = body[:use.start()]
        statement = before[max(before.rfind(";"), before.rfind("{"), before.rfind("}")) + 1:]
        if re.search(r"&\s*$", before) and not re.search(r"__ldg\s*\(\s*&\s*$", before) and \
                not statement.lstrip().startswith("const "):
            return False
        if re.search(r"&\s*[A-Za-z_]\w*\s*=\s*$", before) and not statement.lstrip().startswith("const "):
            return False
    return True


def _pointer_parameters(source: str, spec: KernelSpec) -> list[tuple[int, int, str, str]] | str:
    """(start, end, text, role) of the parameters that are plain pointers to array arguments, or the reason
    the signature cannot be matched with args (which it is by position)."""
    kernel = find_kernel(source, spec.kernel_name)
    spans = kernel.parameters(source)
    if len(spans) != len(spec.parameters):
        return (f"the kernel has {len(spans)} parameters but args lists {len(spec.parameters)}, so they cannot be "
                "matched")
    pointers = []
    for (start, end), arg in zip(spans, spec.parameters):
        text = source[start:end]
        if arg.is_array and _pointer_parts(text) is not None:
            lead = len(text) - len(text.lstrip())
            pointers.append((start + lead, start + len(text.rstrip()), text.strip(), arg.effective_role))
    return pointers


def _pointer_parts(parameter: str) -> tuple[str, list[str], str] | None:
    """(pointee type, qualifiers after the *, name) of a parameter like `const float *__restrict__ x`, or
    None when it is not a single-level pointer declared in those plain terms."""
    if re.fullmatch(r"[\w\s*:]+", mask(parameter)) is None or parameter.count("*") != 1:
        return None
    before, after = parameter.split("*")
    pointee = [word for word in before.split() if word != "const"]
    after_words = after.split()
    if not pointee or not after_words or after_words[-1] in _QUALIFIERS:
        return None
    qualifiers, name = after_words[:-1], after_words[-1]
    if not set(qualifiers) <= _QUALIFIERS:
        return None
    return " ".join(pointee), qualifiers, name


def _restricted(parameter: str, read_only: bool) -> str:
    pointee, qualifiers, name = _pointer_parts(parameter)
    constant_pointer = " const" if "const" in qualifiers else ""
    constant = read_only or "const" in parameter.split("*")[0].split()  # `const float *` or `float const *`
    return f"{'const ' if constant else ''}{pointee} *__restrict__{constant_pointer} {name}"


# --- launch_bounds: tell the compiler the block size, so it can budget registers for it -----------------
def launch_bounds_reason(source: str, spec: KernelSpec) -> str | None:
    if "__launch_bounds__" in find_kernel(source, spec.kernel_name).declaration:
        return "the kernel already declares __launch_bounds__"
    return None


def launch_bounds_edit(source: str, spec: KernelSpec) -> str:
    kernel = find_kernel(source, spec.kernel_name)
    bounds = f"__launch_bounds__({' * '.join(spec.block_size_names)}) "
    return source[:kernel.name_at] + bounds + source[kernel.name_at:]


# --- unroll: a tunable unroll factor on every loop that has no unroll pragma yet -------------------------
# NVRTC expands a -D define in `#pragma unroll NAME` (the PTX equals the literal factor's), so the factor is
# the tune parameter itself, with no constexpr in between.
def unroll_reason(source: str, spec: KernelSpec) -> str | None:
    if _loops_without_pragma(source):
        return None
    if re.search(r"\bfor\s*\(", mask(source)):
        return "every loop already has a #pragma unroll"
    return "the kernel has no loops"


def unroll_edit(source: str, spec: KernelSpec) -> str:
    for at in reversed(_loops_without_pragma(source)):
        line_start = source.rfind("\n", 0, at) + 1
        indent = re.match(r"[ \t]*", source[line_start:]).group()
        pragma = f"#pragma unroll {UNROLL_FACTOR}\n"
        if source[line_start:at].strip():  # the loop shares its line with other code: break it there
            source = source[:at] + f"\n{indent}    {pragma}{indent}    " + source[at:]
        else:
            source = source[:line_start] + indent + pragma + source[line_start:]
    return source


def _loops_without_pragma(source: str) -> list[int]:
    masked = mask(source)
    loops = []
    for match in re.finditer(r"\bfor\s*\(", masked):
        line_start = masked.rfind("\n", 0, match.start()) + 1
        if masked[line_start:match.start()].lstrip().startswith("#"):
            continue  # inside a macro definition: a pragma line cannot go there
        previous = masked[:match.start()].rstrip().rsplit("\n", 1)[-1].strip()
        if not re.match(r"#\s*pragma\s+unroll\b", previous):
            loops.append(match.start())
    return loops


# --- block_size: the x block size becomes a tune parameter and, in the code, a compile-time constant -----
def block_size_reason(source: str, spec: KernelSpec) -> str | None:
    x_name = spec.block_size_names[0]
    if re.search(rf"\bblockDim\s*\.\s*x\b|\b{x_name}\b", mask(source)) is None:
        return (f"the kernel never reads its block width (blockDim.x or {x_name}), so which elements its threads "
                f"cover would change with a tuned {x_name}")
    fixed = next((m for m in re.finditer(r"(\bextern\s+)?\b__shared__\b[^;]*?([A-Za-z_]\w*)\s*\[([^\]]*)\]",
                                         mask(source)) if not m[1] and m[3].strip()), None)
    if fixed is not None:
        return (f"the kernel declares the shared array {fixed[2]}[{' '.join(fixed[3].split())}] of a fixed size, "
                f"which a block of another size would overrun or leave partly unfilled")
    if (collective := _WARP_COLLECTIVE.search(mask(source))) is not None:
        return (f"the kernel works across a warp ({collective[0].rstrip('( ')}): which threads share a warp, and "
                f"which warp is the block's first, change with the block's width, and a result one lane or the "
                f"block's first thread keeps (or a scan over the lanes) would then take other threads' values")
    if spec.smem_args is not None and not re.search(rf"\b{x_name}\b", str(spec.smem_args.size)):
        return (f"the kernel's dynamic shared memory is {spec.smem_args.size} bytes whatever {x_name}: a wider block "
                f"would index past it")
    divisors = spec.grid_div_x
    if divisors is not None and x_name not in divisors and not re.search(r"\bgridDim\s*\.\s*x\b", mask(source)):
        return (f"its grid along x is fixed (grid_div_x {divisors}, not divided by {x_name}) and it does not read "
                f"gridDim.x: another block width would change how many threads cover its points")
    return None


# What works across a warp (cuda_text's WARP_COLLECTIVES and GROUP_TILES), and cooperative groups' other ways to
# a tile of one.
_TILES = (*GROUP_TILES, "thread_block_tile", "labeled_partition", "binary_partition")
_WARP_COLLECTIVE = re.compile(rf"\b(?:{'|'.join((*WARP_COLLECTIVES, *_TILES))})\b\s*[(<]?")


def block_size_edit(source: str, spec: KernelSpec) -> str:
    masked = mask(source)
    x_name = spec.block_size_names[0]
    for match in reversed(list(re.finditer(r"\bblockDim\s*\.\s*x\b", masked))):
        source = source[:match.start()] + x_name + source[match.end():]
    return source
