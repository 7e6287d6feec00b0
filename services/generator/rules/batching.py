"""batch_loads: a thread's sequential loop issues the loads of several iterations together, then runs them.

A loop a thread walks one step (or one stride) at a time (`for (int z = 0; z < nz; ++z, idx += plane) vol[idx] +=
z * dz;`, a column's rows split among threads, `for (r = threadIdx.y; r < rows; r += block_size_y)`) keeps one load
in flight: each iteration's load waits behind the last one's store, which the compiler may not
move it past (both touch `vol`; it cannot tell that `plane` is not 0). On the H100 such a march over a volume
ran at 63% of a device copy of the same bytes, and at 97% with eight iterations' loads issued first.

The rewrite runs the loop in passes of `batch_iterations` iterations. A pass first loads, into registers, the
elements its iterations read first, walking copies of the loop's variables with the loop's own condition and
increment; then it runs the iterations as written, in order, each reading its element from its register. So
every load reads what the submitted loop's would have read, when:
- the array is not written in the loop: nothing an earlier iteration does changes the element; or
- the array is written in the loop only at the subscript read, whose value moves by a nonzero step every
  iteration (checked at run time where the step is not a constant: a pass of one iteration otherwise; a step
  with a conversion, or of 64 bits into a narrower name, is not such a step, since the 64-bit polynomial of its
  value is not the step the name takes), and the
  read comes first in its iteration (the first statement touching the array reads it before any store: a
  compound assignment `vol[idx] += e` becomes `vol[idx] = <register> + (e)`), so no iteration of the pass
  stores into an element another iteration reads.
Only loads made whenever an iteration runs (outside any branch, `?:`, `&&` or `||`) are taken ahead, so no pass
reads an element the submitted loop would not have read; other accesses stay where they are. A subscript is
taken ahead as written where it names only the loop's variables and what the loop does not change (declared once
before it), else spelled from the body's index locals as a 64-bit polynomial, only over signed or 64-bit integers
(a 32-bit unsigned one wraps, a float scale truncates) and without narrowing casts.

Arrays are the kernel's pointer parameters and local pointers into them, distinct buffers (as the restrict rule
assumes too). The rule must see everything that may change what a loop reads, so it leaves a loop alone where:
- its kernel declares a reference, takes a local's address, assigns a pointer parameter, passes a pointer to a
  function, or declares a name twice;
- its bound or a step is more than arithmetic of names and numbers, min and max (a load, another call, `lim--`,
  `?:`), or a step moves by what the loop changes;
- its body stores through another pointer, calls anything but CUDA's math, conversions, loads and atomics into an
  array's element, defines a lambda, leaves early (break, return, a barrier, a trap), or holds a directive.
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine
from services.generator.rules.cuda_text import (ADDRESS_OF_BEFORE, CALLED, CAST_WORDS, INTEGER_TYPE, LAMBDA,
                                                LAUNCH_NAMES, WIDE_INTEGER_TYPE, closing, constant_macros,
                                                defined_macros, find_kernel, fresh_name, identifiers, mask,
                                                pointee, split_top_level, template_types)
from services.generator.rules.loops import affine_locals, none_or_why, reindent, replaced
from services.generator.rules.points import ASSIGNMENT, INDENT
from services.generator.rules.statements import (Statement, Unparsed, expression_end, for_loops, made_whenever_run,
                                                 statements)
from shared.domain.spec import KernelSpec

PARAMETER = "batch_iterations"
_ESCAPES = re.compile(r"\b(?:break|continue|return|goto|asm|__syncthreads\w*|__syncwarp|__shfl\w*|__shared__|"
                      r"__threadfence\w*|sizeof|decltype|alignof|typeid|noexcept|assert|__trap|__brkpt|_Pragma)\b|"
                      r"\.\s*sync\s*\(|^[ \t]*#", re.MULTILINE)
_CONTROL_WORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}
_WRITING_CALLS = re.compile(r"atomic\w*|__st\w*|memcpy|memset|__pipeline\w*|cp\w*async\w*")
_PURE_CALLS = {"min", "max", "abs", "llabs", "umin", "umax", "llmin", "llmax", "ullmin", "ullmax"}
_TYPE_WORDS = {"int", "unsigned", "signed", "long", "short", "char", "size_t", "ptrdiff_t", "int64_t", "uint64_t",
               "int32_t", "uint32_t", "float", "double", "const", "std"}
_CASTS = CAST_WORDS | {"static_cast"}
# What a loop's body may call: functions of values that change nothing (CUDA's math, conversions and loads),
# besides the atomics, whose target must be an array's element. Anything else (a function of the source, a
# functor, std::swap through `using`) may change what it is given.
_MATH_NAMES = ("sqrt rsqrt cbrt rcbrt exp exp2 exp10 expm1 log log2 log10 log1p pow sin cos tan asin acos atan atan2 "
               "sinh cosh tanh asinh acosh atanh erf erfc erfinv erfcinv lgamma tgamma floor ceil round rint lrint "
               "llrint lround llround nearbyint trunc fabs fmin fmax fma fmod remainder copysign hypot ldexp scalbn "
               "ilogb logb nextafter fdim isnan isinf isfinite signbit sinpi cospi normcdf normcdfinv").split()
_PURE_BODY_CALLS = re.compile(
    r"(?:__)?(?:%s)f?|min|max|abs|llabs|[u]?(?:ll)?(?:min|max)|__saturatef|__fdividef|__[a-z0-9]+_r[nzud]|"
    r"__\w+2\w+|__\w+_as_\w+|__(?:popc|popcll|clz|clzll|ffs|ffsll|brev|brevll|byte_perm|funnelshift_[lr]c?|"
    r"mul24|umul24|mulhi|umulhi|mul64hi|umul64hi|sad|usad|h\w+|ldg|ldcs|ldca|ldcg|ldlu|ldcv)|"
    r"make_(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]|"
    r"float|double|int|unsigned|long|short|char|bool|size_t|u?int(?:8|16|32|64)_t|static_cast|__half|__nv_bfloat16"
    % "|".join(_MATH_NAMES))
# A conversion in a step, which the 64-bit polynomial of its value looks through: `(unsigned char)s` of 257 is 1.
_CAST_IN_STEP = re.compile(r"\b(?:%s|char|short|bool|signed|u?int(?:8|16)_t)\b|_cast\b" % "|".join(_TYPE_WORDS))
_NARROW = re.compile(r"\b(?:char|short|bool|u?int8_t|u?int16_t)\b")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*")  # threadIdx.x as one name
# Element types for which `a op= e` is `a = a op (e)`; a class's operator (__half's) may round otherwise.
_BUILTIN = re.compile(r"(?:(?:unsigned|signed)\s+)?(?:float|double|char|short|int|long|long\s+long)|unsigned|"
                      r"(?:std::)?(?:size_t|ptrdiff_t|u?int(?:8|16|32|64)_t)")
# The element types a register array may hold: those, and CUDA's vector and half types (default-constructible).
_REGISTER_TYPES = re.compile(_BUILTIN.pattern + r"|(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]|"
                             r"__half2?|half2?|__nv_bfloat162?|nv_bfloat162?")


class _Refused(ValueError):
    pass


@dataclass(frozen=True)
class Load:
    """Elements of one array at one subscript, loaded ahead into a register per iteration of a pass."""

    array: str
    element: str  # the array's element type
    subscript: str  # the subscript at the copies of the loop's variables
    spans: tuple[tuple[int, int], ...]  # the reads in the source that the register replaces
    compound: tuple[int, int, int, str] | None  # `A[S] op= E;`: (op= start, E's start, the `;`, op): A[S] = r op (E)


@dataclass(frozen=True)
class BatchedLoop:
    loop: Statement
    init: str  # `int z = 0`, as written
    condition: str  # `z < nz`, as written
    increment: str  # `++z, idx += plane`, as written
    copies: dict[str, str]  # the loop's variable, then the outer integers its increment steps: their copies
    loads: tuple[Load, ...]
    distinct: tuple[str, ...]  # run-time tests that a written array's subscript moves every iteration


@dataclass(frozen=True)
class _Array:
    element: str  # its element type, as written
    buffer: str  # the pointer parameter whose buffer it points into
    declared: int  # where a local pointer is declared; -1 for a parameter
    instance: str  # the element type the compiled instance holds: a template's T is the type its instance names


@dataclass(frozen=True)
class _Access:
    array: str
    start: int  # where the read's text starts (the array's name, or __ldg)
    end: int
    subscript: str  # as written, comments out
    subscript_at: int
    write: bool
    key: str  # the subscript with spaces collapsed


def batch_loads_reason(source: str, spec: KernelSpec) -> str | None:
    return none_or_why(*batched_loops(source, spec),
                       "the kernel has no loop a thread walks a step at a time (`for (int i = a; i < b; i += s)`)",
                       "no loop's loads can be batched: ")


def batch_loads_edit(source: str, spec: KernelSpec) -> str:
    loops, _ = batched_loops(source, spec)
    taken = identifiers(source)
    for found in sorted(loops, key=lambda f: f.loop.start, reverse=True):
        source = replaced(source, found.loop.start, found.loop.end, _rendered(source, found, taken))
    return source


def batched_loops(source: str, spec: KernelSpec) -> tuple[list[BatchedLoop], list[str]]:
    """The kernel's loops whose loads can be batched, and why each other loop of their form cannot."""
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    arrays, parameters, types = {}, set(), template_types(kernel, spec.kernel_name)
    for start, end in kernel.parameters(source):
        parameters |= set(_NAME.findall(masked[start:end]))
        declared = pointee(source[start:end])
        if declared is not None:
            arrays[declared[0]] = _Array(declared[1], declared[0], -1, types.get(declared[1], declared[1]))
    arrays.update(_pointers_into(masked, kernel.body_open, kernel.body_close, arrays, types))
    declarations = [*parameter_declarations(masked, kernel.params_open),
                    *_declarations(masked, kernel.body_open + 1, kernel.body_close)]
    unseen = _unseen(masked, kernel.body_open, kernel.body_close, arrays, declarations)
    found, reasons = [], []
    for loop in for_loops(masked[:kernel.body_close]):
        if loop.start < kernel.body_open or _in_directive(masked, loop.start):
            continue
        try:
            header = _header(masked, uncommented, loop)
            if header is None:
                continue
            if unseen:
                raise _Refused(f"the loop over {header[0]} is in a kernel that {unseen}")
            seen = {name: array for name, array in arrays.items() if array.declared < loop.start}
            found.append(_batched(source, masked, uncommented, loop, header, seen, _Names(declarations, loop.start),
                                  kernel.body_open))
        except _Refused as exc:
            reasons.append(str(exc))
        except Unparsed:
            continue
    return found, reasons


@dataclass(frozen=True)
class _Declared:
    name: str
    type: str  # the declared type's words, qualifiers dropped: `int`, `const float *`'s `float`
    indirect: str  # "*" for a pointer, "&" for a reference, "" for a value
    at: int
    array: bool  # declared with a bound, `float acc[4]`


# A declaration from where it starts: type, `*` or `&`, name; at a statement's start, in a for's, if's or
# switch's initialiser, or in a parameter list.
_DECLARED_HERE = (r"\s*(?!(?:return|else|case|goto|do|new|delete|throw|typedef|using)\b)"
                  r"(?P<type>(?:(?:const|volatile|static|unsigned|signed|long|short|__shared__|extern|register|"
                  r"constexpr)\s+)*[A-Za-z_][\w:]*(?:\s*<[^;<>()]*>)?)(?P<indirect>\s*[*&]+\s*|\s+)"
                  r"(?:(?:const|__restrict__|__restrict)\s+)*(?P<name>[A-Za-z_]\w*)\s*")
_DECLARATION = re.compile(r"(?:(?<=[;{}])|^)" + _DECLARED_HERE + r"(?=[=;,(){\[])")  # at a statement's start
_INITIALISER = re.compile(_DECLARED_HERE + r"(?=[=;,{\[(])")
_PARAMETER = re.compile(_DECLARED_HERE + r"(?=[=,)\[])")


def _declarations(masked: str, start: int, end: int) -> list[_Declared]:
    """Every name declared in masked[start:end], with its type: at statements' starts (each declarator of a list),
    in the initialisers of for, if and switch, and in lambdas' parameter lists. An expression statement may read
    as one too (`a * b;`), which only makes the readers of this list more careful."""
    found = _declared_at(masked, [m.start() for m in _DECLARATION.finditer(masked, start, end)], end, _INITIALISER)
    for head in re.finditer(r"\b(?:for|if|switch)\s*\(", masked[start:end]):
        opening = start + head.end() - 1
        init = expression_end(masked, opening + 1, end, ";")
        if masked[init:init + 1] == ";":  # an initialiser: `for (int i = 0; ...`, `if (int q = f(); q > 0)`
            found += _declared_at(masked, [opening + 1], init + 1, _INITIALISER)
    for parameters in re.finditer(r"\]\s*\(", masked[start:end]):
        found += parameter_declarations(masked, start + parameters.end() - 1)
    return found


def parameter_declarations(masked: str, opening: int) -> list[_Declared]:
    """The parameters declared in the list whose `(` is at `opening`."""
    close = closing(masked, opening)
    starts, at = [], opening + 1
    for part in split_top_level(masked[opening + 1:close], ","):
        starts.append(at)
        at += len(part) + 1
    return [d for begin in starts for d in _declared_at(masked, [begin], close + 1, _PARAMETER)]


def _declared_at(masked: str, starts: list[int], end: int, pattern: re.Pattern) -> list[_Declared]:
    """The declarations `pattern` reads at each start (and, but for parameters, the declarators after the first)."""
    found = []
    for begin in starts:
        match = pattern.match(masked, begin, end)
        if match is None:
            continue
        words = [w for w in match["type"].split() if w not in ("const", "volatile", "static", "__shared__", "extern",
                                                               "register", "constexpr")]
        if not words or words[0] in ("return", "else", "case", "sizeof"):
            continue
        kind, indirect = " ".join(words), match["indirect"].strip()
        found.append(_Declared(match["name"], kind, indirect, match.start("name"),
                               masked[match.end("name"):match.end("name") + 1] == "["))
        if pattern is _PARAMETER:
            continue
        close = expression_end(masked, match.end("name"), end, ";")
        for more in re.finditer(r",\s*(?P<indirect>[*&]*)\s*(?P<name>[A-Za-z_]\w*)\s*(?P<next>[=;,\[{(])",
                                masked[match.end("name"):close]):
            found.append(_Declared(more["name"], kind, more["indirect"], match.end("name") + more.start("name"),
                                   more["next"] == "["))
    return found


_NO_NAME = _Declared("", "", "", -1, False)


class _Names:
    """What the kernel declares before a loop: each name once, its type."""

    def __init__(self, declarations: list[_Declared], loop_start: int):
        counts: dict[str, int] = {}
        for declared in declarations:
            counts[declared.name] = counts.get(declared.name, 0) + 1
        self.all = declarations
        self.twice = {name for name, count in counts.items() if count > 1}
        self.once = {d.name: d for d in declarations if d.name not in self.twice}
        self.before = {name: d for name, d in self.once.items() if d.at < loop_start}

    def integer(self, name: str) -> bool:
        """Whether the name holds an integer whose arithmetic the 64-bit polynomials follow: signed, or 64 bits
        wide (a 32-bit unsigned wraps); threadIdx and the like count too."""
        base = re.split(r"\s*\.", name)[0]
        if base in LAUNCH_NAMES:
            return True
        return _wide_or_signed(self.before.get(name))


def _wide_or_signed(declared: "_Declared | None") -> bool:
    """Whether a declaration is of an integer value whose arithmetic the 64-bit polynomials follow exactly (up to
    the overflow a signed type leaves undefined): signed, or 64 bits wide, where a 32-bit unsigned one wraps."""
    return declared is not None and not declared.indirect and not declared.array and \
        re.fullmatch(INTEGER_TYPE, declared.type) is not None and \
        re.fullmatch(r"unsigned(?:\s+int)?|(?:std::)?uint32_t|uint", declared.type) is None


def _unseen(masked: str, start: int, end: int, arrays: dict[str, "_Array"], declarations: list[_Declared]) -> str:
    """What of the kernel may change a loop's names behind its text, in words ("" where nothing does): a reference,
    a local's address, a pointer that leaves sight (into a call, an object, another pointer's assignment), a pointer
    parameter assigned, or an array's name declared again."""
    body = masked[start:end]
    if reference := next((d for d in declarations if "&" in d.indirect), None):
        return f"declares a reference ({reference.name}), which may alias what a loop changes"
    for address in re.finditer(r"&\s*([A-Za-z_]\w*)\b(?!\s*[\[(])", body):
        if address.group(1) not in arrays and ADDRESS_OF_BEFORE.search(body[max(0, address.start() - 80):
                                                                             address.start() + 1]):
            return f"takes the address of {address.group(1)}, which may change through it"
    for name in arrays:
        for use in re.finditer(rf"(?<![\w.>]){name}\b(?!\s*\[)", body):
            call = _enclosing_call(body, use.start())
            before = body[max(0, use.start() - 80):use.start()]
            if call in ("__ldg", "") and re.match(r"\s*[+\-]", body[use.end():]) or \
                    re.search(r"\*\s*(?:(?:const|__restrict__|__restrict)\s+)*[A-Za-z_]\w*\s*=\s*\(?\s*&?\s*$",
                              before) or re.match(rf"\s*(?:{ASSIGNMENT}|\+\+|--)", body[use.end():]) or \
                    _WRITING_CALLS.fullmatch(call):
                continue  # pointer arithmetic, a pointer into it declared, it changed (below), or an atomic's target
            return f"lets the pointer {name} out of sight ({_statement_at(body, use.start())})"
    for name, array in arrays.items():
        if sum(d.name == name for d in declarations) > 1:
            return f"declares {name} more than once"
        if array.declared < 0 and re.search(rf"(?<![\w.>]){name}\s*=(?!=)", body):
            return f"assigns the pointer {name}"  # moved by += or ++ it stays in its buffer
    return ""


def _enclosing_call(text: str, at: int) -> str:
    """The function whose argument list encloses offset `at` ("" where none does)."""
    depth = 0
    for i in range(at - 1, -1, -1):
        char = text[i]
        if char in ")]}":
            depth += 1
        elif char in "([{":
            if depth == 0:
                called = re.search(r"((?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*)\s*(?:<[\w\s:,*]*>\s*)?$", text[:i])
                return " ".join(called.group(1).split()) if char == "(" and called else ""
            depth -= 1
    return ""


def _in_directive(masked: str, at: int) -> bool:
    """Whether offset `at` lies in a preprocessor directive (a macro's body, continued lines included)."""
    start = masked.rfind("\n", 0, at) + 1
    while start > 0 and masked[:start - 1].rstrip(" \t").endswith("\\"):
        start = masked.rfind("\n", 0, start - 1) + 1
    return masked[start:at].lstrip().startswith("#")


def _pointers_into(masked: str, start: int, end: int, parameters: dict[str, _Array],
                   types: dict[str, str]) -> dict[str, _Array]:
    """Local pointers into a parameter's buffer, declared once and never changed (`const float *row = x + r * n;`):
    they read and store that buffer, as the parameter does."""
    body = masked[start:end]
    found = {}
    for declared in re.finditer(r"(?<![\w.>])(?P<type>(?:[A-Za-z_][\w:]*\s+)*?[A-Za-z_][\w:]*)\s*\*\s*"
                                r"(?:(?:const|__restrict__|__restrict)\s+)*(?P<name>[A-Za-z_]\w*)\s*=(?!=)"
                                r"\s*(?P<value>[^;,?]+);", body):
        into = re.fullmatch(r"\s*\(?\s*&?\s*([A-Za-z_]\w*)\s*(?:[+\[)].*)?", declared["value"], re.DOTALL)
        words = [w for w in declared["type"].split() if w != "const"]
        name = declared["name"]
        if into is None or into.group(1) not in parameters or not words or "volatile" in words or \
                name in parameters or len(re.findall(rf"(?<![\w.>]){name}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*"
                                                     rf"{name}\b", body)) != 1:
            continue
        element = parameters[into.group(1)].element if words == ["auto"] else " ".join(words)
        found[name] = _Array(element, into.group(1), start + declared.start(), types.get(element, element))
    return found


def _header(masked: str, uncommented: str, loop: Statement) -> tuple[str, str, str, str, dict[str, str]] | None:
    """(variable, init, condition, increment, {stepped name: its step}) of `for (T v = A; v < B; v += S[, w += S]...)`
    (or `v <= B`, `++v`) without an unroll pragma; None for a loop of another form."""
    parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    if len(parts) != 3:
        return None
    init, condition, increment = parts
    declared = re.fullmatch(rf"\s*(?:{INTEGER_TYPE})\s+([A-Za-z_]\w*)\s*=[^,]+", init, re.DOTALL)
    if declared is None:
        return None
    v = declared.group(1)
    bound = re.fullmatch(rf"\s*{v}\s*<=?(?![<=])(?P<end>[\w\s.+\-*/%()<>:,]+)", condition)
    if bound is None:
        return None
    head = loop.head[0]

    def text(part: str, at: int) -> str:
        return " ".join(uncommented[at:at + len(part)].split())
    where = f"the loop over {v}"
    if not _plain(bound["end"]):
        raise _Refused(f"{where} reads memory or changes something in its condition "
                       f"({text(condition, head + len(init) + 1)})")
    stepped = {}
    for step in (" ".join(part.split()) for part in split_top_level(increment, ",")):
        match = re.fullmatch(r"([A-Za-z_]\w*) ?\+= ?(.+)|\+\+ ?([A-Za-z_]\w*)|([A-Za-z_]\w*) ?\+\+", step)
        if match is None or not _plain(match.group(2) or "1"):
            if match is None and re.search(rf"(?<![\w.]){v}\b", step):
                return None  # a loop of another form (`i -= 1`, `i = next[i]`)
            raise _Refused(f"{where} steps {step!r}, which is not `name += step` of what the loop does not change")
        name = match.group(1) or match.group(3) or match.group(4)
        if name in stepped:
            raise _Refused(f"{where} steps {name} twice")
        stepped[name] = match.group(2) or "1"
    if v not in stepped:
        return None
    for name, by in stepped.items():
        if moving := sorted(set(_NAME.findall(by)) & set(stepped)):
            raise _Refused(f"{where} steps {name} by {by}, which changes as the loop runs ({moving[0]})")
    before = masked[:loop.start].rstrip().rsplit("\n", 1)[-1].strip()
    if re.match(r"#\s*pragma\s+unroll\b|_Pragma\s*\(", before):
        raise _Refused(f"{where} carries an unroll pragma already")
    return (v, text(init, head), text(condition, head + len(init) + 1),
            text(increment, head + len(init) + len(condition) + 2), stepped)


def _plain(expression: str) -> bool:
    """Whether a loop's bound or step is arithmetic of names, members and numbers (casts and min/max allowed):
    no load, no call, no change, which the loads of a pass may evaluate again."""
    masked = mask(expression)
    calls = {m.group(1) for m in CALLED.finditer(masked)}
    return re.fullmatch(r"[\w\s.+\-*/%()<>:,]+", masked) is not None and not re.search(r"\+\+|--|->", masked) and \
        not re.search(r"(?:^|[(+\-*/%<>:])\s*\*", masked) and calls <= _PURE_CALLS | _CASTS and \
        len(split_top_level(masked, ",")) == 1  # commas only between a call's arguments


def _batched(source: str, masked: str, uncommented: str, loop: Statement, header: tuple,
             arrays: dict[str, _Array], names: "_Names", body_open: int) -> BatchedLoop:
    v, init, condition, increment, steps = header
    outer = tuple(name for name in steps if name != v)
    where = f"the loop over {v}"
    inside = loop.body.inner if loop.body.kind == "block" else (loop.body.start, loop.body.end)
    text = masked[inside[0]:inside[1]]
    if re.search(r"\b(?:for|while|do)\b", text):
        raise _Refused(f"{where} holds another loop")
    if escape := _ESCAPES.search(text):
        raise _Refused(f"{where} uses {escape.group().rstrip('(').strip()}")
    if LAMBDA.search(text):
        raise _Refused(f"{where} defines a lambda, whose body runs where it is called")
    if used := sorted(defined_macros(masked) - constant_macros(masked) & _names(masked[loop.start:loop.end])):
        raise _Refused(f"{where} uses the macro {used[0]}, whose expansion may read or store what its text "
                       f"does not show")
    for name in outer:
        if not _wide_or_signed(names.before.get(name)) and names.before.get(name, _NO_NAME).type not in (
                "unsigned", "unsigned int", "uint32_t", "std::uint32_t", "uint"):
            raise _Refused(f"{where} steps {name}, which is not an integer declared once before it")
    assigned = _assigned(text, arrays)
    if changed := sorted({v, *outer} & assigned):
        raise _Refused(f"{where} changes {changed[0]} in its body")
    read_by_head = {re.split(r"\s*\.", name)[0] for name in _NAME.findall(f"{condition}, {increment}")}
    if moving := sorted((read_by_head - {v, *outer}) & (assigned | names.twice)):
        raise _Refused(f"{where} changes {moving[0]}, which its condition or steps read")
    if pointers := sorted(read_by_head & set(arrays)):
        raise _Refused(f"{where} reads memory in its condition or steps (through {pointers[0]})")
    opaque = {arrays[name].buffer for name in _opaque(masked, inside, arrays, assigned, names, where)}
    accesses = _accesses(masked, uncommented, inside, arrays)
    written = {arrays[a.array].buffer for a in accesses if a.write}
    # what a subscript ahead may not read: a buffer the loop stores into, or uses otherwise than by subscript
    unreadable = {name for name, array in arrays.items() if array.buffer in opaque | written}
    parts = statements(masked, *inside)
    taken = identifiers(source)
    copies = {name: fresh_name(f"{name}_ahead", taken) for name in (v, *outer)}
    usable = {*copies, *((set(names.before) | LAUNCH_NAMES) - assigned - unreadable - set(outer))}
    own = _Declared(v, " ".join(re.match(rf"\s*({INTEGER_TYPE})", init).group(1).split()), "", -1, False)
    signed_or_wide = [name for name in outer if names.integer(name)] + ([v] if _wide_or_signed(own) else [])
    integers = {name for name in names.before if names.integer(name)} | set(signed_or_wide) | LAUNCH_NAMES
    wide = {d.name for d in (*names.before.values(), own) if re.fullmatch(WIDE_INTEGER_TYPE, d.type)}
    ahead = _Ahead(masked, _index_locals(masked, inside, names), usable, integers, copies, wide)
    loads, distinct = [], []
    by_buffer: dict[str, list[_Access]] = {}
    for access in accesses:
        if arrays[access.array].buffer not in opaque and _REGISTER_TYPES.fullmatch(arrays[access.array].instance):
            by_buffer.setdefault(arrays[access.array].buffer, []).append(access)
    for buffer, found in by_buffer.items():
        if buffer in written:
            # one name for every access: two pointers into the buffer may meet at other subscripts
            if len({a.array for a in found}) == 1:
                load, step = _written_load(masked, parts, found, arrays[found[0].array], ahead, steps)
                if load is not None:
                    loads.append(load)
                    distinct += [step] if step else []
            continue
        groups: dict[tuple[str, str], list[_Access]] = {}
        for access in found:
            groups.setdefault((access.array, access.key), []).append(access)
        for (name, _), group in groups.items():
            if any(made_whenever_run(masked, parts, a.start) for a in group) and \
                    (subscript := ahead.subscript(group[0])) is not None:
                loads.append(Load(name, arrays[name].element, subscript, tuple((a.start, a.end) for a in group), None))
    loads = _outermost(loads)
    if not loads:
        raise _Refused(f"{where} makes no load that can be taken ahead (made at every iteration, at a subscript "
                       f"of its variables and of what it does not change, from an array that no earlier iteration "
                       f"of a pass may store into)")
    return BatchedLoop(loop, init, condition, increment, copies, tuple(loads), tuple(distinct))


def _assigned(text: str, arrays: dict[str, "_Array"]) -> set[str]:
    """The names the masked text assigns, increments or decrements, or an element or member of which it does
    (the kernel's pointers aside: their elements are the arrays')."""
    part = r"(?:\s*\.\s*[A-Za-z_]\w*|\s*\[[^\[\]]*(?:\[[^\[\]]*\][^\[\]]*)*\])*"
    found = set(re.findall(rf"(?<![\w.>])([A-Za-z_]\w*){part}\s*(?:{ASSIGNMENT}|\+\+|--)", text))
    found |= set(re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", text))
    plain = set(re.findall(rf"(?<![\w.>])([A-Za-z_]\w*)\s*(?:{ASSIGNMENT}|\+\+|--)", text))
    return {name for name in found if name not in arrays or name in plain}


def _names(masked: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", masked))


def _index_locals(masked: str, inside: tuple[int, int], names: "_Names") -> dict[str, affine.Poly]:
    """The body's integer locals defined once by an affine expression, as polynomials: each declared once in the
    kernel, signed or 64 bits wide, first mentioned where defined, without narrowing casts."""
    text = masked[inside[0]:inside[1]]
    known = {}
    for name, poly in affine_locals(masked, *inside).items():
        definition = re.search(rf"\b{INTEGER_TYPE}\s+{name}\s*=([^;,]*)", text)
        first = re.search(rf"(?<![\w.]){name}\b", text)
        declared = [d for d in names.all if d.name == name and inside[0] <= d.at < inside[1]]
        if definition is None or first.start() < definition.start() or _NARROW.search(definition.group(1)) or \
                len(declared) != 1 or not _wide_or_signed(declared[0]):
            continue
        known[name] = poly
    return known


def _opaque(masked: str, inside: tuple[int, int], arrays: dict[str, _Array], assigned: set[str], names: "_Names",
            where: str) -> set[str]:
    """The arrays the loop uses other than by subscript (its address taken or passed on, or the pointer
    changed), whose elements no load may be taken ahead for; refused where it stores through another pointer, calls
    a method, or calls anything but CUDA's math, conversions, loads and atomics into an array's element."""
    text = masked[inside[0]:inside[1]]
    opaque = {name for name in arrays if name in assigned}
    for match in re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\b(?!\s*\[)", text):
        preceding = text[max(0, match.start() - 20):match.start()]
        if match.group(1) in arrays and not re.search(r"\b__ldg\s*\(\s*$", preceding):
            opaque.add(match.group(1))
    for match in re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\s*\[", text):
        preceding = text[max(0, match.start() - 40):match.start()]
        if match.group(1) in arrays and ADDRESS_OF_BEFORE.search(preceding) and \
                not (re.search(r"\b__ldg\s*\(\s*&\s*$", preceding) and
                     re.match(r"\s*\)", text[closing(text, match.end() - 1) + 1:])):
            opaque.add(match.group(1))  # its address taken: `&a[i]` anywhere but `__ldg(&a[i])`
    if method := re.search(r"(?:\.|->)\s*([A-Za-z_]\w*)\s*(?:<[\w\s:,*]*>\s*)?\(", text):
        raise _Refused(f"{where} calls the method {method.group(1)}, which may change its object or store anywhere")
    for call in re.finditer(r"(?<![\w.])((?:[A-Za-z_]\w*\s*::\s*)*[A-Za-z_]\w*)\s*(?:<[\w\s:,*]*>\s*)?\(", text):
        name = " ".join(call.group(1).split())
        if name in _CONTROL_WORDS:
            continue
        if _WRITING_CALLS.fullmatch(name):
            target = split_top_level(text[call.end():closing(text, call.end() - 1)], ",")[0]
            base = re.match(r"\s*&?\s*([A-Za-z_]\w*)", target)
            if base is None or base.group(1) not in arrays:
                raise _Refused(f"{where} calls {name} on {' '.join(target.split())}, which may point into any "
                               f"array")
        elif not _PURE_BODY_CALLS.fullmatch(re.split(r"\s*::\s*", name)[-1]) or \
                "::" in name and not re.match(r"(?:std|cuda::std)\s*::", name):
            raise _Refused(f"{where} calls {name}, which may store, or change what it is given")
    for operator in re.finditer(rf"(?<![=!<>])(?:{ASSIGNMENT})|\+\+|--", text):
        target = _target(text, operator)
        if target is None or target in arrays or _local(target, names, arrays):
            continue
        raise _Refused(f"{where} stores through a pointer or member ({_statement_at(text, operator.start())}), "
                       f"which may point into any array")
    return opaque


def _target(text: str, operator: re.Match) -> str | None:
    """What an assignment or ++/-- in the masked text changes: None for a plain name, the array's name for an
    element `a[...]`, `.v` for a member of `v`, "*" for anything else (a dereference, a member through a pointer)."""
    before = text[:operator.start()].rstrip()
    if operator.group() in ("++", "--") and not re.search(r"[\w\])]$", before):  # prefix: what follows
        named = re.match(r"\s*([A-Za-z_]\w*)\s*(\[|\.|->)?", text[operator.end():])
        if named is None or named.group(2) == "->":
            return "*"
        return "." + named.group(1) if named.group(2) == "." else named.group(1) if named.group(2) else None
    if before.endswith("]"):
        depth, at = 0, len(before) - 1
        while at > 0:
            depth += {"]": 1, "[": -1}.get(before[at], 0)
            if depth == 0:
                break
            at -= 1
        named = re.search(r"(->|\.)?\s*([A-Za-z_]\w*)\s*$", before[:at])
        return "*" if named is None or named.group(1) else named.group(2)
    member = re.search(r"(?<![\w.>])([A-Za-z_]\w*)\s*\.\s*[A-Za-z_]\w*$", before)
    if member:
        return "." + member.group(1)
    named = re.search(r"(->|\.|\*)?\s*([A-Za-z_]\w*)$", before)
    if named is not None and named.group(1) == "*" and re.search(r"[\w>]\s*$", before[:named.start()]):
        return None  # a pointer declared, `float *p = ...`, not a store through one
    return "*" if named is None or named.group(1) else None


def _statement_at(text: str, at: int) -> str:
    start = max(text.rfind(c, 0, at) for c in ";{}") + 1
    end = min((i for i in (text.find(";", at), len(text)) if i >= 0))
    return " ".join(text[start:end].split())


def _local(target: str, names: "_Names", arrays: dict[str, "_Array"]) -> bool:
    """Whether a store's target is the kernel's own: an element of an array it declares once (`float acc[4];`),
    or a member of a value it declares once (`float2 v;`, not a pointer's)."""
    declared = names.once.get(target.lstrip("."))
    if declared is None or declared.indirect or declared.name in arrays or target == "*":
        return False
    return declared.array if not target.startswith(".") else not declared.array


def _accesses(masked: str, uncommented: str, inside: tuple[int, int], arrays: dict[str, _Array]) -> list[_Access]:
    found = []
    for match in re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\s*\[", masked[inside[0]:inside[1]]):
        name = match.group(1)
        if name not in arrays:
            continue
        opening = inside[0] + match.end() - 1
        close = closing(masked, opening)
        start, end = inside[0] + match.start(), close + 1
        write = bool(re.match(rf"\s*(?:{ASSIGNMENT}|\+\+|--)", masked[end:end + 8])) or \
            bool(re.search(r"(?:\+\+|--)\s*$", masked[max(0, start - 8):start]))
        ldg = re.search(r"\b__ldg\s*\(\s*&\s*$", masked[max(0, start - 40):start])
        shut = re.match(r"\s*\)", masked[end:])
        if ldg and shut:
            start, end = start - len(ldg.group()), end + shut.end()
        subscript = uncommented[opening + 1:close]
        found.append(_Access(name, start, end, subscript, opening + 1, write, " ".join(subscript.split())))
    # A read through the read-only cache at an offset, __ldg(x + j): the element x[j].
    for match in re.finditer(r"\b__ldg\s*\(\s*([A-Za-z_]\w*)\s*\+", masked[inside[0]:inside[1]]):
        if match.group(1) in arrays:
            opening = inside[0] + match.group().index("(") + match.start()
            close = closing(masked, opening)
            at = inside[0] + match.end()
            at += len(uncommented[at:close]) - len(uncommented[at:close].lstrip())
            subscript = uncommented[at:close]
            found.append(_Access(match.group(1), inside[0] + match.start(), close + 1, subscript, at, False,
                                 " ".join(subscript.split())))
    return sorted(found, key=lambda a: a.start)


class _Ahead:
    """Subscripts spelled for a pass's loads, at the copies of the loop's variables."""

    def __init__(self, masked: str, known: dict[str, affine.Poly], usable: set[str], integers: set[str],
                 copies: dict[str, str], wide: set[str]):
        self.masked, self.known, self.copies = masked, known, copies
        self.usable = usable  # the loop's variables, and what the loop does not change, declared once before it
        self.integers = integers  # those of them whose arithmetic the 64-bit polynomials follow
        self.wide = wide  # those of them 64 bits wide

    @staticmethod
    def _bases(names: set[str]) -> set[str]:
        return {re.split(r"\s*\.", name)[0] for name in names}

    def subscript(self, access: _Access) -> str | None:
        """As written where it names only what is usable, through no pointer, calling nothing but min, max, abs
        or a cast; else as the polynomial of the body's index locals (64-bit arithmetic); None where neither
        serves."""
        written = self.masked[access.subscript_at:access.subscript_at + len(access.subscript)]
        called = {m.group(1) for m in CALLED.finditer(written)}
        if self._bases(set(_NAME.findall(written)) - called - _TYPE_WORDS) <= self.usable and \
                called <= _PURE_CALLS | _CASTS and \
                not re.search(r"->|(?:^|[(\[+\-*/%<>=?:,!~&|^])\s*\*", written):
            return _renamed(access.subscript, self.copies)
        poly = self.poly(access)
        spelled = affine.spelled(poly) if poly is not None else ""
        return _renamed(spelled, self.copies) if spelled else None

    def poly(self, access: _Access) -> affine.Poly | None:
        """The subscript's polynomial, where it holds only usable integers and narrows nothing by a cast."""
        if _NARROW.search(access.subscript) or re.search(r"->", access.subscript):
            return None
        try:
            poly = affine.parse(access.subscript, self.known)
        except affine.NotAffine:
            return None
        names = affine.names(poly)
        return poly if self._bases(names) <= self.usable and all(
            name in self.integers or self._bases({name}) <= LAUNCH_NAMES for name in names) else None


def _renamed(text: str, copies: dict[str, str]) -> str:
    """The text with the loop's variables replaced by their copies (not a member of the same name, `p. j`)."""
    def copy(match: re.Match) -> str:
        return match.group() if re.search(r"(?:\.|->)\s*$", text[:match.start()]) else copies[match.group()]
    return re.sub(r"\b(?:%s)\b" % "|".join(map(re.escape, copies)), copy, text) if copies else text


def _outermost(loads: list[Load]) -> list[Load]:
    """The loads less the reads inside another load's read (`idx[i]` in `table[idx[i]]`), which the outer
    register replaces whole; a load left with no read (nor a compound assignment's) is dropped."""
    spans = [span for load in loads for span in load.spans]
    kept = []
    for load in loads:
        own = tuple(s for s in load.spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans))
        if own or load.compound:
            kept.append(Load(load.array, load.element, load.subscript, own, load.compound))
    return kept


def _written_load(masked: str, parts: list[Statement], found: list[_Access], written: _Array, ahead: _Ahead,
                  steps: dict[str, str]) -> tuple[Load | None, str]:
    """The load ahead of an array the loop writes, and the run-time test that its subscript moves ("" where the
    step is a nonzero constant): taken where every access has one subscript, moving every iteration, and the
    first statement touching the array reads it, before any store of its own; else (None, "")."""
    array = found[0].array
    polys = [ahead.poly(a) for a in found]
    if polys[0] is None or any(p != polys[0] for p in polys):
        return None, ""
    step = _moves(polys[0], ahead, steps)
    if step is None:
        return None, ""
    first = next(s for s in parts if s.start <= found[0].start < s.end)
    mine = [a for a in found if first.start <= a.start < first.end]
    compound = None
    if first.kind == "if":
        reads = [a for a in mine if first.head[0] <= a.start < first.head[1] and not a.write]
        if len(reads) < sum(first.head[0] <= a.start < first.head[1] for a in mine):
            return None, ""
    elif first.kind == "simple" and len(split_top_level(masked[first.start:first.end - 1], ",")) == 1:
        stores = [a for a in mine if a.write]
        reads = [a for a in mine if not a.write]
        if stores:
            target = stores[0]
            operator = re.match(rf"\s*({ASSIGNMENT})", masked[target.end:])
            if len(stores) > 1 or target.start != first.start or operator is None:
                return None, ""
            if operator.group(1) != "=":
                if not _BUILTIN.fullmatch(written.instance):
                    return None, ""
                at = target.end + operator.start(1)
                spaced = re.match(r"\s*", masked[at + len(operator.group(1)):]).end()
                compound = (at, at + len(operator.group(1)) + spaced, first.end - 1, operator.group(1)[:-1])
    else:  # a loop, a block, or a statement of several expressions (`a[i] = x, s += a[i];`)
        return None, ""
    if compound is None and not any(made_whenever_run(masked, parts, a.start) for a in reads):
        return None, ""
    subscript = ahead.subscript(found[0])
    if subscript is None:
        return None, ""
    return Load(array, written.element, subscript, tuple((a.start, a.end) for a in reads), compound), step


def _moves(poly: affine.Poly, ahead: _Ahead, steps: dict[str, str]) -> str | None:
    """How far the subscript moves each iteration: "" where by a nonzero constant, the test that it moves
    (`(long long)nx * (long long)ny != 0`) where by a product of integers the loop does not change; None where it
    stays, or moves by what changes as it runs or is not such an integer."""
    moved: affine.Poly = {}
    for name in ahead.copies:
        stride = affine.stride(poly, name)
        if stride is None:
            return None
        if stride:
            try:
                by = affine.parse(steps[name], ahead.known)
            except affine.NotAffine:
                return None
            if not all(n in ahead.integers or ahead._bases({n}) <= LAUNCH_NAMES for n in affine.names(by)) or \
                    re.search(r"\d\.|\.\d|\d[eE]|\d[fF]\b", steps[name]) or _CAST_IN_STEP.search(steps[name]) or \
                    name not in ahead.wide and affine.names(by) & ahead.wide:
                return None  # a float, a cast, or a 64-bit step of a narrower name: the polynomial's step may not be
                # the one the name takes
            moved = affine.add(moved, affine.product(stride, by))
    if not moved or affine.names(moved) & set(ahead.copies):
        return None
    if affine.is_constant(moved):
        return ""
    spelled = affine.spelled(moved)
    return f"({spelled}) != 0" if spelled else None


def _rendered(source: str, found: BatchedLoop, taken: set[str]) -> list[str]:
    k = fresh_name("b", taken)
    taken |= set(found.copies.values())
    registers = [fresh_name(f"{load.array}_ahead", taken) for load in found.loads]
    distinct = fresh_name("moves", taken) if found.distinct else ""
    more = f" && ({k} == 0 || {distinct})" if distinct else ""
    replacements = []
    for load, register in zip(found.loads, registers):
        replacements += [(start, end, f"{register}[{k}]") for start, end in load.spans]
        if load.compound:
            at, stop, semicolon, op = load.compound
            replacements += [(at, stop, f"= {register}[{k}] {op} ("), (semicolon, semicolon, ")")]
    body = source[found.loop.body.start:found.loop.body.end]
    for start, end, text in sorted(replacements, reverse=True):
        at, stop = start - found.loop.body.start, end - found.loop.body.start
        body = body[:at] + text + body[stop:]
    condition_ahead = _renamed(found.condition, found.copies)
    increment_ahead = _renamed(found.increment, found.copies)
    body_lines = reindent(body)
    return ["{",
            f"{INDENT}// Loads batched: each pass loads what {PARAMETER} iterations read first, then runs them "
            f"in order.",
            f"{INDENT}{found.init};",
            *([f"{INDENT}const bool {distinct} = {' && '.join(found.distinct)};"] if distinct else []),
            f"{INDENT}while ({found.condition}) {{",
            *(f"{INDENT * 2}{load.element} {register}[{PARAMETER}];" for load, register in zip(found.loads, registers)),
            f"{INDENT * 2}{{",
            *(f"{INDENT * 3}auto {copy} = {name};" for name, copy in found.copies.items()),
            f"{INDENT * 3}#pragma unroll",
            f"{INDENT * 3}for (int {k} = 0; {k} < {PARAMETER} && {condition_ahead}{more}; {k}++, {increment_ahead}) {{",
            *(f"{INDENT * 4}{register}[{k}] = {load.array}[{load.subscript}];"
              for load, register in zip(found.loads, registers)),
            f"{INDENT * 3}}}",
            f"{INDENT * 2}}}",
            f"{INDENT * 2}#pragma unroll",
            f"{INDENT * 2}for (int {k} = 0; {k} < {PARAMETER} && {found.condition}{more}; {k}++, {found.increment}) "
            f"{body_lines[0]}",
            *(INDENT * 2 + line for line in body_lines[1:]),
            f"{INDENT}}}",
            "}"]
