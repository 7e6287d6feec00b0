"""The submitted kernel in the spellings the recognisers read, its meaning unchanged.

Users write one construct many ways, and the recognisers (shapes.py) read one spelling of each. Before they read
a kernel, its body is respelled, each step one that C++ makes exact, and left out wherever that is not sure:
- the source's own macros (`#define IDX(r, c) ((r) * cols + (c))`, `#define RADIUS 2`) are expanded where the
  body uses them, as the preprocessor would (arguments spaced from their neighbours, numbers read whole). Only
  macros whose meaning is the same for every compile: defined once, outside conditional groups, before the kernel,
  never undefined, without `#`, `##` or variadic arguments, named by no tune parameter, param or -D/-U option;
  and not where an expansion still names a macro of the source, which the compiler would expand again;
- an `auto` local initialised by integer arithmetic of the launch geometry, integer literals, the kernel's integer
  parameters (none a local shadows) and casts gets the type C++ deduces for it (`unsigned int` for
  `blockIdx.x * blockDim.x + threadIdx.x`, `size_t` for a `(size_t)` cast's product), as spelled by its widest
  term; none where those terms are spelled differently or the type is narrower than int;
- a thread index defined with an offset into an interior (`int x = blockIdx.x * blockDim.x + threadIdx.x + 1;`)
  is defined without it and read as `(x + 1)` after, where nothing changes it, takes its address or declares it
  again (the same wherever x + 1 does not pass its type's largest value);
- an early return (`if (i >= n) return;`) becomes the guard it means: the statements after it run inside
  `if (i < n) { ... }`, the condition negated by De Morgan where it is a chain of `||` of comparisons of integers
  (a float comparison stays `!(v >= t)`: flipped, it would differ on NaN); none for an init-statement;
- guards nested at the kernel's end (`if (y >= 1 && y < h - 1) { if (x >= 1 && x < w - 1) { ... } }`) are one,
  `if (y >= 1 && y < h - 1 && x >= 1 && x < w - 1) { ... }`, where neither has an else or declares a name and the
  inner one reads no array and calls nothing (a test of the data stays in the body);
- in the condition of the kernel's last statement, a guard, a top-level local of integer parameters alone
  (`const int last = w - 1;`) is spelled out as its value, `(int)(w - 1)`, where nothing can change it or them
  before the condition: only plain declarations between, no call, change or lambda in the condition, no goto or
  asm in the body;
- in the condition of the kernel's last statement, a guard, a bound of an index less an offset, `x + 1 < w` (x a
  thread's index, a local of the launch geometry at least as wide as int, w an integer expression of its type
  without &, | or ^), is `x < w - 1`, and for an unsigned type,
  whose w - 1 would wrap below zero, `w >= 1 && x < w - 1`; for a signed type `<=`, `>` and `>=` likewise;
- a declaration just before the kernel's last statement, a guard (`int i = y * nx + x; if (x < nx && ...) { ...
  }`), moves to the start of what the guard runs, where the guard is the only statement after it, its condition
  does not read the name and reads nothing but parameters, earlier locals and the launch geometry, calls and
  changes nothing, and the declaration is one integer or floating local of plain arithmetic (no call, load or
  side effect) that reads no launch name (an index definition stays beside the others): it is then computed only
  where it is read, in a block of its own where the guard's statements may declare the name again;
- a do-while loop under a guard of its own test (`if (i < n) { const int step = ...; do { ... } while (i < n); }`,
  the guard usually an early return) is the while loop it means, its first test holding already where nothing
  between changes what the test reads; the guard is dropped where it is the last statement of its block and holds
  only plain declarations whose names appear nowhere else, and the loop;
- a loop over an index declared before it, stepped at the end of its body (`long long i = START; const long long
  stride = ...; while (i < n) { ...; i += stride; }`), in any block, is the for loop it means, `for (long long i =
  START; i < n; i += stride) { ... }`: taken only where the declarations between have no side effect and do not
  read the index, nothing after the loop reads it, the body has no `continue` (which would skip the step) and
  changes it nowhere else; a stride local of the launch geometry alone, read nowhere else, is written into the
  step in its type; a halving step (`i /= 2;`, a tree's) is the for loop's step as written;
- a second index stepped with a for loop's own (`for (int c = 0, k = r * n; c < n; ++c, ++k)`) is derived from it
  at each step (`const int k = r * n + c;`), where neither start nor step reads either index or anything the loop
  changes, and the loop's test reads only its own;
- a loop walking a window around the thread's point in absolute coordinates (`for (int r = row - R; r <= row + R;
  r++)`, row a local of the launch geometry of the loop variable's type) walks it by offset instead:
  `for (int dr = -(R); (row + dr) <= row + R; dr++)`, `(row + dr)` standing for r (not for a member `.r`), which
  the body must not change;
- a call of a `__device__` function whose body is one return without side effects (`at(img, x + 1, y, w)` of
  `float at(const float *p, int x, int y, int w) { return p[y * w + x]; }`), after declarations of arithmetic
  locals at most (written into it as their converted initialisers, which may call nothing), is its expression,
  each argument converted to its parameter's type (`((float)(img[((int)(y)) * ((int)(w)) + ((int)(x + 1))]))`),
  taken only for
  a function defined once outside conditional groups, named by no local, whose expression names no macro of the
  source and nothing the kernel declares, and arguments that call nothing and have no side effect, a pointer
  argument being a name;
- a local pointer into a parameter's array (`const float *a = A + (size_t)row * n;`), never changed within its
  block, nor are the names its offset reads, the offset plain arithmetic (no call, load or side effect), is
  replaced where it is used by the parameter indexed from the offset: `a[j]`, `*(a + j)` and a call's argument
  `a + j` (`__ldg(a + j)`) become `A[(long long)((size_t)row * n) + (j)]` (`&A[...]` for the argument), the
  same address: pointer arithmetic adds each term of the offset as a signed 64-bit count too;
- a pointer parameter's array reached by pointer arithmetic, `*(A + E)` or a call's argument `A + E` (`__ldg(A +
  k)`), is indexed, `A[E']` or `&A[E']`, E' the offset's terms as above, where the body never changes A nor
  declares the name again;
- a call of a `__device__` function with statements, the whole initialiser of a declaration or assignment (`float
  m = row_max(x, r, cols);`), is its body in a block that then sets the target (`float m; { ...; m = ((float)(
  best)); }`), the arguments converted to their parameters' types as above, the source's macros expanded in it as
  they stood at the function: taken only for a function defined once outside conditional groups, no template,
  with one return that ends it, that changes nothing but its own locals (no store, atomic, call of a function of
  the source, or assignment to a parameter or to a name it does not declare: inlined, its arguments are read after
  its statements run), and whose locals are renamed where they would hide a name its arguments or the target read.
The last four are tried only where they let a more specific shape read the kernel (shapes.reading), and each
step is repeated until it changes nothing (it respells one construct at a time). A kernel whose
body holds a preprocessor directive other than a pragma is left as written, and one none of this changes comes
back as it came. The rules render from this text, so their rewrites show the macros expanded and the guard as an
if; the verifier proves them against the kernel as submitted.
"""
import functools
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

from services.generator.rules.cuda_text import (CAST_WORDS, INTEGER_TYPE, LAMBDA, LAUNCH_NAMES, calls, closing,
                                                defined_macros, find_kernel, fresh_name, functions_named,
                                                identifiers, mask, outside_brackets, split_top_level,
                                                top_level_conjuncts, unparenthesised)
from services.generator.rules.points import one_thread_along, parameter_changed
from services.generator.rules.statements import Statement, Unparsed, simple_end, statements, walk
from shared.domain.compile_policy import option_macros
from shared.domain.spec import KernelSpec

# Literals, numbers (whole, `1.f` and `1e3f` included) and names: the tokens a macro's use is found among.
_SCAN = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|\.?\d(?:[eEpP][-+]|[\w.])*|(?<!\w)[A-Za-z_]\w*")
_NAME = re.compile(r"[A-Za-z_]\w*")
_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(\w+)[ \t]*(.*)")
_DEFINE = re.compile(r"(?P<name>[A-Za-z_]\w*)(?:\((?P<params>[^)]*)\))?(?P<body>.*)", re.DOTALL)
_GLUING = set("+-*/%<>=&|^!~.:#")
INDENT = "    "
_REPEATS = 8  # how many constructs one step respells in a kernel, at most


class Unexpandable(ValueError):
    """A use of a macro this module does not expand the way the preprocessor would."""


@dataclass(frozen=True)
class Macro:
    params: tuple[str, ...] | None  # None: object-like
    body: str


def canonical(spec: KernelSpec, inline: bool = True) -> KernelSpec:
    """`spec` with its kernel's body respelled (above), pointers into arrays and calls of one-return functions
    inlined unless `inline` is False; the same spec where nothing changes."""
    pinned = frozenset({*spec.tune_params, *spec.params, *spec.block_size_names,
                        *option_macros(spec.compiler_options)})
    source = _canonical_source(_block_indices_named(spec), spec.kernel_name, pinned, inline)
    return spec if source == spec.source else spec.model_copy(update={"source": source})


@functools.lru_cache(maxsize=256)
def _canonical_source(source: str, kernel_name: str, pinned: frozenset[str], inline: bool) -> str:
    steps = ((_inline_bodies,) if inline else ()) + (
        _expand_macros, _deduce_auto, _index_offsets_moved, _guard_early_return, _nested_guards_joined,
        _guard_locals_spelled_out,
        _bounds_less_their_offset, _declaration_into_guard, _do_as_while, _while_as_for, _second_index_derived,
        _window_offsets) + (
        (_inline_functions, _inline_array_pointers, _parameter_offsets) if inline else ())
    try:
        kernel = find_kernel(source, kernel_name)
    except ValueError:
        return source
    if re.search(r"^[ \t]*#[ \t]*(?!pragma\b)\w", mask(source)[kernel.body_open:kernel.body_close], re.M):
        return source  # a directive in the body: what it selects or defines is not read here
    for step in steps:
        for _ in range(_REPEATS):  # a step respells one construct at a time
            try:
                respelled = step(source, kernel_name, pinned)
            except (ValueError, Unparsed, RecursionError):  # unreadable here: the recognisers say what they cannot read
                break
            if respelled == source:
                break
            source = respelled
    return source


# --- block indices ---------------------------------------------------------------------------------------
_LEADING_DECLARATION = re.compile(rf"\s*(?:const\s+)?{INTEGER_TYPE}\s+[A-Za-z_]\w*\s*=[^;]*;\s*", re.DOTALL)


def _block_indices_named(spec: KernelSpec) -> str:
    """The source with the block index of an axis its blocks are one thread deep along, read after the thread's
    index definitions (`atomicAdd(&sums[blockIdx.y], x[blockIdx.y * n + i])`, the spec naming the x block size
    alone), given a local beside those definitions, `const unsigned int by = blockIdx.y;` (blockIdx's type), and
    read through it: the point's y index, as the recognisers read `int b = blockIdx.y;`. Only where no definition
    reads the axis's blockIdx or threadIdx, the body reads none of its threadIdx, blockDim or gridDim (a loop
    striding the grid along it is not one point there), and defines no lambda (one capturing nothing would not
    see the local: review, helper-95)."""
    source = spec.source
    for axis, letter in ((1, "y"), (2, "z")):
        if not one_thread_along(spec, axis):
            continue
        try:
            kernel = find_kernel(source, spec.kernel_name)
            masked = mask(source)
            body = statements(masked, kernel.body_open + 1, kernel.body_close)
        except (ValueError, Unparsed):
            return source
        leading = 0
        while leading < len(body) and body[leading].kind == "simple" and \
                _LEADING_DECLARATION.fullmatch(text := masked[body[leading].start:body[leading].end]) and \
                re.search(r"\b(?:threadIdx|blockIdx|blockDim)\b", text):
            leading += 1
        if not 0 < leading < len(body):
            continue
        definitions = masked[body[0].start:body[leading - 1].end]
        rest = (body[leading].start, kernel.body_close)
        after = masked[rest[0]:rest[1]]
        uses = [m.span() for m in re.finditer(rf"\bblockIdx\s*\.\s*{letter}\b", after)]
        if not uses or LAMBDA.search(after) or \
                re.search(rf"\b(?:blockIdx|threadIdx)\s*\.\s*{letter}\b", definitions) or \
                re.search(rf"\b(?:threadIdx|blockDim|gridDim)\s*\.\s*{letter}\b", after):
            continue
        name = fresh_name(f"b{letter}", identifiers(source))
        text = source[rest[0]:rest[1]]
        for start, end in reversed(uses):
            text = text[:start] + name + text[end:]
        declaration = f"const unsigned int {name} = blockIdx.{letter};\n{_indent_of(source, body[leading].start)}"
        source = source[:rest[0]] + declaration + text + source[rest[1]:]
    return source


# --- macros ----------------------------------------------------------------------------------------------
def _expand_macros(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    macros = {name: macro for name, macro in _macros(source, kernel.name_at).items() if name not in pinned}
    if not macros:
        return source
    start, end = kernel.body_open + 1, kernel.body_close
    body = mask(source, literals=False)[start:end]  # comments blanked; a macro in one is no use
    if not any(m.group() in macros for m in _SCAN.finditer(body)):
        return source
    defined = defined_macros(mask(source))
    try:
        expanded = _expand(body, macros, frozenset(), defined)
    except Unexpandable:
        return source
    return source[:start] + expanded + source[end:]


def _macros(source: str, before: int) -> dict[str, Macro]:
    """The macros defined once at file scope before offset `before`, outside conditional groups, never undefined,
    whose bodies neither stringify nor paste, and which are not variadic."""
    text = mask(source, literals=False)
    defined: dict[str, list[Macro | None]] = {}
    depth, at = 0, 0
    for line in re.split(r"(?<!\\)\n", text):
        offset, at = at, at + len(line) + 1
        directive = _DIRECTIVE.match(line)
        if directive is None:
            continue
        word, rest = directive.group(1), directive.group(2).replace("\\\n", " ")
        if word in ("if", "ifdef", "ifndef"):
            depth += 1
        elif word == "endif":
            depth -= 1
        elif word == "undef":
            defined.setdefault(rest.strip(), []).append(None)
        elif word == "define" and (match := _DEFINE.match(rest)):
            params = match["params"]
            usable = depth == 0 and offset < before and "#" not in match["body"] and "..." not in (params or "")
            names = tuple(p.strip() for p in params.split(",")) if params is not None else None
            if names == ("",):
                names = ()
            defined.setdefault(match["name"], []).append(Macro(names, match["body"].strip()) if usable else None)
    return {name: found[0] for name, found in defined.items() if len(found) == 1 and found[0] is not None}


def _expand(text: str, macros: dict[str, Macro], disabled: frozenset[str], defined: frozenset[str]) -> str:
    """`text` with every use of `macros` replaced as the preprocessor replaces it; none of `disabled` (the macros
    being expanded) is expanded again. Unexpandable where a replacement still names a macro of the source
    (`defined`): the compiler would expand the text again, where the preprocessor had stopped."""
    out, at = [], 0
    for match in _SCAN.finditer(text):
        name = match.group()
        if match.start() < at or name not in macros or name in disabled:
            continue
        macro, end = macros[name], match.end()
        if macro.params is None:
            replacement = macro.body
        else:
            opening = re.compile(r"\s*\(").match(text, end)
            if opening is None:  # a function-like macro's name alone is no call
                continue
            close = closing(_blank_literals(text), opening.end() - 1)
            arguments = split_top_level(_blank_literals(text[opening.end():close]), ",", "(")
            spans, offset = [], opening.end()
            for argument in arguments:
                spans.append(text[offset:offset + len(argument)].strip())
                offset += len(argument) + 1
            if spans == [""] and not macro.params:
                spans = []
            if len(spans) != len(macro.params):
                raise Unexpandable(f"{name} takes {len(macro.params)} arguments")
            values = dict(zip(macro.params, (_expand(s, macros, disabled, defined) for s in spans)))
            replacement = _substitute(macro.body, values, spaced=True)
            end = close + 1
        replacement = _expand(replacement, macros, disabled | {name}, defined)
        if set(_names(replacement)) & defined:
            raise Unexpandable(f"{name}'s expansion names a macro the compiler would expand again")
        out += [text[at:match.start()], _spaced(text[:match.start()], replacement, text[end:])]
        at = end
    return "".join(out) + text[at:]


def _substitute(body: str, values: dict[str, str], spaced: bool = False, members: bool = True) -> str:
    """`body` with each name in `values` replaced (spaced from its neighbours where they would join into another
    token); with `members` False, a name after `.` or `->` (a member) is left as it is."""
    def replaced(match: re.Match) -> str:
        name = match.group()
        if name not in values or (not members and re.search(r"(?:\.|->)\s*$", body[:match.start()])):
            return name
        if not spaced:
            return values[name]
        return _spaced(body[:match.start()], values[name], body[match.end():])
    return _SCAN.sub(replaced, body)


def _names(text: str) -> list[str]:
    """The names of `text`, outside literals and numbers."""
    return [token for token in _SCAN.findall(text) if _NAME.fullmatch(token)]


def _spaced(before: str, replacement: str, after: str) -> str:
    """The replacement, with a space on a side where its first or last character would otherwise join the
    neighbouring one into another token (`x-NEG` with NEG `-1` is `x- -1`, not `x--1`)."""
    def joins(a: str, b: str) -> bool:
        return bool(a and b) and ((a.isalnum() or a == "_") and (b.isalnum() or b == "_") or a in _GLUING and b in
                                  _GLUING)
    if not replacement:
        return " "
    left = " " if joins(before[-1:], replacement[0]) else ""
    right = " " if joins(replacement[-1], after[:1]) else ""
    return left + replacement + right


def _blank_literals(text: str) -> str:
    return _SCAN.sub(lambda m: " " * len(m.group()) if m.group()[0] in "\"'" else m.group(), text)


# --- auto ------------------------------------------------------------------------------------------------
# Integer types by conversion rank, as the usual arithmetic conversions order them on a 64-bit target (long and
# long long are both 64 bits wide); types narrower than int (-1) are promoted to int by any arithmetic.
_RANKS = {"short": -1, "unsigned short": -1, "char": -1, "signed char": -1, "unsigned char": -1, "int": 0,
          "signed": 0, "signed int": 0, "int32_t": 0, "std::int32_t": 0, "unsigned": 1, "unsigned int": 1,
          "uint32_t": 1, "std::uint32_t": 1, "long": 2, "long int": 2, "long long": 2, "long long int": 2,
          "int64_t": 2, "std::int64_t": 2, "ptrdiff_t": 2, "std::ptrdiff_t": 2, "unsigned long": 3,
          "unsigned long long": 3, "size_t": 3, "std::size_t": 3, "uint64_t": 3, "std::uint64_t": 3}
_SYNONYMS = {"signed": "int", "signed int": "int", "unsigned": "unsigned int", "long int": "long",
             "long long int": "long long"}
_GEOMETRY = re.compile(r"(?:threadIdx|blockIdx|blockDim|gridDim)\.[xyz]")
_TYPE_NAME = "|".join(sorted((re.escape(t).replace(r"\ ", r"\s+") for t in _RANKS), key=len, reverse=True))
_AUTO = re.compile(r"(?<![\w.])(?P<auto>auto)\s+(?P<name>[A-Za-z_]\w*)\s*=(?!=)")
_TOKENS = re.compile(rf"\s*(?:(?P<geometry>{_GEOMETRY.pattern})|"
                     rf"(?P<number>(?:0[xX][0-9a-fA-F]+|\d+)(?P<suffix>[uUlL]*))(?![\w.])|"
                     rf"(?P<cast>\(\s*(?:const\s+)?(?P<type>{_TYPE_NAME})\s*\))|"
                     rf"(?P<static>static_cast\s*<\s*(?P<static_type>{_TYPE_NAME})\s*>)|(?P<name>[A-Za-z_]\w*)|"
                     r"(?P<op>[-+*/%&|^()]))")
# A declaration of a name, to tell which parameters a local (a lambda's parameter, a loop's variable) shadows.
_DECLARES = re.compile(r"\b(?:int|float|double|unsigned|long|short|char|bool|auto|size_t|[A-Za-z_]\w*_t)\b[\s*&]+"
                       r"([A-Za-z_]\w*)\s*[=;,)\[]")

Type = tuple[int, str]  # (rank, spelling)


def _deduce_auto(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    known = _integer_parameters(source, kernel)
    for name in _DECLARES.findall(masked[kernel.body_open:kernel.body_close]):
        known.pop(name, None)
    replacements = []
    for match in _AUTO.finditer(masked, kernel.body_open, kernel.body_close):
        end = _declaration_end(masked, match.end(), kernel.body_close)
        if end is None:
            continue
        deduced = _type(masked[match.end():end], known)
        if deduced is not None:
            replacements.append((match.start("auto"), match.end("auto"), deduced[1]))
    for start, end, text in reversed(replacements):
        source = source[:start] + text + source[end:]
    return source


def _named(spelled: str) -> Type:
    """An integer type named as written (one of _RANKS), with one spelling per type."""
    return _RANKS[spelled], _SYNONYMS.get(spelled, spelled)


def _integer_parameters(source: str, kernel) -> dict[str, Type]:
    types = {}
    for start, end in kernel.parameters(source):
        words = mask(source[start:end]).split()
        if words and "*" not in source[start:end] and "&" not in source[start:end]:
            spelled = " ".join(w for w in words[:-1] if w not in ("const", "__restrict__"))
            if spelled in _RANKS:
                types[words[-1]] = _named(spelled)
    return types


def _declaration_end(masked: str, at: int, limit: int) -> int | None:
    """Where the initialiser starting at `at` ends (its `;` or a for-init's `;`), or None for several declarators."""
    end = simple_end(masked, at, limit) - 1
    return None if len(split_top_level(masked[at:end], ",")) > 1 else end


def _type(expression: str, known: dict[str, Type]) -> Type | None:
    """The type an integer expression has, or None when it holds anything else, or when its terms of the highest
    rank are spelled differently (long and long long: which of the two C++ deduces is not read here)."""
    tokens, at = [], 0
    while at < len(expression.rstrip()):
        match = _TOKENS.match(expression, at)
        if match is None:
            return None
        tokens.append(match)
        at = match.end()
    parser = _TypeParser(tokens, known)
    try:
        rank, spellings = parser.expression()
    except Unexpandable:
        return None
    if parser.at != len(tokens) or rank < 0 or len(spellings) != 1:
        return None
    return rank, next(iter(spellings))


def _rank(expression: str, known: dict[str, Type]) -> int | None:
    found = _type(expression, known)
    return found[0] if found else None


class _TypeParser:
    """The type of a chain of + - * / % & | ^ over unary terms: every such operator converts both operands to
    their common type, so the chain's type is the highest rank among its terms (a cast's term has its type), a
    type narrower than int promoted to int by any operator."""

    def __init__(self, tokens: list[re.Match], known: dict[str, Type]):
        self.tokens, self.known, self.at = tokens, known, 0

    def expression(self) -> tuple[int, set[str]]:
        rank, spellings = self.term()
        while self.at < len(self.tokens) and self.tokens[self.at]["op"] and self.tokens[self.at]["op"] not in "()":
            self.at += 1
            rank, spellings = _common(_promoted(rank, spellings), _promoted(*self.term()))
        return rank, spellings

    def term(self) -> tuple[int, set[str]]:
        if self.at >= len(self.tokens):
            raise Unexpandable("an operand is missing")
        token = self.tokens[self.at]
        self.at += 1
        if token["op"] in ("-", "+"):
            return _promoted(*self.term())
        if token["cast"] or token["static"]:
            if token["static"] and (self.at >= len(self.tokens) or self.tokens[self.at]["op"] != "("):
                raise Unexpandable("static_cast without its operand")
            self.term()
            rank, spelled = _named(" ".join((token["type"] or token["static_type"]).split()))
            return rank, {spelled}
        if token["op"] == "(":
            found = self.expression()
            if self.at >= len(self.tokens) or self.tokens[self.at]["op"] != ")":
                raise Unexpandable("unbalanced parentheses")
            self.at += 1
            return found
        if token["geometry"]:
            return 1, {"unsigned int"}
        if token["number"] is not None:
            return _literal_type(token["number"], token["suffix"].lower())
        if token["name"] in self.known:
            rank, spelled = self.known[token["name"]]
            return rank, {spelled}
        raise Unexpandable(f"{token.group().strip()} is not known to be an integer")


def _promoted(rank: int, spellings: set[str]) -> tuple[int, set[str]]:
    return (0, {"int"}) if rank < 0 else (rank, spellings)


def _common(a: tuple[int, set[str]], b: tuple[int, set[str]]) -> tuple[int, set[str]]:
    if a[0] != b[0]:
        return max(a, b, key=lambda t: t[0])
    return a[0], a[1] | b[1]


def _literal_type(number: str, suffix: str) -> tuple[int, set[str]]:
    value = int(number[:len(number) - len(suffix)] if suffix else number, 0)
    wide = "l" in suffix or value > 0x7FFFFFFF
    if "u" in suffix:
        return (3, {"unsigned long long" if "ll" in suffix else "unsigned long"}) if wide else (1, {"unsigned int"})
    if wide:
        raise Unexpandable("a wide literal's type depends on its base")
    return 0, {"int"}


# --- early returns ---------------------------------------------------------------------------------------
_FLIPPED = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
# The operators that matter at a comparison's top level: brackets, comparisons, and those binding more loosely
# (`a & b < c` is `a & (b < c)`), where flipping the comparison would not negate the whole.
_OPERATOR = re.compile(r"<=|>=|==|!=|<<|>>|->|&&|\|\||[-+*/%&|^]=|[()\[\]{}<>?!=&|^,]")


def _guard_early_return(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    body = statements(masked, kernel.body_open + 1, kernel.body_close)
    first = next((n for n, s in enumerate(body) if _is_early_return(s, masked)), None)
    if first is None:
        return source
    last = first
    while last + 1 < len(body) and _is_early_return(body[last + 1], masked):
        last += 1
    if last + 1 == len(body):  # nothing follows the returns: there is no guarded work to show
        return source
    uncommented = mask(source, literals=False)
    conditions = [uncommented[s.head[0]:s.head[1]] for s in body[first:last + 1]]
    rest_start, rest_end = body[last + 1].start, body[-1].end
    indent = _indent_of(source, body[first].start)
    rest = "\n".join((INDENT + line) if line.strip() else line
                     for line in source[rest_start:rest_end].split("\n"))
    integers = {**_integer_parameters(source, kernel), **_integer_locals(masked, body[:first])}
    guard = f"if ({_negated(conditions, integers)}) {{\n{indent}{rest}\n{indent}}}"
    return source[:body[first].start] + guard + source[rest_end:]


def _ending_in_a_guard(source: str, kernel_name: str) -> tuple | None:
    """The kernel, its masked source and its body's statements, where the last is an if without else; else None."""
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    body = statements(masked, kernel.body_open + 1, kernel.body_close)
    return (kernel, masked, body) if body and body[-1].kind == "if" and body[-1].orelse is None else None


def _nested_guards_joined(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """`if (a) { if (b) S }` as the kernel's last statement, neither with an else, neither condition declaring a
    name, and b reading no array and calling nothing, is `if (a && b) S`: b is evaluated where a holds, either
    way. Comments on lines of their own beside the inner if go before the joined one; with a comment anywhere
    else in the two ifs' heads, the guards stay as written."""
    if (ending := _ending_in_a_guard(source, kernel_name)) is None:
        return source
    _, masked, body = ending
    outer = inner = body[-1].body
    gaps = []  # the text inside the outer block beside the inner if
    if outer.kind == "block":
        inside = statements(masked, *outer.inner)
        if len(inside) != 1:
            return source
        inner = inside[0]
        gaps = [(outer.inner[0], inner.start), (inner.end, outer.inner[1])]
    if inner.kind != "if" or inner.orelse is not None or not all(
            _is_plain_condition(masked[s.head[0]:s.head[1]]) for s in (body[-1], inner)):
        return source
    if "[" in masked[inner.head[0]:inner.head[1]] or _calls(masked[inner.head[0]:inner.head[1]]):
        return source  # a test of the data, which the recognisers read in the body, not as a bound
    uncommented = mask(source, literals=False)
    kept = set().union(*(range(a, b) for a, b in gaps))
    if any(uncommented[i] != source[i] and i not in kept for i in range(body[-1].start, inner.head[1])):
        return source  # a comment in a head would be lost
    conditions = " && ".join(_as_conjunct(" ".join(source[s.head[0]:s.head[1]].split()),
                                          masked[s.head[0]:s.head[1]]) for s in (body[-1], inner))
    indent, inner_indent = _indent_of(source, body[-1].start), _indent_of(source, inner.start)
    comments = [textwrap.dedent(source[a:b].strip("\n")).strip() for a, b in gaps if source[a:b].strip()]
    before = "".join(comment.replace("\n", "\n" + indent) + "\n" + indent for comment in comments)
    then = source[inner.head[1] + 1:inner.end]  # after the condition's `)`
    if "\\\n" in then:
        return source  # a literal continued on the next line, whose spaces re-indenting would change
    if inner_indent.startswith(indent):  # one level less deep
        then = then.replace("\n" + inner_indent, "\n" + indent)
    return source[:body[-1].start] + before + f"if ({conditions}){then}" + source[body[-1].end:]


def _is_plain_condition(masked_head: str) -> bool:
    """A condition alone: no init-statement and no declaration, whose name would be the if's own. A declaration
    in a condition has an initialiser, `=` or braces, so a condition with neither (but in a comparison) holds
    none; an assignment is refused with them."""
    return not re.search(r"[;={}]", _without_comparisons(masked_head))


def _calls(masked: str) -> bool:
    """Whether the text calls anything: a function by name or a template's instance, or what a parenthesised
    expression yields (`(*fp)(n)`); a cast (`(int)(w - 1)`) is no call."""
    if calls(masked, _CAST_WORDS) or re.search(r"[A-Za-z_]\w*\s*<[^;{}]*>\s*\(", masked):
        return True  # (a template's call, `f<1 + 1>(n)`, or a comparison that reads like one)
    for found in re.finditer(r"\)\s*\(", masked):
        depth, at = 0, found.start()
        while at >= 0:
            depth += {")": 1, "(": -1}.get(masked[at], 0)
            if depth == 0:
                break
            at -= 1
        if at < 0 or not _CAST.fullmatch(masked, at, found.start() + 1):  # unbalanced: not read as a cast
            return True
    return False


_CAST = re.compile(r"\(\s*(?:(?:const|unsigned|signed|long|short|int|char|bool|float|double|size_t|ptrdiff_t|"
                   r"u?int(?:8|16|32|64)_t)\s*)+\**\s*\)")


def _as_conjunct(condition: str, masked_condition: str) -> str:
    """The condition as an operand of `&&`: parenthesised where an operator binding less tightly stands at its top
    level (`||`, `?:` or a comma; _is_plain_condition refuses an assignment)."""
    return f"({condition})" if re.search(r"\|\||[?,]", outside_brackets(masked_condition)) else condition


def _names_read(masked: str) -> set[str]:
    """The names a (masked) expression reads: a member's name (`.y` of threadIdx.y) is its object's part."""
    return set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", masked))


def _plain_names(source: str, kernel, before: list[Statement], masked: str) -> set[str]:
    """The names whose reading calls and changes nothing: the kernel's parameters of number or pointer type and
    the top-level locals of number type declared by `before` (a class's operator could do anything, an
    unexpanded macro anything at all)."""
    names = set()
    for start, end in kernel.parameters(source):
        words = mask(source[start:end]).replace("*", " * ").split()
        if words and ("*" in words or all(re.fullmatch(_TYPE_WORDS, w) or w in ("volatile", "__restrict__")
                                          for w in words[:-1])):
            names.add(words[-1])
    for statement in before:
        found = _PLAIN_DECLARATION.fullmatch(masked, statement.start, statement.end)
        if found and ("auto" not in found.group().split() or _is_plain_arithmetic(found["init"])):
            names.add(found["name"])
    return names


def _guard_locals_spelled_out(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """In the condition of the kernel's last statement (an if without else), a local of a number type declared
    at the body's top level from integer parameters alone with + - * (`const int last = w - 1;`) is spelled out
    as its value, `(int)(w - 1)`. Only where nothing can change the local or those parameters before the
    condition reads it: the statements between are plain declarations, the condition and they read nothing but
    parameters of number or pointer type, locals of number type and the launch geometry, and call and change
    nothing, the condition holds no lambda, and the body has no goto or asm. The recognisers then read the bound
    as a parameter's."""
    if (ending := _ending_in_a_guard(source, kernel_name)) is None:
        return source
    kernel, masked, body = ending
    if re.search(r"\b(?:goto|asm)\b", masked[kernel.body_open:kernel.body_close]):
        return source
    guard = body[-1]
    head = masked[guard.head[0]:guard.head[1]]
    plain = _plain_names(source, kernel, body[:-1], masked) | LAUNCH_NAMES | _CAST_WORDS
    if _calls(head) or LAMBDA.search(head) or re.search(rf"[;{{}}]|{_CHANGED}", _without_comparisons(head)) or \
            not _names_read(head) <= plain:
        return source
    integers = _integer_parameters(source, kernel)
    uncommented = mask(source, literals=False)  # a // comment in the value would swallow what follows it
    for at, statement in enumerate(body[:-1]):
        found = _PLAIN_DECLARATION.fullmatch(masked, statement.start, statement.end)
        if found is None or found["name"] in integers or "auto" in found.group().split() or \
                not _is_plain_arithmetic(found["init"]) or not set(_names(found["init"])) <= set(integers):
            continue
        if not all((between := _PLAIN_DECLARATION.fullmatch(masked, s.start, s.end)) and
                   _is_plain_arithmetic(between["init"]) and set(_names(between["init"])) <= plain
                   for s in body[at + 1:-1]):
            return source
        uses = list(re.finditer(rf"(?<![\w.]){re.escape(found['name'])}\b", head))
        if any(re.search(r"(?:\.|->|::|(?<!&)&)\s*$", head[:use.start()]) for use in uses):
            return source  # a member's name, a qualified one, or the local's address
        if not uses:
            continue
        kind = " ".join(w for w in masked[statement.start:found.start("name")].split() if w != "const")
        value = f"({kind})({' '.join(uncommented[found.start('init'):found.end('init')].split())})"
        condition = source[guard.head[0]:guard.head[1]]
        for use in reversed(uses):
            condition = condition[:use.start()] + value + condition[use.end():]
        return source[:guard.head[0]] + condition + source[guard.head[1]:]
    return source


# `x + C < w`, `(x + C) < w` (an index offset moved) and `(x + C) + D < w`, the offsets decimal numbers
_OFFSET_BOUND = re.compile(r"\s*(?P<open>\(\s*)?(?P<name>[A-Za-z_]\w*)\s*\+\s*(?P<offset>[1-9]\d*)[uU]?\s*"
                           r"(?(open)\))\s*(?:\+\s*(?P<more>[1-9]\d*)[uU]?\s*)?(?P<op>[<>]=?)(?P<bound>[^<>=]+?)\s*")


_LOOSER_THAN_PLUS = re.compile(r"[&|^?<>=,]")  # operators binding less tightly than +: `a & 3 + 1` is a & 4
# a declaration of the name, of any type (`float4 x;`, `int &r = x` aside, which parameter_changed reads)
_DECLARED_AGAIN = r"(?<![\w.])(?!(?:else|return|case|goto|do|throw|delete|new|sizeof)\b)[A-Za-z_][\w:<>]*[\s*&]+{}\s*" \
                  r"(?:=(?!=)|;|,|\[|\)|\{{)"
_OFFSET_INDEX = re.compile(r"(?P<index>.*\S)\s*\+\s*(?P<offset>\d+)[uU]?\s*"
                           r"|\s*(?P<offset_>\d+)[uU]?\s*\+(?P<index_>.*)", re.DOTALL)


def _index_offsets_moved(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """A thread index defined with an offset, `int x = blockIdx.x * blockDim.x + threadIdx.x + 1;` (a stencil's
    interior, its first column skipped), is defined without it and read as `(x + 1)` wherever the body names it
    after: the same value wherever x + 1 does not pass its type's largest value (2 billion threads along an axis
    for int). Only for a top-level local of an integer type at least as wide as int (a narrower one would wrap
    where int arithmetic does not), of the launch geometry and numbers joined by arithmetic that binds as tightly
    as + at least (not `threadIdx.x & 3 + 1`), declared alone, that nothing after changes, takes the address of,
    binds to a reference, passes to a function of the source by reference, or declares again (review,
    helper-96); the recognisers then read the thread's point, and its guard `(x + 1) < w - 1` as a bound of it
    (_bounds_less_their_offset)."""
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    for statement in statements(masked, kernel.body_open + 1, kernel.body_close):
        declared = _DECLARED.fullmatch(masked, statement.start, statement.end)
        if declared is None or not re.search(r"\b(?:threadIdx|blockIdx)\b", declared["init"]) or \
                _RANKS.get(" ".join(declared["type"].split()), -1) < 0:
            continue
        split = _OFFSET_INDEX.fullmatch(declared["init"])
        if split is None:
            continue
        index, offset = split["index"] or split["index_"], split["offset"] or split["offset_"]
        if _type(index, {}) is None or int(offset) == 0 or _LOOSER_THAN_PLUS.search(outside_brackets(index)):
            continue  # the launch geometry and numbers alone, the offset added to all of it
        name, after = declared["name"], masked[statement.end:kernel.body_close]
        if _changes(name, after) or re.search(_DECLARED_AGAIN.format(re.escape(name)), after) or \
                LAMBDA.search(after) or parameter_changed(kernel, masked, statement.end, [name]) is not None:
            continue
        start = declared.start("init")
        text = f" {index.strip()};" + _renamed(source[statement.end:kernel.body_close], name, f"({name} + {offset})")
        return source[:start] + text + source[kernel.body_close:]
    return source


def _bounds_less_their_offset(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """In the condition of the kernel's last statement (an if without else, a chain of &&), a conjunct `x + C < w`
    (C a number, x an integer at least as wide as int, a top-level local of the launch geometry before the guard,
    and w an integer expression of its type, with no &, | or ^, which bind less tightly than <) is the bound it
    means, `x < w - C`; for an unsigned type, which users write so that `w - 1` cannot wrap below zero, `w >= C
    && x < w - C`. The same wherever x + C does not wrap past the type's largest value (4 billion threads along an
    axis for unsigned int; a parameter, which may hold (unsigned)-1, is not read so). For a signed type, `x + C <= w`,
    `x + C >= w` and `x + C > w` are read likewise (an index offset into a stencil's interior, `(x + 1) >= 1`,
    bounds x from below, `x >= 0`; `(x + 1) + 1 <= w`, an offset beside it, `x <= w - 2`). The recognisers then
    read x bounded by w - C."""
    if (ending := _ending_in_a_guard(source, kernel_name)) is None:
        return source
    kernel, masked, body = ending
    guard = body[-1]
    head = masked[guard.head[0]:guard.head[1]]
    if re.search(r"\|\||[?,]", outside_brackets(head)):
        return source
    integers = {**_integer_parameters(source, kernel), **_integer_locals(masked, body[:-1])}
    # The index offset: a thread's index, which does not pass 4 billion, not a value the caller passes (review,
    # helper-96: `skip + 1 < m` for skip = (unsigned)-1, a "none", wraps to 0).
    indices = {d["name"] for s in body[:-1] if (d := _DECLARED.fullmatch(masked, s.start, s.end)) is not None
               and re.search(r"\b(?:threadIdx|blockIdx)\b", d["init"])}
    at = 0
    for part in top_level_conjuncts(head):
        at = head.index(part, at)
        found = _OFFSET_BOUND.fullmatch(part)
        kind = integers.get(found["name"]) if found is not None and found["name"] in indices else None
        if kind is not None and kind[0] >= 0 and _type(found["bound"], integers) == kind and \
                not re.search(r"[&|^?]", outside_brackets(found["bound"])) and \
                (found["op"] == "<" or kind[0] % 2 == 0):  # unsigned types (their ranks odd) but for `<`
            name, op, bound = found["name"], found["op"], found["bound"].strip()
            offset = str(int(found["offset"]) + int(found["more"] or 0))
            operand = bound if _NAME.fullmatch(bound) else f"({bound})"
            less = str(int(bound) - int(offset)) if re.fullmatch(r"0|[1-9]\d*", bound) else f"{operand} - {offset}"
            respelled = f"{name} {op} {less}"
            if kind[0] % 2:
                respelled = f"{operand} >= {offset} && {respelled}"
            start = guard.head[0] + at + len(part) - len(part.lstrip())
            return source[:start] + respelled + source[guard.head[0] + at + len(part.rstrip()):]
        at += len(part)
    return source


def _declaration_into_guard(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    if (ending := _ending_in_a_guard(source, kernel_name)) is None or len(ending[2]) < 2:
        return source
    kernel, masked, body = ending
    declaration, guard = body[-2], body[-1]
    found = _PLAIN_DECLARATION.fullmatch(masked, declaration.start, declaration.end)
    head = masked[guard.head[0]:guard.head[1]]
    # the condition may read only what is seen here (no macro or global, which may name the local), and change
    # nothing
    known = _plain_names(source, kernel, body[:-2], masked)
    read = _names_read(head) - LAUNCH_NAMES - _CAST_WORDS
    # an index definition (it reads the launch) stays with the others, where the recognisers look for it
    if found is None or not _is_plain_arithmetic(found["init"]) or found["name"] in read or not read <= known or \
            not set(_names(found["init"])) <= known | LAUNCH_NAMES | _CAST_WORDS or \
            _names_read(found["init"]) & LAUNCH_NAMES or \
            re.search(rf"[{{}}]|{_CHANGED}", _without_comparisons(head)) or _calls(head):
        return source
    text = source[declaration.start:declaration.end].strip()
    indent = _indent_of(source, guard.start)
    if guard.body.kind == "block" and not _may_declare(masked, guard.body, found["name"]):
        guarded = source[guard.start:guard.body.inner[0]] + f"\n{indent}{INDENT}{text}" + \
            source[guard.body.inner[0]:guard.end]
    elif "\\\n" in source[guard.body.start:guard.body.end]:
        return source  # a literal continued on the next line, whose spaces indenting would change
    else:  # a block of its own around what the guard runs, where that may declare the name again
        what = textwrap.indent(source[guard.body.start:guard.body.end], INDENT).lstrip()
        guarded = source[guard.start:guard.body.start] + f"{{\n{indent}{INDENT}{text}\n{indent}{INDENT}{what}" \
            f"\n{indent}}}" + source[guard.body.end:guard.end]
    between = source[declaration.end:guard.start]  # a comment after the declaration stays where it was
    return source[:declaration.start] + (between.lstrip() if between.strip() else "") + guarded + \
        source[guard.end:]


def _without_comparisons(text: str) -> str:
    """The text with its comparisons blanked, its shifts and compound assignments (`<<=`) kept."""
    return re.sub(r"(?<![<>])[<>!=]=|(?<![<>])[<>](?![<>=])", " ", text)


def _may_declare(masked: str, block: Statement, name: str) -> bool:
    """Whether a statement directly in `block` may declare `name` (a nested block, loop or if has a scope of its
    own): where a declarator may stand, the last name of a comma-separated part before its `=`, with what
    brackets hold blanked (`float d(1.5f)`, `float d{1.5f}`), after a type for the first part; or a name a
    structured binding (`auto [c, d] = ...`), an enum or a declarator of a pointer or reference in parentheses
    (`float (*d)(float)`) declares."""
    name = re.escape(name)
    for statement in statements(masked, *block.inner):
        if statement.kind != "simple":
            continue
        text = masked[statement.start:statement.end].rstrip().removesuffix(";")
        if re.match(rf"\s*(?:const\s+)?auto\s*&*\s*\[[^\]]*\b{name}\b", text) or \
                re.match(rf"\s*enum\b.*\b{name}\b", text, re.DOTALL) or \
                re.search(rf"\(\s*[*&]+\s*{name}\s*\)", text):  # an enumerator, `(*d)(float)`, `(&d)[1]`
            return True
        for brackets in ("([{", "([{<"):  # a template's commas, or a comparison's `<`
            raw = [split_top_level(part, "=")[0] for part in split_top_level(text, ",", brackets)]
            heads = [re.sub(r"\{[^{}]*\}", " ", outside_brackets(head)) for head in raw]
            if re.match(r"\s*[A-Za-z_]", heads[0]) and (
                    re.search(rf"[\w>*&]\s*[*&]*\s*\b{name}\s*$", heads[0]) or  # or `int (d) = 3`
                    re.search(rf"[\w>*&]\s*\(\s*[*&]*\s*{name}\s*\)\s*$", raw[0])) or \
                    any(re.fullmatch(rf"[\s*&(]*{name}\s*\)?\s*", head) for head in heads[1:]):
                return True
    return False


# One local of a number type, initialised: the declarations _declaration_into_guard moves.
_TYPE_WORDS = r"const|unsigned|signed|long|short|int|char|bool|float|double|size_t|ptrdiff_t|u?int(?:8|16|32|64)_t|auto"
_PLAIN_DECLARATION = re.compile(rf"\s*(?:(?:{_TYPE_WORDS})\s+)+(?P<name>[A-Za-z_]\w*)\s*=(?P<init>[^;,]*);\s*")


def _is_early_return(statement: Statement, masked: str) -> bool:
    if statement.kind != "if" or statement.orelse is not None:
        return False
    head = masked[statement.head[0]:statement.head[1]]
    if ";" in head or _ANY_DECLARATION.fullmatch(head + ";") or re.match(r"\s*[A-Za-z_][\w:<>]*[\s*&]+[A-Za-z_]\w*\s*=",
                                                                          head):
        return False  # an init-statement or a declaration: its name is the guard's
    then = re.sub(r"\s+", "", masked[statement.body.start:statement.body.end])
    return then in ("return;", "{return;}")


def _indent_of(source: str, at: int) -> str:
    line_start = source.rfind("\n", 0, at) + 1
    return re.match(r"[ \t]*", source[line_start:at]).group()


def _integer_locals(masked: str, before: list[Statement]) -> dict[str, Type]:
    """The integer locals declared by the statements before the guard, with their types."""
    found = {}
    for statement in before:
        if (match := _DECLARED.fullmatch(masked, statement.start, statement.end)) is not None:
            spelled = " ".join(match["type"].split())
            if spelled in _RANKS:
                found[match["name"]] = _named(spelled)
    return found


def _negated(conditions: list[str], integers: dict[str, Type]) -> str:
    """The condition that none of `conditions` holds, each `||` operand negated on its own (De Morgan)."""
    parts = [part for condition in conditions for part in _or_operands(condition)]
    return " && ".join(_negated_part(part, integers) for part in parts)


def _or_operands(condition: str) -> list[str]:
    text = unparenthesised(" ".join(condition.split()))
    masked = mask(text)
    operands, depth, start = [], 0, 0
    for i, char in enumerate(masked):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif depth == 0 and masked.startswith("||", i):
            operands.append(text[start:i].strip())
            start = i + 2
        elif depth == 0 and (masked.startswith("&&", i) or char in "?,"):
            return [text]
    return [*operands, text[start:].strip()]


def _negated_part(part: str, integers: dict[str, Type]) -> str:
    """`part` negated: a single comparison of integers flipped (`i >= n` is `i < n`), anything else as `!(part)`
    (a float comparison flipped would differ on NaN, for which both `v >= t` and `v < t` are false)."""
    part = unparenthesised(part)
    depth, operators = 0, []
    for match in _OPERATOR.finditer(mask(part)):
        token = match.group()
        if token in "([{":
            depth += 1
        elif token in ")]}":
            depth -= 1
        elif depth == 0 and token not in ("<<", ">>", "->"):
            operators.append(match)
    if len(operators) != 1 or operators[0].group() not in _FLIPPED:
        return f"!({part})"
    operator = operators[0]
    if _rank(part[:operator.start()], integers) is None or _rank(part[operator.end():], integers) is None:
        return f"!({part})"
    return f"{part[:operator.start()].strip()} {_FLIPPED[operator.group()]} {part[operator.end():].strip()}"


# --- pointers into a parameter's array -------------------------------------------------------------------
# `const float *__restrict__ a`: a pointer's element type and name, in a parameter or a local's declaration.
_POINTER = (r"(?:const\s+)?(?P<type>[A-Za-z_][\w:]*(?:\s+[A-Za-z_]\w*)*?)\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?"
            r"(?P<name>[A-Za-z_]\w*)")
_POINTER_LOCAL = re.compile(_POINTER + r"\s*=\s*(?:(?P<base>[A-Za-z_]\w*)\s*\+(?P<offset>[^;]+)|"
                            r"&\s*(?P<indexed>[A-Za-z_]\w*)\s*\[(?P<index>[^;]+)\])\s*;", re.DOTALL)
_CHANGED = r"(?:(?<![=!<>])=(?!=)|\+=|-=|\*=|/=|%=|&=|\|=|\^=|<<=|>>=|\+\+|--)"


def _changes(name: str, masked: str) -> bool:
    """Whether the text assigns, increments or decrements the variable `name`, or takes its address (`&p[i]`, an
    element's address, is no change of p; `a && p` is none either)."""
    name = re.escape(name)
    return bool(re.search(rf"(?<![\w.]){name}\s*{_CHANGED}|(?:\+\+|--)\s*{name}\b|(?<!&)&\s*{name}\b(?!\s*\[)",
                          masked))


def _inline_array_pointers(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    arrays = _pointer_parameters(source, kernel)
    for statement, _ in walk(masked, statements(masked, kernel.body_open + 1, kernel.body_close)):
        match = _POINTER_LOCAL.fullmatch(masked, statement.start, statement.end) if statement.kind == "simple" else None
        if match is None:
            continue
        base = match["base"] or match["indexed"]
        offset_span = match.span("offset") if match["base"] else match.span("index")
        if arrays.get(base) != " ".join(match["type"].split()):
            continue
        rewritten = _with_pointer_inlined(source, masked, statement, match["name"], base,
                                          uncommented[offset_span[0]:offset_span[1]].strip(), kernel.body_close,
                                          indexed=match["base"] is None)
        if rewritten is not None:
            return _inline_array_pointers(rewritten, kernel_name, pinned)
    return source


def _parameter_offsets(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """`*(A + E)` and an operand `A + E` ending where its parentheses or argument do (`__ldg(A + E)`), A a
    pointer parameter the body never changes nor declares again, become `A[E']` and `&A[E']`: the same address,
    E' adding the offset's terms as pointer arithmetic does (_offset_terms), each evaluated once as before. Uses
    nested in another's offset are respelled when the step repeats."""
    kernel = find_kernel(source, kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    body = masked[kernel.body_open:kernel.body_close]
    integers = _integer_names(masked[kernel.params_open:kernel.body_close])
    replacements: list[tuple[int, int, str]] = []
    for name in _pointer_parameters(source, kernel):
        if _changes(name, body) or re.search(rf"[\w*&]\s+{name}\s*[=;,\[(]", body):
            continue
        for kind, start, stop, (left, right) in _pointer_uses(masked, name, kernel.body_open, kernel.body_close,
                                                                integers):
            offset = _offset_terms(uncommented[left:right].strip())
            if kind in ("deref", "operand") and not any(a < stop and start < b for a, b, _ in replacements):
                replacements.append((start, stop, f"{'&' if kind == 'operand' else ''}{name}[{offset}]"))
    for start, stop, text in sorted(replacements, reverse=True):
        source = source[:start] + text + source[stop:]
    return source


_GROUP = r"(?:\((?:[^()]|\([^()]*\))*\)|\[(?:[^\[\]]|\[[^\[\]]*\])*\])"  # brackets, two deep at most
_LOOSER = re.compile(r"[<>=&|^?:!]")  # operators binding looser than + and -: an offset ends before them


def _pointer_uses(masked: str, name: str, start: int, end: int,
                  integers: set[str]) -> Iterator[tuple[str, int, int, tuple[int, int]]]:
    """Each use of the pointer `name` in masked[start:end], as (kind, start, end, the span of its index or
    offset): `subscript` (`p[i]`), `deref` (`*(p + j)`, the * unary, after a cast at most, and nothing after the
    parenthesis binding tighter), `operand` (`p + j` alone in its parentheses or argument: `__ldg(p + j)`), else
    `other`. An offset of a looser operator, or that subtracts a name not of the `integers`, is `other`."""
    uses = re.compile(rf"(?P<deref>\*\s*\(\s*)?(?<![\w.]){re.escape(name)}\b\s*(?:(?P<subscript>\[)|"
                      rf"\+(?P<plus>[^,;()\[\]]*(?:{_GROUP}[^,;()\[\]]*)*)(?P<close>\))?)?")
    for use in uses.finditer(masked, start, end):
        if use["subscript"]:
            close = closing(masked, use.end() - 1)
            yield "subscript", use.start(), close + 1, (use.end(), close)
            continue
        plus, span = use["plus"], use.span("plus")
        outside = outside_brackets(plus or "")
        before = masked[max(0, use.start() - 80):use.start()]
        if plus is None or _LOOSER.search(outside) or \
                any(word not in integers for word in re.findall(r"-\s*([A-Za-z_]\w*)\b(?!\s*\.)", outside)):
            yield "other", use.start(), use.end(), span
        elif use["deref"] and use["close"] and (not re.search(r"[\w)\]]\s*$", before) or
                                                _CAST_BEFORE.search(before)) and \
                not re.match(r"\s*(?:[\[(.]|->|\+\+|--)", masked[use.end():]):
            yield "deref", use.start(), use.end(), span
        elif not use["deref"] and masked[span[1]:span[1] + 1] in ",)" and masked[:use.start()].rstrip()[-1:] in "(,":
            yield "operand", use.start(), span[1], span
        else:
            yield "other", use.start(), use.end(), span


def _integer_names(masked: str) -> set[str]:
    """The names the text declares with an integer type (a parameter's included, and each declarator after the
    first): what an offset may subtract, where another name may be a pointer (`A + i - base`, a distance)."""
    found = set()
    for declared in re.finditer(rf"\b(?:const\s+)?{INTEGER_TYPE}\s+(?!{INTEGER_TYPE}\b)([^;(){{}}]*)", masked):
        for declarator in split_top_level(declared[1], ","):
            name = re.match(rf"\s*(?:(?:const\s+)?{INTEGER_TYPE}\s+)?([A-Za-z_]\w*)\s*(?:=|$|\[)", declarator)
            if name:
                found.add(name[1])
    return found


def _pointer_parameters(source: str, kernel) -> dict[str, str]:
    """Each pointer parameter's name -> its element type (`const float *__restrict__ A` -> float)."""
    found = {}
    for start, end in kernel.parameters(source):
        text = mask(source[start:end])
        match = re.fullmatch(rf"\s*{_POINTER}\s*", text)
        if match:
            found[match["name"]] = " ".join(match["type"].replace("const", " ").split())
    return found


def _with_pointer_inlined(source: str, masked: str, declaration: Statement, name: str, base: str, offset: str,
                          end: int, indexed: bool) -> str | None:
    """The source with `name` replaced at every use after its declaration, and the declaration gone; None when a
    use is of another form, or the pointer, its array or a name its offset reads may change."""
    end = _block_end(masked, declaration.start, end)  # the pointer is a local of its block
    after = masked[declaration.end:end]
    if not _is_plain_arithmetic(mask(offset)):
        return None  # a call, a load or a side effect: inlined at every use it would be evaluated again
    if any(_changes(changing, after) for changing in (name, base, *set(_names(mask(offset))))):
        return None
    if re.search(rf"\b{re.escape(name)}\b", masked[:declaration.start][masked.rfind("{", 0, declaration.start):]):
        return None
    # `&A[i - 1]` computes its index in the index's type first; `A + i - 1` steps by each term in turn
    element = f"(long long)({offset})" if indexed else _offset_terms(offset)
    uncommented = mask(source, literals=False)
    replacements = []
    for kind, start, stop, (left, right) in _pointer_uses(masked, name, declaration.end, end,
                                                          _integer_names(masked[:end])):
        operand = uncommented[left:right].strip()
        if kind == "subscript":
            replacements.append((start, stop, f"{base}[{element} + ({operand})]"))
        elif kind in ("deref", "operand"):
            replacements.append((start, stop, f"{'&' if kind == 'operand' else ''}{base}[{element} + ({operand})]"))
        else:
            return None
    if not replacements:
        return None
    for start, stop, text in reversed(replacements):
        source = source[:start] + text + source[stop:]
    return _without_statement(source, declaration)  # the uses replaced all follow it


def _is_plain_arithmetic(masked: str) -> bool:
    """Names, numbers, casts, + - * and parentheses, and divisions and shifts by a positive number: no call, load,
    dereference or side effect (nor a division by anything else, which may trap)."""
    masked = re.sub(r"(?:/|>>)\s*[1-9]\d*[uUlL]*\b", " ", masked)
    if not _PURE.fullmatch(masked) or re.search(r"\+\+|--", masked):
        return False
    if _calls(masked):
        return False
    return not re.search(r"(?:^|[-+*/%(])\s*\*", masked)  # a unary * is a load


_KEYWORDS = {"int", "unsigned", "signed", "long", "short", "char", "float", "double", "bool", "const", "void", "true",
             "false", "sizeof", "size_t"}  # names no kernel declares as a variable
_CAST_WORDS = CAST_WORDS | {"short", "char", "signed"}  # the casts a pure expression may spell


_CAST_BEFORE = re.compile(r"\(\s*(?:const\s+)?(?:(?:unsigned|signed|long|short|int|char|float|double|bool|size_t|"
                          r"ptrdiff_t|u?int(?:8|16|32|64)_t)\s*)+\)\s*$")  # `(int)` before a sign: unary, not a term


def _offset_terms(offset: str) -> str:
    """The offset as pointer arithmetic adds it, term by term, each a signed 64-bit count: `p + i - 1` steps by
    i then by -1, which `(long long)(i - 1)` would not be for an unsigned i of 0."""
    masked, terms, depth, start = mask(offset), [], 0, 0
    for at, char in enumerate(masked):
        depth += char in "(["
        depth -= char in ")]"
        if depth == 0 and char in "+-" and at > start and masked[:at].rstrip()[-1:] not in ("", "*", "/", "%", "+",
                                                                                              "-", "(") and \
                not _CAST_BEFORE.search(masked[:at]):
            terms.append(offset[start:at])
            start = at
    terms.append(offset[start:])
    spelled = []
    for term in (t.strip() for t in terms):
        sign, value = ("- ", term[1:].strip()) if term.startswith("-") else ("+ ", term.lstrip("+").strip())
        spelled.append(f"{sign}(long long)({value})")
    text = " ".join(spelled)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def _block_end(masked: str, at: int, limit: int) -> int:
    """The end of the block the statement at `at` is in (its closing brace), at most `limit`."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if masked[i] == "}":
            depth += 1
        elif masked[i] == "{":
            if depth == 0:
                return min(limit, closing(masked, i))
            depth -= 1
    return limit


# --- while loops that are for loops ----------------------------------------------------------------------
_DECLARED = re.compile(r"\s*(?P<const>const\s+)?(?P<type>(?:(?:unsigned|signed|long|short|int|size_t|ptrdiff_t|"
                       r"u?int(?:32|64)_t|std::size_t)\s*)+)\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<init>[^;,]*);\s*")
_STEP = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*(?:\+=\s*(?P<by>[^;]+?)|\+\+)\s*;\s*|"
                   r"\s*\+\+\s*(?P<pre>[A-Za-z_]\w*)\s*;\s*")
# A halving step, `s /= 2`, `s >>= 1` or `s = s / 2` (a tree's), which the for loop's step may hold as written.
_HALVING = re.compile(r"\s*(?P<halving>(?P<name>[A-Za-z_]\w*)\s*(?:/=\s*2|>>=\s*1|=\s*(?P=name)\s*(?:/\s*2|>>\s*1)))"
                      r"\s*;\s*(?P<pre>)(?P<by>)")
_ANY_DECLARATION = re.compile(r"\s*(?:const\s+)?[A-Za-z_][\w\s:]*?\s+(?P<name>[A-Za-z_]\w*)\s*=[^;]*;\s*")
_PURE = re.compile(r"[\w\s.*+\-()]*")  # launch geometry, names, casts and arithmetic: no call, no assignment


def _while_as_for(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    top = statements(masked, kernel.body_open + 1, kernel.body_close)
    blocks = [top, *(s.children(masked) for s, _ in walk(masked, top) if s.kind == "block")]
    for body, (at, loop) in ((body, item) for body in blocks for item in enumerate(body)):
        if loop.kind != "while" or loop.body.kind != "block":
            continue
        inner = statements(masked, *loop.body.inner)
        if not inner:
            continue
        step = _STEP.fullmatch(masked, inner[-1].start, inner[-1].end) or \
            _HALVING.fullmatch(masked, inner[-1].start, inner[-1].end)
        if step is None:
            continue
        index = step["name"] or step["pre"]
        found = _loop_declaration(masked, body[:at], index)
        if found is None:
            continue
        declared, match = found
        after = masked[loop.end:kernel.body_close]
        rest_of_body = masked[loop.body.inner[0]:inner[-1].start]
        if re.search(rf"\b{index}\b", after) or re.search(r"\bcontinue\b", rest_of_body) or \
                _changes(index, rest_of_body):
            continue
        removed = [declared]
        by = source[step.start("by"):step.end("by")].strip() if step["by"] else "1"
        stride = next((s for s in body[:at] if step.re is _STEP and step["by"] and
                       (d := _DECLARED.fullmatch(masked, s.start, s.end))
                       and d["name"] == by.strip()), None)
        if stride is not None:  # written into the step only when it reads the launch geometry alone: it cannot change
            elsewhere = masked[kernel.body_open:stride.start] + masked[stride.end:inner[-1].start] + after
            stride_match = _DECLARED.fullmatch(masked, stride.start, stride.end)
            if not re.search(rf"\b{by}\b", elsewhere) and _type(stride_match["init"], {}) is not None:
                spelled = " ".join(stride_match["type"].split())
                by = f"({spelled})({source[stride_match.start('init'):stride_match.end('init')].strip()})"
                removed = [declared, stride]
        init = source[match.start("init"):match.end("init")].strip()
        condition = source[loop.head[0]:loop.head[1]].strip()
        kept_body = source[loop.body.start:inner[-1].start].rstrip() + "\n" + \
            _indent_of(source, loop.start) + "}"
        stepped = f"{index} += {by}" if step.re is _STEP else " ".join(step["halving"].split())
        header = f"for ({' '.join(match['type'].split())} {index} = {init}; {condition}; {stepped}) "
        source = source[:loop.start] + header + kept_body + source[loop.end:]
        for statement in sorted(removed, key=lambda s: s.start, reverse=True):
            source = _without_statement(source, statement)
        return source
    return source


def _do_as_while(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """`if (C) { DECLARATIONS do { ... } while (C); }` is `if (C) { DECLARATIONS while (C) { ... } }`: the
    loop's first test holds already where nothing between the guard and the loop changes what C reads. Where the
    guard is the last statement of its block and holds only those, it is dropped, its statements moved out: the
    while loop tests C first, and the declarations, plain arithmetic, do nothing where it fails."""
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    top = statements(masked, kernel.body_open + 1, kernel.body_close)
    blocks = [top, *(s.children(masked) for s, _ in walk(masked, top) if s.kind == "block")]
    for block in blocks:
        for number, guard in enumerate(block):
            if guard.kind != "if" or guard.orelse is not None or guard.body.kind != "block":
                continue
            condition = masked[guard.head[0]:guard.head[1]]
            inside = guard.body.children(masked)
            for at, loop in enumerate(inside):
                if loop.kind != "do" or " ".join(masked[loop.head[0]:loop.head[1]].split()) != \
                        " ".join(condition.split()):
                    continue
                declarations = [_ANY_DECLARATION.fullmatch(masked, s.start, s.end) for s in inside[:at]]
                if not all(d and _is_plain_arithmetic(d.string[d.start() + d.group().index("=") + 1:d.end()]
                                                      .strip().rstrip(";"))
                           for d in declarations) or calls(condition, _CAST_WORDS) or \
                        _SIDE_EFFECTS.search(condition) or \
                        any(_changes(name, masked[guard.body.start:loop.start]) for name in _names(condition)):
                    continue
                header = f"while ({source[loop.head[0]:loop.head[1]].strip()}) "
                loop_text = header + source[loop.body.start:loop.body.end]
                others = masked[kernel.body_open:guard.start] + masked[guard.end:kernel.body_close]
                clash = any(re.search(rf"\b{d['name']}\b", others) for d in declarations)
                if at + 1 == len(inside) and number + 1 == len(block) and not clash:
                    indent = _indent_of(source, guard.start)
                    moved = textwrap.dedent(source[guard.body.start + 1:loop.start].lstrip(" \t").lstrip("\n")
                                            + loop_text).strip()
                    moved = "\n".join(indent + line if line.strip() and n else line
                                       for n, line in enumerate(moved.split("\n")))
                    return source[:guard.start] + moved + source[guard.end:]
                return source[:loop.start] + loop_text + source[loop.end:]
    return source


def _loop_declaration(masked: str, before: list[Statement], index: str) -> tuple[Statement, re.Match] | None:
    """The declaration of the loop's index among the statements before it, when nothing after it reads the
    index, nor anything its initialiser reads changes, and the initialiser calls nothing."""
    for number, statement in enumerate(before):
        match = _DECLARED.fullmatch(masked, statement.start, statement.end)
        if match is None or match["name"] != index:
            continue
        if match["const"] or not _is_plain_arithmetic(match["init"]):
            return None
        reads = set(_names(match["init"]))
        for later in before[number + 1:]:
            text = masked[later.start:later.end]
            declaration = _ANY_DECLARATION.fullmatch(text)
            if declaration is None or re.search(rf"\b{index}\b", text) or declaration["name"] in reads or \
                    not _is_plain_arithmetic(text[text.index("=") + 1:].rstrip().rstrip(";")):
                return None  # moved past it, the index's initialiser would be read after what this one does
        return statement, match
    return None


def _without_statement(source: str, statement: Statement) -> str:
    line_start = source.rfind("\n", 0, statement.start) + 1
    start = line_start if not source[line_start:statement.start].strip() else statement.start
    end = statement.end + (1 if source[statement.end:statement.end + 1] == "\n" else 0)
    return source[:start] + source[end:]


# --- for loops stepping a second index -----------------------------------------------------------------
_TWO_INDICES = re.compile(r"\s*(?P<type>(?:(?:unsigned|signed|long|short|int|size_t|ptrdiff_t|u?int(?:32|64)_t)\s*)+)"
                          r"\s+(?P<a>[A-Za-z_]\w*)\s*=(?P<a0>[^,]+),\s*(?P<b>[A-Za-z_]\w*)\s*=(?P<b0>[^,]+)")
_BY_ONE = r"\s*(?:{0}\s*\+\+|\+\+\s*{0}|{0}\s*\+=\s*1)\s*"
_WIDE = re.compile(r"long|size_t|ptrdiff_t|int64_t")


def _second_index_derived(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    """`for (int c = C0, k = K0; c < n; ++c, k += S) BODY` (either declared first) is `for (int c = C0; c < n; ++c)
    { const int k = K0 + (c - C0) * S; BODY }`: k holds the same value at every step where the body changes
    neither index, the condition does not read k, and K0 and S are plain arithmetic of names the loop never
    changes. A 32-bit k is computed through a 64-bit product, so no step overflows where the loop's did not."""
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    top = statements(masked, kernel.body_open + 1, kernel.body_close)
    for loop, _ in walk(masked, top):
        if loop.kind != "for" or loop.head is None:
            continue
        try:
            init, condition, step = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
        except ValueError:
            continue
        declared, steps = _TWO_INDICES.fullmatch(init), split_top_level(step, ",")
        if declared is None or len(steps) != 2:
            continue
        for a, b in ((declared["a"], declared["b"]), (declared["b"], declared["a"])):
            counted = next((s for s in steps if re.fullmatch(_BY_ONE.format(a), s)), None)
            other = next((s for s in steps if s is not counted), None)
            stride = other and re.fullmatch(rf"\s*(?:{b}\s*\+\+|\+\+\s*{b}|{b}\s*\+=(?P<by>[^,]+))\s*", other)
            if counted is None or not stride or re.search(rf"\b{b}\b", condition):
                continue
            by = "1" if stride["by"] is None else stride["by"].strip()
            first_of_b = init[declared.start("b0") - declared.start():declared.end("b0") - declared.start()]
            first_of_a = init[declared.start("a0") - declared.start():declared.end("a0") - declared.start()]
            if declared["a"] != a:
                first_of_a, first_of_b = first_of_b, first_of_a
            body = masked[loop.body.start:loop.body.end]
            read = set(_names(first_of_b)) | set(_names(by)) | set(_names(first_of_a))
            if not all(_is_plain_arithmetic(t) for t in (first_of_a, first_of_b, by)) or {a, b} & read or \
                    any(_changes(name, body + condition) for name in {a, b, *read}):
                continue  # k's start, step and c's start are read at every step: nothing may change them
            return _derived(source, loop, declared, a, b, first_of_a, first_of_b, by, init)
    return source


def _derived(source: str, loop: Statement, declared: re.Match, a: str, b: str, first_of_a: str,
             first_of_b: str, by: str, init: str) -> str:
    spelled = " ".join(declared["type"].split())
    steps = f"({a} - ({first_of_a.strip()}))" if first_of_a.strip() != "0" else a
    if by != "1":
        steps = f"{steps} * ({by})" if _WIDE.search(spelled) else f"(long long){steps} * ({by})"
        value = f"({spelled})({first_of_b.strip()} + {steps})" if not _WIDE.search(spelled) else \
            f"{first_of_b.strip()} + {steps}"
    else:
        value = f"{first_of_b.strip()} + {steps}"
    indent = _indent_of(source, loop.start)
    head = f"{spelled} {a} = {first_of_a.strip()}; " + source[loop.head[0] + len(init) + 1:loop.head[1]].lstrip()
    head = head[:head.rindex(";") + 1] + f" ++{a}"
    definition = f"const {spelled} {b} = {value};"
    if loop.body.kind == "block":
        opening = loop.body.start + 1
        inner = f"\n{indent}{INDENT}{definition}"
        return source[:loop.head[0]] + head + source[loop.head[1]:opening] + inner + source[opening:]
    statement = source[loop.body.start:loop.body.end]
    block = f"{{\n{indent}{INDENT}{definition}\n{indent}{INDENT}{statement}\n{indent}}}"
    return source[:loop.head[0]] + head + ") " + block + source[loop.body.end:]


# --- windows walked in absolute coordinates --------------------------------------------------------------
_WINDOW_INIT = re.compile(r"\s*(?P<type>(?:const\s+)?(?:unsigned\s+|signed\s+|long\s+)*(?:int|long|size_t|unsigned))\s+"
                          r"(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<centre>[A-Za-z_]\w*)\s*(?P<sign>[-+])(?P<reach>[^;]+)")
_UNIT_STEP = r"\s*(?:{0}\s*\+\+|\+\+\s*{0}|{0}\s*\+=\s*1)\s*"


def _window_offsets(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    body = statements(masked, kernel.body_open + 1, kernel.body_close)
    declared = (_DECLARED.fullmatch(masked, s.start, s.end) for s in body)
    geometry = {m["name"]: " ".join(m["type"].split()) for m in declared
                if m and re.search(r"\b(?:threadIdx|blockIdx)\b", m["init"])}
    for loop, _ in walk(masked, body):
        if loop.kind != "for":
            continue
        parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
        if len(parts) != 3:
            continue
        init = _WINDOW_INIT.fullmatch(parts[0])
        if init is None or init["centre"] not in geometry or not _is_plain_arithmetic(init["reach"]):
            continue
        name, centre = init["name"], init["centre"]
        if not re.fullmatch(_UNIT_STEP.format(re.escape(name)), parts[2]) or \
                " ".join(init["type"].replace("const", " ").split()) != geometry[centre]:
            continue  # another type than the centre's: `centre + offset` would be computed in another type
        inside = masked[loop.body.start:loop.body.end]
        if _changes(name, inside) or _changes(centre, inside):
            continue
        offset = fresh_name(f"d{name}", identifiers(source))
        at = loop.head[0]
        reach = source[at + init.start("reach"):at + init.end("reach")].strip()
        start = f"-({reach})" if init["sign"] == "-" else f"({reach})"
        condition_at = at + len(parts[0]) + 1
        condition = _renamed(source[condition_at:condition_at + len(parts[1])].strip(), name, f"({centre} + {offset})")
        header = f"{' '.join(init['type'].split())} {offset} = {start}; {condition}; {offset}++"
        renamed_body = _renamed(source[loop.body.start:loop.body.end], name, f"({centre} + {offset})")
        source = source[:loop.head[0]] + header + source[loop.head[1]:loop.body.start] + renamed_body + \
            source[loop.body.end:]
        return _window_offsets(source, kernel_name, pinned)
    return source


def _renamed(text: str, name: str, replacement: str) -> str:
    """`text` with the variable `name` replaced, members of that name (`v.x`, `p->x`) left as they are."""
    return _substitute(text, {name: replacement}, members=False)


# --- one-return device functions -------------------------------------------------------------------------
_FUNCTION = re.compile(r"__device__\s+(?:(?:__forceinline__|__noinline__|inline|static)\s+)*(?P<type>(?:const\s+)?"
                       r"(?:unsigned\s+|signed\s+|long\s+)*(?:float|double|int|unsigned|long|size_t|bool|char|short))"
                       r"\s+(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*\{"
                       r"(?P<locals>(?:\s*(?:const\s+)?[A-Za-z_][\w\s]*?\s+[A-Za-z_]\w*\s*=[^;{}]*;)*)"
                       r"\s*return\b(?P<expr>[^;{}]*);\s*\}")
_LOCAL = re.compile(r"\s*(?:const\s+)?(?P<type>(?:unsigned\s+|signed\s+|long\s+)*(?:float|double|int|unsigned|long|"
                    r"size_t|bool|char|short))\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<init>[^;]*);")
_PARAMETER = re.compile(r"\s*(?P<type>(?:const\s+)?[A-Za-z_][\w\s]*?)\s*(?P<pointer>\*\s*(?:const\s+)?"
                        r"(?:__restrict__\s+)?)?(?P<name>[A-Za-z_]\w*)\s*")
_SIDE_EFFECTS = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)|[-+*/%&|^]=|<<=|>>=")


@dataclass(frozen=True)
class Function:
    type: str
    params: tuple[tuple[str, str, bool], ...]  # (name, type, is a pointer)
    expression: str


def _inline_functions(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    kernel = find_kernel(source, kernel_name)
    masked = mask(source)
    functions = _one_return_functions(source, masked, kernel.name_at)
    local = set(_DECLARES.findall(masked[kernel.params_open:kernel.body_close]))  # a lambda `f` is not `::f`
    functions = {name: function for name, function in functions.items() if name not in local}
    if not functions:
        return source
    declared = set(_names(masked[kernel.params_open:kernel.body_close]))
    start, end = kernel.body_open + 1, kernel.body_close
    for _ in range(4):  # a function's expression may call another
        body = source[start:end]
        inlined = _inlined_calls(body, mask(body), functions, declared)
        if inlined == body:
            break
        source = source[:start] + inlined + source[end:]
        end = start + len(inlined)
    return source


def _one_return_functions(source: str, masked: str, before: int) -> dict[str, Function]:
    """The `__device__` functions defined before the kernel whose body is one return, by name: those defined once,
    outside conditional groups, whose expression has no side effect and names no macro of the source (which
    would be read as defined at the kernel, not at the function)."""
    found: dict[str, list[Function | None]] = {}
    macros = defined_macros(masked)
    for match in _FUNCTION.finditer(masked, 0, before):
        expression = masked[match.start("expr"):match.end("expr")]
        initialised = masked[match.start("locals"):match.end("locals")]
        params = _parameters_of(match["params"])
        if _conditional_depth(masked, match.start()) or _SIDE_EFFECTS.search(expression) or \
                set(_names(expression + initialised)) & macros or masked[:match.start()].rstrip().endswith(">"):
            params = None
        expression = source[match.start("expr"):match.end("expr")].strip()
        if params is not None and initialised.strip():
            expression = _with_locals(source[match.start("locals"):match.end("locals")], expression, params)
        found.setdefault(match["name"], []).append(
            Function(" ".join(match["type"].split()), params, expression)
            if params is not None and expression is not None else None)
    return _defined_once(found, masked, before)


def _with_locals(initialised: str, expression: str, params: tuple[tuple[str, str, bool], ...]) -> str | None:
    """A function's return expression with the locals it declares first (`int b = (int)(v * 4.0f);`) written
    into it as their converted initialisers; None where one is not a plain declaration of an arithmetic type, has
    a side effect or a call (written in at each use, it would run as often), or takes a parameter's name."""
    values: dict[str, str] = {}
    taken = {name for name, _, _ in params}
    masked = mask(initialised)
    at = 0
    while masked[at:].strip():
        local = _LOCAL.match(masked, at)
        if local is None or local["name"] in taken or _SIDE_EFFECTS.search(local["init"]) or \
                calls(local["init"], _CAST_WORDS):
            return None
        init = _substitute(initialised[local.start("init"):local.end("init")].strip(), values, spaced=True,
                           members=False)
        values[local["name"]] = f"(({' '.join(local['type'].split())})({init}))"
        taken.add(local["name"])
        at = local.end()
    return _substitute(expression, values, spaced=True, members=False)


def _parameters_of(text: str) -> tuple[tuple[str, str, bool], ...] | None:
    """(name, type, is a pointer) of each parameter of a parameter list; None where one is not read."""
    if text.strip() in ("", "void"):
        return ()
    params = []
    for part in split_top_level(text, ","):
        parameter = _PARAMETER.fullmatch(part)
        if parameter is None:
            return None
        params.append((parameter["name"], " ".join(parameter["type"].split()), bool(parameter["pointer"])))
    return tuple(params)


def _defined_once(found: dict[str, list], masked: str, before: int) -> dict:
    """The functions found defined once (None: one that cannot be inlined) and named nowhere else before the
    kernel: an overload or a declaration elsewhere would leave which one is called open."""
    for name in set(_names(masked[:before])):
        if name in found and len(re.findall(rf"\b{name}\s*\(", masked[:before])) != len(found[name]):
            found[name].append(None)
    return {name: f[0] for name, f in found.items() if len(f) == 1 and f[0] is not None}


def _inlined_calls(body: str, masked: str, functions: dict[str, Function], declared: set[str]) -> str:
    out, at = [], 0
    for match in re.finditer(r"(?<![\w.:>])(?P<name>[A-Za-z_]\w*)\s*\(", masked):
        function = functions.get(match["name"])
        if function is None or match.start() < at:
            continue
        close = closing(masked, match.end() - 1)
        arguments = split_top_level(masked[match.end():close], ",") if masked[match.end():close].strip() else []
        if len(arguments) != len(function.params):
            continue
        spans, offset = [], match.end()
        for argument in arguments:
            spans.append(body[offset:offset + len(argument)].strip())
            offset += len(argument) + 1
        replacement = _expression_of(function, spans, [a.strip() for a in arguments], declared)
        if replacement is None:
            continue
        out += [body[at:match.start()], replacement]
        at = close + 1
    return "".join(out) + body[at:]


def _expression_of(function: Function, arguments: list[str], masked_arguments: list[str],
                   declared: set[str]) -> str | None:
    names = {name for name, _, _ in function.params}
    if (set(_names(mask(function.expression))) - names - _KEYWORDS) & declared:
        return None  # the expression names something the kernel declares too: inlined, it would read that
    values = {}
    for (name, type_, pointer), argument, masked in zip(function.params, arguments, masked_arguments):
        if _SIDE_EFFECTS.search(masked) or calls(masked, _CAST_WORDS):
            return None  # a call or a side effect might be evaluated twice, or not at all, inlined
        if pointer:
            if not re.fullmatch(r"[A-Za-z_]\w*", argument):
                return None
            values[name] = argument
        else:
            values[name] = f"(({type_})({argument}))"
    return f"(({function.type})({_substitute(function.expression, values, spaced=True, members=False)}))"


# --- calls of functions with a body ----------------------------------------------------------------------
_BODY_FUNCTION = re.compile(r"__device__\s+(?:(?:__forceinline__|__noinline__|inline)\s+)*(?P<type>(?:const\s+)?"
                            r"(?:unsigned\s+|signed\s+|long\s+)*(?:float|double|int|unsigned|long|size_t|bool|char|"
                            r"short))\s+(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*\{")
_CALLED_INTO = re.compile(r"\s*(?:(?:const\s+)?(?P<type>(?:unsigned\s+|signed\s+|long\s+)*(?:float|double|int|unsigned|"
                          r"long|size_t|bool|char|short))\s+)?(?P<target>[A-Za-z_]\w*)\s*=\s*(?P<name>[A-Za-z_]\w*)\s*"
                          r"\((?P<arguments>.*)\)\s*;\s*", re.DOTALL)
_NOT_INLINED = re.compile(r"\b(?:static|__shared__|asm|goto|__syncthreads|__syncwarp|extern)\b")


@dataclass(frozen=True)
class Body:
    type: str
    params: tuple[tuple[str, str, bool], ...]  # (name, type, is a pointer)
    statements: str  # its body before the return that ends it, the source's macros expanded
    expression: str  # what that return returns
    locals: frozenset[str]


def _inline_bodies(source: str, kernel_name: str, pinned: frozenset[str]) -> str:
    for _ in range(4):  # a function's body may call another
        kernel = find_kernel(source, kernel_name)
        masked = mask(source)
        declared = set(_DECLARES.findall(masked[kernel.params_open:kernel.body_close]))
        functions = {name: function for name, function in _functions_with_bodies(source, masked, kernel.name_at,
                                                                                  pinned).items()
                     if name not in declared and not (_free_names(function) & declared)}
        taken = set(_names(masked[kernel.params_open:kernel.body_close]))
        for statement, _ in walk(masked, statements(masked, kernel.body_open + 1, kernel.body_close)):
            simple = statement.kind == "simple"
            call = _CALLED_INTO.fullmatch(masked, statement.start, statement.end) if simple else None
            if call is None or call["name"] not in functions or \
                    closing(masked, call.start("arguments") - 1) != call.end("arguments"):
                continue
            if call["type"] and masked[kernel.body_open:statement.start].rstrip()[-1:] not in (";", "{", "}"):
                continue  # the declaration and the block that sets it are two statements: a block must hold them
            inlined = _body_inlined(source, masked, statement, call, functions[call["name"]], taken)
            if inlined is not None:
                source = inlined
                break
        else:
            return source
    return source


def _functions_with_bodies(source: str, masked: str, before: int, pinned: frozenset[str]) -> dict[str, Body]:
    """The `__device__` functions defined before the kernel, once and outside conditional groups, whose body is
    statements ending in its only return (one that is only a return is _one_return_functions'), with nothing tied
    to its own frame or to other threads (static, __shared__, asm, goto, barriers), nor a macro of the source this
    module does not expand as the compiler would there."""
    found: dict[str, list[Body | None]] = {}
    defined = defined_macros(masked) - pinned
    functions = functions_named(masked[:before])
    for match in _BODY_FUNCTION.finditer(masked, 0, before):
        close = closing(masked, match.end() - 1)
        inner = masked[match.end():close]
        params = _parameters_of(match["params"])
        try:
            parts = statements(masked, match.end(), close)
        except (Unparsed, ValueError):
            parts = []
        last = parts[-1] if parts else None
        ended = len(parts) > 1 and last.kind == "simple" and re.match(r"\s*return\b", masked[last.start:last.end])
        if params is None or not ended or len(re.findall(r"\breturn\b", inner)) != 1 or \
                _NOT_INLINED.search(inner) or _conditional_depth(masked, match.start()) or \
                masked[:match.start()].rstrip().endswith(">") or _writes_outside(inner, params, functions):
            found.setdefault(match["name"], []).append(None)
            continue
        text = mask(source, literals=False)
        macros = {name: macro for name, macro in _macros(source, match.start()).items() if name not in pinned}
        try:
            statements_ = _expand(text[match.end():last.start], macros, frozenset(), defined)
            expression = _expand(text[last.start:last.end].strip()[len("return"):-1], macros, frozenset(), defined)
        except (Unexpandable, ValueError):
            found.setdefault(match["name"], []).append(None)
            continue
        if set(_names(statements_ + expression)) & defined:
            found.setdefault(match["name"], []).append(None)
            continue
        locals_ = frozenset(_DECLARES.findall(mask(statements_)))
        found.setdefault(match["name"], []).append(
            Body(" ".join(match["type"].split()), params, statements_, expression.strip(), locals_))
    return _defined_once(found, masked, before)


def _writes_outside(inner: str, params: tuple | None, functions: set[str]) -> bool:
    """Whether a function body may change anything but its own locals (a store, an atomic, an assignment to a
    name it does not declare, a call of a function of the source), or declares a parameter's name again: inlined,
    its arguments are read after its statements run, and its locals share the kernel's scopes."""
    declared = set(_DECLARES.findall(inner))
    if params is None or declared & {name for name, _, _ in params}:
        return True
    if re.search(r"[\]).]\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|->|\batomic\w*\s*\(|\b__st\w*\s*\(|(?:^|[;{}])\s*\*"
                 r"|\]\s*(?:\+\+|--)|(?:\+\+|--)\s*[\w.]+\s*\[", inner):
        return True
    if any(m.group(1) in functions for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)\s*\(", inner)):
        return True
    assigned = {m.group(1) for m in re.finditer(rf"(?<![\w.])([A-Za-z_]\w*)\s*{_CHANGED}", inner)}
    assigned |= {m.group(1) for m in re.finditer(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", inner)}
    return not assigned <= declared


def _free_names(function: Body) -> set[str]:
    """The names the function reads from outside it: inlined, a kernel's local of that name would shadow them."""
    own = function.locals | {name for name, _, _ in function.params}
    return set(_names(mask(function.statements + " " + function.expression))) - own


def _body_inlined(source: str, masked: str, statement: Statement, call: re.Match, function: Body,
                  taken: set[str]) -> str | None:
    """`T v = f(a, b);` as `T v;` and a block running f's body on the arguments, then `v = (R)(what f returns);`
    (`v = f(a, b);` as the block alone): each argument converted to its parameter's type where the body names it,
    which must not change it; the body's locals renamed where they would hide a name the arguments or the target
    read."""
    arguments = split_top_level(masked[call.start("arguments"):call.end("arguments")], ",") \
        if masked[call.start("arguments"):call.end("arguments")].strip() else []
    if len(arguments) != len(function.params):
        return None
    values, offset = {}, call.start("arguments")
    for (name, type_, pointer), argument in zip(function.params, arguments):
        spelled = source[offset:offset + len(argument)].strip()
        offset += len(argument) + 1
        if _SIDE_EFFECTS.search(argument) or calls(argument, _CAST_WORDS) or _changes(name, mask(function.statements)):
            return None  # evaluated at each use, or not at all: a call or a side effect would not run once
        if pointer and not re.fullmatch(r"[A-Za-z_]\w*", spelled):
            return None
        values[name] = spelled if pointer else f"(({type_})({spelled}))"
    used = taken | function.locals | set(_names(mask(function.statements)))
    read = set(_names(masked[call.start("arguments"):call.end("arguments")])) | {call["target"]}
    values.update({name: fresh_name(name, used) for name in function.locals if name in read})
    body = textwrap.dedent(_substitute(function.statements, values, spaced=True, members=False)).strip("\n")
    result = _substitute(function.expression, values, spaced=True, members=False)
    indent = _indent_of(source, statement.start)
    lines = [f"{indent}{INDENT}{line}" if line.strip() else "" for line in body.split("\n") if body.strip()]
    target = call["target"]
    block = "\n".join(["{", *lines, f"{indent}{INDENT}{target} = (({function.type})({result}));", f"{indent}}}"])
    declaration = f"{' '.join(call['type'].split())} {target};\n{indent}" if call["type"] else ""
    return source[:statement.start] + declaration + block + source[statement.end:]


def _conditional_depth(masked: str, at: int) -> int:
    """How many conditional groups (#if, #ifdef, #ifndef) are open at offset `at`."""
    depth = 0
    for directive in re.finditer(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|endif)\b", masked[:at], re.M):
        depth += 1 if directive.group(1) != "endif" else -1
    return depth
