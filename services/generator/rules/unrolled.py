"""A loop over a few constant values, read unrolled: a 1D window or convolution written as a loop.

    for (int k = -R; k <= R; k++)          // R a number, after canonical.py expanded the source's macros
        s += in[i + k] * w[k + R];

runs its body once for each value of k in turn, so it does what

    s += in[i + (-2)] * w[(-2) + R]; s += in[i + (-1)] * w[(-1) + R]; ...

does (each copy in a block of its own where the body declares something, so that its declarations stay its own).
Read so, the reads around the point are neighbours at fixed offsets, which vectorize takes into registers as a
stencil's (point_vectors.py); the shapes read this spelling only where it lets them render more of their rules
(shapes.reading), so a 2D window keeps its loops for register_window. The rewrite then holds the unrolled body,
which the compiler would have made of the loop anyway.

Unrolled only where the loop counts up by one from a number to a number (`<` or `<=`), 1 to 16 times, its
variable an integer of at least int's width declared in its head, which the body neither changes nor takes the
address of, and its body holds no loop, jump (break, continue, return, goto) or label.
"""
import re

from services.generator.rules.cuda_text import find_kernel, mask
from services.generator.rules.statements import Statement, Unparsed, statements, walk
from shared.domain.spec import KernelSpec

LARGEST = 16  # the most copies a loop is unrolled into
_HEADER = re.compile(r"\s*(?:const\s+)?(?:int|long|long\s+long|unsigned|unsigned\s+int|size_t)\s+(?P<name>[A-Za-z_]\w*)"
                     r"\s*=\s*(?P<first>\(?\s*-?\s*\d+\s*\)?)\s*;\s*(?P=name)\s*(?P<test><=?)\s*"
                     r"(?P<bound>\(?\s*-?\s*\d+\s*\)?)\s*;\s*"
                     r"(?:(?P=name)\s*\+\+|\+\+\s*(?P=name)|(?P=name)\s*\+=\s*1)\s*")
_DECLARES = re.compile(r"(?:^|[;{}(])\s*(?!(?:else|return|case|goto|do|throw|delete|new|sizeof)\b)(?:const\s+)?"
                       r"[A-Za-z_][\w:<>]*[\s*&]+[A-Za-z_]\w*\s*(?:=(?!=)|;|,|\[)")
_JUMPS = re.compile(r"\b(?:break|continue|return|goto)\b|^\s*[A-Za-z_]\w*\s*:(?!:)", re.M)


def unrolled_form(spec: KernelSpec) -> KernelSpec | None:
    """The spec with every such loop of its kernel's body unrolled; None where there is none."""
    try:
        kernel = find_kernel(spec.source, spec.kernel_name)
        masked = mask(spec.source)
        loops = [s for s, _ in walk(masked, statements(masked, kernel.body_open + 1, kernel.body_close))
                 if s.kind == "for"]
    except (ValueError, Unparsed):
        return None
    taken = [(loop, copies) for loop in loops if (copies := _copies(spec.source, masked, loop)) is not None]
    taken = [(loop, copies) for loop, copies in taken  # the innermost loops only: a copy's text is the source's
             if not any(other is not loop and loop.start <= other.start < loop.end for other, _ in taken)]
    if not taken:
        return None
    source = spec.source
    for loop, copies in sorted(taken, key=lambda item: item[0].start, reverse=True):
        source = source[:loop.start] + copies + source[loop.end:]
    return spec.model_copy(update={"source": source})


def _copies(source: str, masked: str, loop: Statement) -> str | None:
    """The loop's body once for each value of its variable, each in a block, as one line; None where it is not a
    loop read here."""
    header = _HEADER.fullmatch(masked, loop.head[0], loop.head[1])
    if header is None:
        return None
    first, bound = (int(re.sub(r"[()\s]", "", header[g])) for g in ("first", "bound"))
    values = range(first, bound + (header["test"] == "<="))
    body = masked[loop.body.start:loop.body.end]
    name = header["name"]
    if not 1 <= len(values) <= LARGEST or _JUMPS.search(body) or \
            any(s.kind in ("for", "while", "do") for s, _ in walk(masked, [loop.body])) or \
            re.search(rf"(?<![\w.]){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{name}\b|\b{name}\s*(?:\+\+|--)"
                      rf"|&\s*{name}\b", body):
        return None
    text = mask(source, literals=False)[loop.body.start:loop.body.end]  # comments out: the copies are one line
    inner = text[1:-1] if loop.body.kind == "block" else text
    copies = [" ".join(_with_value(inner, name, value).split()) for value in values]
    # Copies that declare nothing stand side by side, where the recognisers see each read made whenever the body
    # runs; others each in a block, which keeps their declarations their own.
    return " ".join(copies if not _DECLARES.search(inner) else (f"{{ {copy} }}" for copy in copies))


def _with_value(text: str, name: str, value: int) -> str:
    """`text` with the variable `name` (not a member `.name`) read as the number."""
    return re.sub(rf"(?<![\w.])(?<!->){name}\b", f"({value})", text)
