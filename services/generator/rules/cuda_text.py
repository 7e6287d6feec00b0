"""Reading CUDA source text just well enough to rewrite one kernel in place.

The rules edit the user's own text rather than re-printing a parsed tree, so everything they do not touch
(comments, macros, helper functions, formatting) survives verbatim. To find code structure without being
fooled by comments and string literals, the searches run on a *masked* copy of the source: the same length,
with comments (and, optionally, literals) blanked out, so that every position found in the mask is the same
position in the original.
"""
import re
from dataclasses import dataclass

from shared.domain.spec import kernel_base_name

HEADER = "// kforge rules:"
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# The names CUDA gives every kernel for its place in the launch
LAUNCH_NAMES = frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"})
# The integer types kernels declare indices and counts with, `std::` spellings included (<cstddef>, <cstdint>).
INTEGER_TYPE = (r"(?:unsigned\s+long\s+long|unsigned\s+long|unsigned\s+int|unsigned|long\s+long|long|int|"
                r"(?:std::)?(?:size_t|ptrdiff_t|u?int(?:32|64)_t))")
WIDE_INTEGER_TYPE = r"(?:\w+\s+)?long(?:\s+long)?|(?:std::)?(?:size_t|ptrdiff_t|u?int64_t)"  # 64 bits wide


_COMMENT = r"//[^\n]*|/\*.*?(?:\*/|\Z)"
_LITERAL = r"\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?"
_COMMENTS_AND_LITERALS = re.compile(f"{_COMMENT}|{_LITERAL}", re.DOTALL)
_BRACKETS = re.compile(r"[()\[\]{}]")


def mask(source: str, literals: bool = True) -> str:
    """`source` with comments (and string and character literals, unless `literals` is False) replaced by
    spaces, newlines kept: same length, same line numbers."""
    def blank(match: re.Match) -> str:
        text = match.group()
        if not literals and text[0] in "\"'":
            return text
        return "\n".join(" " * len(line) for line in text.split("\n"))

    return _COMMENTS_AND_LITERALS.sub(blank, source)


def closing(masked: str, opening: int) -> int:
    """The index of the bracket closing the one at `opening` (any of ( [ {), counting all three kinds."""
    depth = 0
    for bracket in _BRACKETS.finditer(masked, opening):
        depth += 1 if bracket.group() in "([{" else -1
        if depth == 0:
            return bracket.start()
    raise ValueError(f"unbalanced {masked[opening]!r} at offset {opening}")


def split_top_level(text: str, separator: str, brackets: str = "([{") -> list[str]:
    """`text` split at the separators that are outside all `brackets` (text must be masked); pass "([{<" where
    template arguments' commas do not separate either."""
    closers = brackets.translate(str.maketrans("([{<", ")]}>"))
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in brackets:
            depth += 1
        elif char in closers:
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


@dataclass(frozen=True)
class Kernel:
    """Where a kernel's definition lies in its source: name, parameter list and body, as offsets."""

    name_at: int  # first character of the kernel's name in its declaration
    params_open: int  # its "("
    params_close: int  # its ")"
    body_open: int  # its "{"
    body_close: int  # its "}"
    declaration: str  # the masked text from the previous declaration's end to the name (holds __global__)

    def parameters(self, source: str) -> list[tuple[int, int]]:
        """(start, end) of each parameter's text in `source`; none for an empty or void list."""
        masked = mask(source)
        spans, start = [], self.params_open + 1
        for part in split_top_level(masked[start:self.params_close], ","):
            spans.append((start, start + len(part)))
            start += len(part) + 1
        if len(spans) == 1 and source[spans[0][0]:spans[0][1]].strip() in ("", "void"):
            return []
        return spans


def find_kernel(source: str, kernel_name: str) -> Kernel:
    """The __global__ definition (not a prototype) of the kernel that `kernel_name` names, by its base name for
    a template instance (scale for scale<float>); ValueError when there is none."""
    name = kernel_base_name(kernel_name)
    masked = mask(source)
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", masked):
        params_open = match.end() - 1
        params_close = closing(masked, params_open)
        after = re.match(r"\s*\{", masked[params_close + 1:])
        if after is None:
            continue
        declaration_start = max(masked.rfind(c, 0, match.start()) for c in ";{}") + 1
        declaration = re.sub(r"__launch_bounds__\s*\([^()]*\)", " ", masked[declaration_start:match.start()])
        if "__global__" not in declaration:
            continue
        body_open = params_close + after.end()
        return Kernel(match.start(), params_open, params_close, body_open, closing(masked, body_open),
                      masked[declaration_start:match.start()])
    raise ValueError(f"no __global__ definition of {name} in the source")


def template_types(kernel: Kernel, kernel_name: str) -> dict[str, str]:
    """The type each type parameter of a kernel template stands for in the instance `kernel_name` names (T: double
    for `row_dot<double, 4>` of `template <typename T, int K>`), a parameter the instance leaves out standing for
    its default; none for a kernel that is not a template, or an instance naming more arguments than the template
    has parameters, or leaving out one without a default."""
    header = re.search(r"\btemplate\s*<", kernel.declaration)
    instance = re.fullmatch(r"[^<]*<(.*)>\s*", kernel_name, re.DOTALL)
    if header is None or instance is None:
        return {}
    depth, at = 0, header.end() - 1
    for at in range(header.end() - 1, len(kernel.declaration)):
        depth += {"<": 1, ">": -1}.get(kernel.declaration[at], 0)
        if depth == 0:
            break
    parameters = split_top_level(kernel.declaration[header.end():at], ",", "([{<")
    arguments = split_top_level(instance[1], ",", "([{<")
    if len(arguments) > len(parameters):
        return {}
    found = {}
    for number, parameter in enumerate(parameters):
        named = re.fullmatch(r"\s*(?:typename|class)\s+([A-Za-z_]\w*)\s*(?:=.*)?", parameter, re.DOTALL)
        given = arguments[number] if number < len(arguments) else parameter.partition("=")[2]
        if not given.strip():  # left out, without a default
            return {}
        if named is not None:  # a default may name an earlier parameter (`class U = T`)
            found[named[1]] = found.get(given.strip(), " ".join(given.split()))
    return found


# Words that, called, are functional casts (`int(x)`) rather than functions.
CAST_WORDS = frozenset({"int", "unsigned", "long", "size_t", "ptrdiff_t", "int64_t", "uint64_t", "int32_t", "uint32_t"})


# Text that ends with an address-of operator: `&` after an operator, a bracket or a pointer cast
# (`(const float2 *)&x[i]`), not a bitwise and after an operand (`(a + b) & m`).
ADDRESS_OF_BEFORE = re.compile(r"(?:^|[^\w)\]\s&]|&&|\(\s*[\w\s:<>]+\*+\s*\))\s*&\s*$")

# A called name, template arguments included (`f<2>(v)`).
CALLED = re.compile(r"(?<!\w)([A-Za-z_]\w*)\s*(?:<[\w\s:,*]*>\s*)?\(")


def calls(masked: str, casts: frozenset[str] = CAST_WORDS) -> bool:
    """Whether the text calls a function; a functional cast to one of `casts` is none."""
    return any(m.group(1) not in casts for m in CALLED.finditer(masked))


def functions_named(masked: str) -> set[str]:
    """The names the text defines or declares as functions (a prototype counts: its body may follow the kernel);
    a call statement of the same form counts too, which only makes the readers of this set more careful."""
    return {m.group(1) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\([^()]*\)\s*(?:\{|;)", masked)}


def declared_parameters(masked: str) -> list[tuple[str, str]]:
    """(name, parameter list) of each function the (masked) text declares or defines; a call statement of that form
    counts too, which only makes the readers of it more careful."""
    return [(m[1], m[2]) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*(?:const\s*)?(?:\{|;)", masked)
            if m[1] not in _STATEMENT_WORDS]


def reference_places(functions: list[tuple[str, str]]) -> dict[str, set[int]]:
    """For each (name, parameter list), the places of the parameters taken by a reference that is not const
    (`float &v`, a template's `T &&v`), over every declaration of the name."""
    places: dict[str, set[int]] = {}
    for name, parameters in functions:
        found = places.setdefault(name, set())
        for place, parameter in enumerate(split_top_level(parameters, ",", "([{<")):
            if "&" in parameter and not const_referent(parameter.partition("&")[0]):
                found.add(place)
    return places


def const_referent(declared: str) -> bool:
    """Whether the type written before a reference's `&` is const where it binds: after the last `*` where there is
    one (`float *const &p`), anywhere else (`const float &g`, `float const &g`)."""
    return re.search(r"\bconst\b", declared.rpartition("*")[2] if "*" in declared else declared) is not None


def passed_by_reference(masked: str, start: int, end: int, places: dict[str, set[int]]) -> str | None:
    """The function whose call takes masked[start:end] as a whole argument (`f(x[i], 2)`) at a place it takes by a
    reference that is not const (reference_places); else None."""
    if not re.search(r"[(,]\s*$", masked[:start]) or not re.match(r"\s*[,)]", masked[end:]):
        return None
    depth = 0
    for i in range(start - 1, -1, -1):
        depth += (masked[i] == ")") - (masked[i] == "(")
        if depth < 0:
            name = re.search(r"([A-Za-z_]\w*)\s*(?:<[\w\s:,*&]*>\s*)?$", masked[:i])
            place = len(split_top_level(masked[i + 1:start], ",")) - 1
            return name[1] if name and place in places.get(name[1], ()) else None
    return None


def defined_functions(masked: str) -> dict[str, list[tuple[str, int, int]]]:
    """Each function the (masked) text defines, by name: the parameter list and the offsets of the body's braces
    of each definition (an overload or a template's, each)."""
    found: dict[str, list[tuple[str, int, int]]] = {}
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*(?:const\s*)?\{", masked):
        if match[1] not in _STATEMENT_WORDS:
            found.setdefault(match[1], []).append((match[2], match.end() - 1, closing(masked, match.end() - 1)))
    return found


_STATEMENT_WORDS = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"})


# A lambda's definition: captures, parameters, `mutable`, a return type, then its body's brace.
LAMBDA = re.compile(r"\[[^\[\]]*\]\s*(?:\([^()]*\)\s*)?(?:mutable\s*)?(?:->\s*[\w:]+\s*)?\{")


def pointee(declaration: str) -> tuple[str, str] | None:
    """(name, element type) of a parameter declared as a plain pointer to a non-volatile type (`const __half
    *__restrict__ x`: x, __half); None for any other declaration."""
    declared = re.fullmatch(r"\s*(?P<type>[\w\s:]+?)\s*\*\s*(?:(?:const|__restrict__|__restrict)\s+)*"
                            r"(?P<name>[A-Za-z_]\w*)\s*", mask(declaration))
    words = [] if declared is None else [word for word in declared["type"].split() if word != "const"]
    return (declared["name"], " ".join(words)) if words and "volatile" not in words else None


def top_level_conjuncts(condition: str) -> list[str]:
    """The operands of the `&&`s at the top level of a (masked) condition: `a < n && (b || c)` -> `a < n`, `(b || c)`."""
    return split_top_level(condition.replace("&&", "\0"), "\0")


def unparenthesised(text: str) -> str:
    """The text without the parentheses that enclose all of it: `((a + b))` -> `a + b`, `(a) + (b)` as it is."""
    text = text.strip()
    while text.startswith("(") and text.endswith(")"):
        masked = mask(text)
        depth = 0
        for i, char in enumerate(masked):
            depth += char == "("
            depth -= char == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        text = text[1:-1].strip()
    return text


def blanked_inside(text: str, brackets: str = "([{") -> str:
    """The text with what its `brackets` enclose blanked to spaces, its length and offsets kept."""
    closers = brackets.translate(str.maketrans("([{", ")]}"))
    out, depth = [], 0
    for char in text:
        depth -= char in closers
        out.append(char if depth == 0 else " ")
        depth += char in brackets
    return "".join(out)


# The functions a tree or an atomic takes the larger or the smaller of two values with.
EXTREMA = {"max": ("fmaxf", "fmax", "max"), "min": ("fminf", "fmin", "min")}


def outside_brackets(text: str) -> str:
    """The text with what its brackets enclose blanked, innermost first: what stands at its top level."""
    while text != (text := re.sub(r"\([^()\[\]]*\)|\[[^()\[\]]*\]", " ", text)):
        pass
    return text


def identifiers(source: str) -> set[str]:
    return set(IDENTIFIER.findall(mask(source)))


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base` with underscores appended, whichever the source does not use yet."""
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name


# --- the header that records which rules a rewrite carries ---------------------------------------------
def rules_in_header(source: str) -> tuple[str, ...]:
    first = source.lstrip().split("\n", 1)[0].strip()
    if not first.startswith(HEADER):
        return ()
    return tuple(name.strip() for name in first[len(HEADER):].split(",") if name.strip())


def without_header(source: str) -> str:
    stripped = source.lstrip()
    if stripped.startswith(HEADER):
        return stripped.split("\n", 1)[1] if "\n" in stripped else ""
    return source


def with_header(source: str, rules: tuple[str, ...]) -> str:
    return f"{HEADER} {', '.join(rules)}\n{without_header(source).strip()}\n"


def normalised(source: str) -> str:
    """The source without its header, trailing spaces and surrounding blank lines: what two renderings of
    the same kernel share however they travelled (answers are stripped when parsed)."""
    return "\n".join(line.rstrip() for line in without_header(source).strip().splitlines())


# What works across a warp: shuffles, votes, warp reductions and matches, the active mask; and cooperative groups'
# partitions of a block into tiles of warps.
WARP_COLLECTIVES = ("__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",
                    "__any_sync", "__all_sync", "__activemask", "__reduce_add_sync", "__reduce_min_sync",
                    "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
                    "__match_any_sync", "__match_all_sync")
GROUP_TILES = ("tiled_partition", "coalesced_threads")

_DEFINITION = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(.*)$", re.MULTILINE)


def macro_definitions(masked: str) -> list[tuple[str, str]]:
    """Every #define of the (masked) source, wherever it stands: its name and the rest of its first line
    (parameters and body)."""
    return _DEFINITION.findall(masked)


def defined_macros(masked: str) -> frozenset[str]:
    """Every name a #define of the source defines."""
    return frozenset(name for name, _ in macro_definitions(masked))


def constant_macros(masked: str) -> set[str]:
    """The object-like macros defined once, on a line of their own, as arithmetic of numbers and of such macros
    (`#define RADIUS 4`, `#define DIAMETER (2 * RADIUS + 1)`, a block size's `#define THREADS 256`): constants,
    which read and store nothing and hide no statement (review, helper-88: a window's radius refused every loop
    using it)."""
    found = macro_definitions(masked)
    names = [name for name, _ in found]
    bodies = {name: body.strip() for name, body in found  # object-like, on one line
              if names.count(name) == 1 and body.strip() and not body.startswith("(") and "\\" not in body}
    constant: set[str] = set()

    def arithmetic(body: str) -> bool:
        numbers_gone = re.sub(r"\b\d[\w.]*", " ", body)  # suffixes and exponents with their number
        words_read = re.sub(r"[A-Za-z_]\w*", lambda m: " " if m[0] in constant else "?", numbers_gone)
        return re.fullmatch(r"[\s+\-*/%()]*", words_read) is not None
    while more := {name for name, body in bodies.items() if name not in constant and arithmetic(body)}:
        constant |= more
    return constant
