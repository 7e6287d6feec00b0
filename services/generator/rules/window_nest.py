"""A window sum's loop nest read as the one update it makes and the conditions under which it makes it.

Users guard a window at an image's borders (zero padding) and name its coordinates through locals:

    for (int i = 0; i < K; i++)                        for (int dy = -R; dy <= R; ++dy) {
        for (int j = 0; j < K; j++) {                      const int yy = y + dy;
            int iy = y + i - R;                            if (yy < 0 || yy >= H) continue;
            int ix = x + j - R;                            for (int dx = -R; dx <= R; ++dx) {
            if (iy >= 0 && iy < H && ix >= 0 && ix < W)        const int xx = x + dx;
                sum += in[iy * W + ix] * f[i * K + j];         sum += (xx >= 0 && xx < W) ? src[yy * W + xx] : 0.f;
        }                                                  }
                                                       }

Read here: each loop's body is a run of declarations of locals, assignments to them, skips (`if (C) continue;`)
and guards around the rest (`if (C) { ... }`, without else); the outer loop's run ends in the inner loop, the
inner loop's in the update `SUM += EXPR;`. Nothing there may change a variable but SUM and the locals a loop's
body declares (each step of that loop starts from their declarations), so each local is spelled into what reads
it after as its latest value converted to its type, exactly. A choice whose condition is a guard and moves with
the point is the value it chooses wherever the guard holds: `C ? E : F` (all of a text or of a parenthesis) is E
where C holds, or F where C fails if F alone moves with the point (`xx < 0 ? 0 : xx`); `min(E, B)` is E where
E <= B, `max(E, B)` where E >= B, B a bound (a window clamped to the image's edges: `min(max(x + dx, 0), w - 1)`);
`if (C) v = V;` is V where C holds if V alone moves (a tap loaded under a guard), v's value where C fails if that
alone does (`if (ix < 0) ix = 0;`) or if both do and v is an index (reflect padding, `if (ix < 0) ix = -ix;`). A
choice by the window's offsets alone (`dx < 0 ? -1.0f : 1.0f`) stays.

The update then adds EXPR (so spelled) at a point (x, y) and window offsets (i, j) exactly where every guard
holds. A guard is a chain of comparisons (<, <=, >, >=; joined by && in a guard or a ternary, by || in a skip) of
integer expressions of signed types, linear in x, y, i and j, their coefficients of parameters and of locals
the same at every point. Where such a chain holds (or, a skip's, fails throughout) is convex, so a guard holds
over a whole box of points and offsets wherever it holds at the box's corners: register_window's fast path tests
them.
"""
import dataclasses
import re
from dataclasses import dataclass

from services.generator.rules import affine
from services.generator.rules.cuda_text import blanked_inside, closing, mask, split_top_level, unparenthesised
from services.generator.rules.points import PointKernel, changing
from services.generator.rules.shape import NotRecognised
from services.generator.rules.statements import Statement, walk

SIGNED = r"(?:signed\s+)?(?:long\s+long|long|int|signed)(?:\s+int)?|(?:std::)?(?:int64_t|int32_t|ptrdiff_t)"
_UNROLL = re.compile(r"#\s*pragma\s+unroll[^\n]*\n\s*$")
_LOCALS = re.compile(rf"\s*(?:const\s+)?(?P<type>{SIGNED}|float|double|bool)\s+(?P<declarators>[^;]*);\s*")
_DECLARATOR = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*=(?!=)(?P<init>.*)", re.DOTALL)
_ASSIGNED = re.compile(r"\s*(?P<name>[A-Za-z_]\w*)\s*=(?!=)(?P<value>[^;]*);\s*")
_CHANGES = re.compile(r"\+\+|--|(?<![=!<>])=(?!=)")
_OPERATORS = re.compile(r"<<=?|>>=?|->|<=|>=|==|!=|&&|\|\||[<>?,=&|^!]")
_RELATIONS = {"<", "<=", ">", ">="}
# A count of the taps added, next to the update in its block (a mean over the taps inside the image): by a whole
# number, so that any count of steps from a whole start is exact in every arithmetic type; or by a flag of the
# guard a ternary window tests (`count += inside;` beside `sum += inside ? v : 0.0f;`), 1 wherever the guard holds,
# also cast (`(int)inside`, `int(inside)`, `static_cast<int>(inside)`), negated (`!outside` beside `outside ? 0.0f :
# v`) or choosing whole numbers (`inside ? 1 : 0`); or a whole number under such a flag (`if (inside) count++;`).
WHOLE = r"(?:0|[1-9]\d*)(?:\.0*)?[fFuUlL]*"  # a whole number in decimal (010 is octal in C)
_COUNTER = re.compile(r"\s*(?:(?P<a>[A-Za-z_]\w*)\s*\+\+|\+\+\s*(?P<b>[A-Za-z_]\w*)|"
                      r"(?P<c>[A-Za-z_]\w*)\s*\+=\s*(?P<step>[\w\s()!?:.<>]+?)|"
                      # `count = count + F` adds no choice: `count + F ? 1 : 0` chooses by the sum
                      r"(?P<d>[A-Za-z_]\w*)\s*=\s*(?P=d)\s*\+\s*(?P<added>[\w\s()!.<>]+?))\s*;\s*")
_FLAG_TYPES = ("bool", "int")  # the types a flag of comparisons holds its 0 or 1 in unchanged
# a cast before its operand: C's `(int)`, `static_cast<int>`, or a type called as a function, `int(`
_CAST = re.compile(r"(?:\(\s*(?:const\s+)?[A-Za-z_][\w\s]*\)|static_cast\s*<\s*[\w\s]+>|"
                   r"(?:bool|int|unsigned|float|double|long|short|char|size_t|u?int\d+_t)(?=\s*\())\s*")


@dataclass(frozen=True)
class Nest:
    outer: Statement  # the outer window loop, with an unroll pragma before it
    inner: Statement
    update: Statement  # SUM += EXPR;
    accumulator: str
    expression: str  # EXPR as written (comments blanked), the nest's locals spelled out and guarded values taken
    guards: tuple[str, ...]  # what holds wherever the update runs, spelled likewise, in the order the nest tests them
    chosen: bool  # EXPR is all a choice's value (`inside ? a * b : 0.0f`, or a local so chosen): the submitted
    # kernel rounds it before adding it, where a product written in its place may fuse into the add
    counter: tuple[str, str] | None = None  # (name, step) of a count the update keeps beside it (`n++;`, `n += 1;`)


def loops(kernel: PointKernel, masked: str) -> tuple[Statement, Statement]:
    """(outer loop, inner loop) of the only loop nest of the point body."""
    nested = [(s, depth) for s, depth in walk(masked, list(kernel.statements)) if s.kind in ("for", "while", "do")]
    if not nested:
        raise NotRecognised("its point body has no loop over a window")
    outer, depth = nested[0]
    if depth or len(nested) != 2 or nested[1][0].kind != "for":
        raise NotRecognised("its point body does not have exactly one pair of nested window loops")
    return outer, nested[1][0]


def read(kernel: PointKernel, masked: str, outer: Statement, inner: Statement, variables: set[str]) -> Nest:
    """The nest's update, its expression and its guards; `variables` are x, y and the loop variables i and j."""
    reading = _Reading(kernel, masked, variables)
    if reading.run(outer.body, "outer").start != inner.start:
        raise NotRecognised("its outer window loop holds more than the inner loop, locals and guards")
    update = reading.run(inner.body, "inner")
    if reading.counter is not None:
        counter = reading.counter[0]
        named = re.compile(rf"(?<![\w.]){counter}\b")
        if counter in reading.values or counter in variables or \
                len(named.findall(masked, outer.start, outer.end)) != len(named.findall(reading.counting)):
            raise NotRecognised(f"its window loops count taps in {counter}, which they also use otherwise")
    accumulator = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*\+=(.*);\s*", masked[update.start:update.end], re.DOTALL)
    if update.kind != "simple" or accumulator is None:
        raise NotRecognised("its window loops do not add into an accumulator (`sum += ...;`)")
    added = masked[update.start + accumulator.start(2):update.start + accumulator.end(2)].strip()
    expression = reading.spelled(update.start + accumulator.start(2), update.start + accumulator.end(2))
    if _CHANGES.search(mask(expression)):
        raise NotRecognised("its window update changes a variable besides the accumulator")
    if pragma := _UNROLL.search(masked, 0, outer.start):  # it goes with the loops
        outer = dataclasses.replace(outer, start=pragma.start())
    chosen = reading.whole_choice or added in reading.chosen
    if reading.counter is not None and reading.counter[0] == accumulator.group(1):
        raise NotRecognised(f"its window loops add into {reading.counter[0]} twice")
    return Nest(outer, inner, update, accumulator.group(1), expression, tuple(reading.guards), chosen,
                reading.counter and (reading.counter[0], _step(reading, *reading.counter)))


def _step(reading: "_Reading", counter: str, step: str, condition: tuple[int, int] | None) -> str:
    """A count's step as a whole number, at a tap of the registers, where every guard the nest tests holds: a flag
    (`count += inside;`) steps by 1 where it is such a guard and by 0 where it is one's negation; the condition
    between the offsets `condition` (`if (inside) count++;`) keeps the step where it holds and makes it 0 where it
    fails."""
    if condition is not None:
        tested = list(reading.guards)
        spelled = reading.spelled(*condition)
        holds = _holds(reading, spelled) if reading.guards == tested else None
        reading.guards[:] = tested
        if holds is None:  # a choice in the test holds its value only under a guard of its own, which no corner tests
            raise NotRecognised(f"its count of taps {counter} runs under "
                                f"`{' '.join(reading.uncommented[condition[0]:condition[1]].split())}`, which is not "
                                f"a guard its window tests nor one's negation")
        return step if holds else "0"
    if re.fullmatch(WHOLE, step):
        return step
    value = _flag_value(reading, step)
    if value is None:
        raise NotRecognised(f"its count of taps {counter} steps by {step}, which is neither a whole number nor a "
                            f"flag of a guard its window tests (`bool inside = ...; sum += inside ? v : 0.0f; "
                            f"{counter} += inside;`)")
    return value


def _flag_value(reading: "_Reading", text: str) -> str | None:
    """The whole number `text` comes to at every tap of the registers, where it is made of a flag of a guard the nest
    tests (or of one's negation), !, casts, parentheses and a choice of whole numbers; else None."""
    text = text.strip()
    top = blanked_inside(text)
    if "?" in top:
        question = top.index("?")
        colon = top.find(":", question)
        chosen = [text[question + 1:colon].strip(), text[colon + 1:].strip()] if colon > 0 else []
        if not chosen or not all(re.fullmatch(WHOLE, value) for value in chosen):
            return None
        holds = _flag_value(reading, text[:question])
        return None if holds is None else chosen[holds == "0"]
    if text.startswith("!"):
        value = _flag_value(reading, text[1:])
        return None if value is None else str(int(value == "0"))
    if unparenthesised(text) != text:
        return _flag_value(reading, unparenthesised(text))
    if (cast := _CAST.match(text)) and cast.end() < len(text):
        return _flag_value(reading, text[cast.end():])
    if re.fullmatch(WHOLE, text):
        return text
    if reading.types.get(text) in _FLAG_TYPES:
        holds = _holds(reading, reading.values[text])
        return None if holds is None else str(int(holds))
    return None


def _holds(reading: "_Reading", condition: str) -> bool | None:
    """Whether `condition` (spelled) holds at every tap of the registers, where it is a guard the nest tests (True)
    or that guard's negation (False); None where it is neither."""
    guards = {_normal(guard) for guard in reading.guards}
    spelled = _normal(condition)
    if spelled in guards:
        return True
    if f"!({spelled})" in guards:
        return False
    if (negated := _negated(spelled)) is not None:  # `!(inside)`, spelled `!((a && b))`
        holds = _holds(reading, negated)
        return None if holds is None else not holds
    return None


def _normal(condition: str) -> str:
    """A condition's spelling with its enclosing parentheses dropped, also inside a negation (`!((a || b))` is
    `!(a || b)`), and its spaces as one."""
    condition = " ".join(unparenthesised(condition).split())
    negated = _negated(condition)
    return condition if negated is None else f"!({_normal(negated)})"


def _negated(condition: str) -> str | None:
    """What `condition` negates as a whole (`!(xx >= 0 && xx < w)`: `xx >= 0 && xx < w`), else None."""
    negated = re.fullmatch(r"!\s*(\(.*\))", unparenthesised(condition), re.DOTALL)
    if negated and unparenthesised(negated.group(1)) != negated.group(1):
        return unparenthesised(negated.group(1))
    return None


class _Reading:
    """The locals a nest has declared so far, spelled, and the guards it has tested."""

    def __init__(self, kernel: PointKernel, masked: str, variables: set[str]):
        self.kernel, self.masked, self.variables = kernel, masked, variables
        self.uncommented = mask(kernel.source, literals=False)
        self.values: dict[str, str] = {}  # each local, spelled
        self.types: dict[str, str] = {}
        self.loops: dict[str, str] = {}  # the loop ("outer" or "inner") whose body declares each local
        self.guards: list[str] = []
        self.chosen: set[str] = set()  # the locals whose value is all a choice's
        self.whole_choice = False  # whether the text spelled last was all a choice's value
        self.counter: tuple[str, str, tuple[int, int] | None] | None = None  # name, step, the span of its `if`
        self.counting = ""  # the counter's statement

    def run(self, statement: Statement, which: str) -> Statement:
        """The last statement of a loop's body, having read the declarations and guards before it."""
        parts = _parts(statement, self.masked)
        if which == "inner":
            parts = self._counted(parts)
        if not parts:
            raise NotRecognised(f"its {which} window loop is empty")
        for part in parts[:-1]:
            if not (self._declaration(part, which) or self._assignment(part, which) or self._skip(part) or
                    self._conditional(part, which)):
                raise NotRecognised(f"its {which} window loop holds `{_shown(self.masked, part)}` before its last "
                                    f"statement; before the inner loop or the update, a window's loops may only "
                                    f"declare and assign locals and test guards (`if (iy < 0 || iy >= h) continue;`, "
                                    f"`if (ix < 0) ix = 0;`)")
        last = parts[-1]
        if last.kind == "if" and last.orelse is None:
            self._guard(*last.head, True)
            return self.run(last.body, which)
        return last

    def _counted(self, parts: list[Statement]) -> list[Statement]:
        """The inner loop's last statements less a count beside the update, just before or after it, which is
        then the counter: so both run under the same guards."""
        if len(parts) < 2 or self.counter is not None:
            return parts
        for at, other in ((-1, -2), (-2, -1)):
            counting, condition = parts[at], None
            body = _parts(counting.body, self.masked) if counting.kind == "if" and counting.orelse is None else []
            if len(body) == 1:
                counting, condition = body[0], counting.head  # `if (inside) count++;`
            counter = _COUNTER.fullmatch(self.masked, counting.start, counting.end) \
                if counting.kind == "simple" else None
            step = (counter["step"] or counter["added"] or "1").strip() if counter else ""
            # `sum += v;` after `count += inside;` adds a value the loop declared, not a flag, so not a count
            valued = re.search(rf"\b(?!(?:{'|'.join(_FLAG_TYPES)})\b)\w+\s+{re.escape(step)}\s*=(?!=)",
                               self.masked[parts[0].start:parts[-1].end]) if re.fullmatch(r"\w+", step) else None
            # the update beside it, or under a test of its own (`if (inside) sum += v;`)
            update = _parts(parts[other].body, self.masked) if parts[other].kind == "if" and \
                parts[other].orelse is None else [parts[other]]
            if counter and valued is None and (condition is None or re.fullmatch(WHOLE, step)) and \
                    len(update) == 1 and update[0].kind == "simple" and \
                    re.match(r"\s*[A-Za-z_]\w*\s*\+=", self.masked[update[0].start:update[0].end]):
                self.counter = (counter["a"] or counter["b"] or counter["c"] or counter["d"], step, condition)
                self.counting = self.masked[parts[at].start:parts[at].end]
                return [part for part in parts if part is not parts[at]]
        return parts

    def spelled(self, start: int, end: int) -> str:
        """The source between the offsets, its comments blanked, the nest's locals spelled out and the values of
        ternaries guarded by a guard taken (the guard kept)."""
        text = re.sub(r"(?<![\w.])[A-Za-z_]\w*\b(?!\s*\()",
                      lambda m: self.values.get(m.group(), m.group()) if not _member(m) else m.group(),
                      self.uncommented[start:end])
        return self._guarded_values(" ".join(text.split()))

    def _declaration(self, part: Statement, which: str) -> bool:
        """Declarations of locals with values (`const int yy = y + dy, xx = x + dx;`), each then spelled."""
        locals_ = _LOCALS.fullmatch(self.masked, part.start, part.end) if part.kind == "simple" else None
        if locals_ is None:
            return False
        at = locals_.start("declarators")
        declarators = []
        for text in split_top_level(locals_["declarators"], ","):
            if (declarator := _DECLARATOR.fullmatch(text)) is None:
                return False
            declarators.append((declarator["name"], at + declarator.start("init"), at + declarator.end("init")))
            at += len(text) + 1
        kind = " ".join(locals_["type"].split())
        for name, start, end in declarators:
            if _CHANGES.search(self.masked[start:end]):
                raise NotRecognised(f"its window loops' local {name} changes a variable as it is declared")
            self.types[name] = kind
            self.values[name] = self._value(name, self.spelled(start, end))
            self.loops[name] = which
            self.chosen.discard(name)
            if self.whole_choice:
                self.chosen.add(name)
        return True

    def _value(self, name: str, value: str) -> str:
        """A local's value, spelled: converted to its type, but for a flag of comparisons (`bool inside = xx >= 0
        && xx < w;`, or built in steps, `inside = inside && yy < h;`), which is its condition, a guard where tested."""
        kind = self.types[name]
        # an int flag (`int inside = xx >= 0 && xx < w;`) too: a comparison's value is already an int, 0 or 1
        flag = kind in _FLAG_TYPES and (self.not_a_guard(value, "&&") is None or
                                        self.not_a_guard(value, "||") is None)
        return f"({value})" if flag else f"(({kind})({value}))"

    def _assignment(self, part: Statement, which: str) -> bool:
        """A local of the nest given a new value (`ix = max(0, min(ix, w - 1));`), spelled from its old one: in the
        loop whose body declares it, so that each step of that loop starts from its declaration."""
        assigned = _ASSIGNED.fullmatch(self.masked, part.start, part.end) if part.kind == "simple" else None
        if assigned is None or self.loops.get(assigned["name"]) != which or _CHANGES.search(assigned["value"]):
            return False
        self.values[assigned["name"]] = self._value(assigned["name"],
                                                    self.spelled(assigned.start("value"), assigned.end("value")))
        self.chosen.discard(assigned["name"])
        if self.whole_choice:
            self.chosen.add(assigned["name"])
        return True

    def _skip(self, part: Statement) -> bool:
        body = _parts(part.body, self.masked) if part.kind == "if" and part.orelse is None else []
        if len(body) != 1 or not re.fullmatch(r"\s*continue\s*;\s*", self.masked[body[0].start:body[0].end]):
            return False
        self._guard(*part.head, False)
        return True

    def _conditional(self, part: Statement, which: str) -> bool:
        """`if (C) v = V;` of a local of the nest, as a choice: where only V moves with the point (a tap loaded
        under a guard, `if (inside) v = in[...];`), V where C holds; where only v's value does (a clamp, `if (ix <
        0) ix = 0;`), v's value where C fails."""
        body = _parts(part.body, self.masked) if part.kind == "if" and part.orelse is None else []
        assigned = _ASSIGNED.fullmatch(self.masked, body[0].start, body[0].end) if len(body) == 1 else None
        if assigned is None or self.loops.get(assigned["name"]) != which or _CHANGES.search(assigned["value"]):
            return False
        name = assigned["name"]
        value = self._value(name, self.spelled(assigned.start('value'), assigned.end('value')))
        if self._moves(value) and not self._moves(self.values[name]):
            self._guard(*part.head, True)
            self.values[name] = value
            self.chosen.add(name)
            return True
        # Where both move, an index is remapped at a border (reflect padding, `if (ix < 0) ix = -ix;`): its old
        # value wherever C fails is as exact as the other reading, and it is the interior's.
        index = re.fullmatch(SIGNED, self.types[name]) is not None
        if self._moves(self.values[name]) and (not self._moves(value) or index):
            self._guard(*part.head, False)
            return True
        return False

    def _guard(self, start: int, end: int, holds: bool) -> None:
        """The condition between the offsets a guard: that it holds, or with `holds` False that it fails."""
        condition = self.spelled(start, end)
        if (negated := _negated(condition)) is not None:
            condition, holds = negated, not holds
        why = "it changes a variable" if _CHANGES.search(mask(condition)) else \
            self.not_a_guard(condition, "&&" if holds else "||")
        if why is not None:
            raise NotRecognised(f"its window loops test `{' '.join(self.uncommented[start:end].split())}`, and {why}")
        self.guards.append(f"({condition})" if holds else f"!({condition})")

    def not_a_guard(self, condition: str, joined_by: str) -> str | None:
        """None where `condition` is a chain of comparisons a box's corners decide (module docstring)."""
        condition = unparenthesised(condition)
        joins = [m.start() for m in re.finditer(re.escape(joined_by), blanked_inside(mask(condition)))]
        operands = [condition[start + 2 * bool(start):end] for start, end in zip([0, *joins], [*joins, None])]
        for operand in operands:
            text = unparenthesised(operand)
            if len(operands) > 1 and (why := self.not_a_guard(text, joined_by)) is None:
                continue  # a parenthesised chain of the same joins: `(a >= 0 && a < n) && (b >= 0 && b < m)`
            if (why := self._not_a_comparison(text)) is not None:
                return why
        return None

    def _not_a_comparison(self, text: str) -> str | None:
        top = blanked_inside(mask(text))
        operators = list(_OPERATORS.finditer(top))
        if len(operators) != 1 or operators[0].group() not in _RELATIONS:
            return f"`{text}` is not one comparison (<, <=, > or >=) of integers"
        if re.search(r"\b(?:unsigned|size_t|uint\w*|static_cast|sizeof)\b", text):
            return f"`{text}` compares in an unsigned type, where a band (`(unsigned)(x - a) < n`) is no half-plane"
        if re.search(r"\d[lL]*[uU]|[.eE]", re.sub(r"(?<![\w.])[A-Za-z_]\w*", "", text)):
            return f"`{text}` compares unsigned or floating numbers"
        # a signed local of the point body's own, `int x0 = x - R;`, as what it holds
        known = {name: poly for name, poly in self.kernel.locals.items()
                 if signed_local(self.kernel, self.masked, name) is not None}
        try:
            poly = affine.minus(affine.parse(text[:operators[0].start()], known),
                                affine.parse(text[operators[0].end():], known))
        except affine.NotAffine:
            return f"`{text}` is not a comparison of integer sums and products"
        for term in poly:
            moving = [atom for atom in term if atom in self.variables or
                      atom.startswith("?") and affine.names({(atom,): 1}) & self.variables]
            if len(moving) > 1 or any(atom.startswith("?") for atom in moving):
                return f"`{text}` is not linear in {', '.join(sorted(self.variables))}"
        for name in sorted(affine.names(poly) - self.variables):
            if (why := self._not_a_signed_constant(name)) is not None:
                return f"`{text}` reads {name}, {why}"
        return None

    def _not_a_signed_constant(self, name: str) -> str | None:
        """None where `name` is a signed integer parameter or a constant_local, so the same at every point."""
        if name in self.kernel.parameters:
            declared = self.kernel.parameters[name]
            words = declared[:declared.rindex(name)].replace("const", " ")
            return None if re.fullmatch(rf"\s*(?:{SIGNED})\s*", words) else "which is not a signed integer"
        if constant_local(self.kernel, self.masked, name) is None:
            return "which is not a signed local of the parameters alone, declared once"
        return None

    def _guarded_values(self, text: str) -> str:
        """`text` with each choice whose condition is a guard as the value it chooses where the guard holds (the
        guard kept): `C ? E : F` (all of the text or of a parenthesis) as E, or as F where only F moves with the
        point and C is a chain of ||; and `min(E, B)` or `max(E, B)` (std:: or ::), B a bound, as E."""
        position, self.whole_choice = len(text), False
        while (at := max((masked := mask(text)).rfind("?", 0, position), _last_call(masked, position))) >= 0:
            position = at
            taken = self._chosen(text, masked, at) if text[at] == "?" else self._bounded(text, masked, at)
            if taken is not None:
                start, end, value, guard = taken
                self.guards.append(guard)
                self.whole_choice = text[at] == "?" and start == 0 and end == len(text)
                text, position = f"{text[:start]}{value}{text[end:]}", start
        return text

    def _chosen(self, text: str, masked: str, question: int) -> tuple[int, int, str, str] | None:
        start, end = _group(masked, question)
        top = blanked_inside(masked[start:end])
        colon = [m.start() for m in re.finditer(r"(?<!:):(?!:)", top)]
        if top.count("?") != 1 or len(colon) != 1 or "," in top or re.search(r"(?<![=!<>])=(?!=)", top):
            return None
        condition = unparenthesised(text[start:question])
        chosen, other = text[question + 1:start + colon[0]].strip(), text[start + colon[0] + 1:end].strip()
        if not self._moves(condition):
            return None  # a choice by the window's offsets alone stays in the sum (`dx < 0 ? -1.0f : 1.0f`)
        if self._moves(other) and not self._moves(chosen) and self.not_a_guard(condition, "||") is None:
            return start, end, other, f"!({condition})"
        if self.not_a_guard(condition, "&&") is None:
            return start, end, chosen, f"({condition})"
        return None

    def _bounded(self, text: str, masked: str, call: int) -> tuple[int, int, str, str] | None:
        name = re.match(r"(?:std\s*::\s*|::\s*)?(min|max)\s*\(", masked[call:])
        opening = call + name.end() - 1
        close = _group(masked, opening + 1)[1]
        arguments = split_top_level(masked[opening + 1:close], ",")
        if len(arguments) != 2:
            return None
        first = text[opening + 1:opening + 1 + len(arguments[0])].strip()
        second = text[close - len(arguments[1]):close].strip()
        if self._moves(first) == self._moves(second):
            return None
        value, bound = (first, second) if self._moves(first) else (second, first)
        guard = f"({value}) {'<=' if name.group(1) == 'min' else '>='} ({bound})"
        if self.not_a_guard(guard, "&&") is not None:
            return None
        return call, close + 1, f"({value})", f"({guard})"

    def _moves(self, text: str) -> bool:
        """Whether the text reads the point's indices (its locals spelled out)."""
        return bool(set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", mask(text))) & self.kernel.index_names)


def _last_call(masked: str, before: int) -> int:
    """Where the last call of min or max (std:: or ::) before offset `before` starts, or -1."""
    calls = [m.start() for m in re.finditer(r"(?<![\w.:])(?:std\s*::\s*|::\s*)?(?:min|max)\s*\(", masked[:before])]
    return calls[-1] if calls else -1


def signed_local(kernel: PointKernel, masked: str, name: str) -> tuple[str, str] | None:
    """(type, initialiser) of the local `name` where the point body declares it once, alone, of a signed integer
    type, and changes it nowhere."""
    body = masked[kernel.body_start:kernel.body_end]
    declared = list(re.finditer(rf"(?:^|[;{{}}])\s*(?:const\s+)?({SIGNED})\s+{re.escape(name)}\s*=(?!=)([^;,]*);",
                                body))
    if len(declared) != 1 or re.search(changing(name), body[:declared[0].start()] + body[declared[0].end():]):
        return None
    return " ".join(declared[0][1].split()), declared[0][2].strip()


def constant_local(kernel: PointKernel, masked: str, name: str) -> tuple[str, str] | None:
    """A signed_local of scalar parameters alone (`int R = K / 2;`): the same at every point."""
    local = signed_local(kernel, masked, name)
    scalars = set(kernel.parameters) - set(kernel.array_types)
    return local if local and set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", local[1])) <= scalars else None


def _parts(statement: Statement, masked: str) -> list[Statement]:
    """A block's statements (empty ones and unroll pragmas aside), else the statement alone."""
    if statement.kind != "block":
        return [statement]
    return [s for s in statement.children(masked) if s.kind != "empty"
            and not (s.kind == "directive" and re.match(r"#\s*pragma\s+unroll\b", masked[s.start:s.end]))]


def _group(masked: str, at: int) -> tuple[int, int]:
    """The span inside the innermost brackets around offset `at`, or the whole text."""
    opened = []
    for i, char in enumerate(masked[:at]):
        if char in "([{":
            opened.append(i)
        elif char in ")]}":
            opened.pop()
    return (opened[-1] + 1, closing(masked, opened[-1])) if opened else (0, len(masked))


def _member(match: re.Match) -> bool:
    return bool(re.search(r"(?:\.|->)\s*$", match.string[:match.start()]))


def _shown(masked: str, statement: Statement) -> str:
    return " ".join(masked[statement.start:statement.end].split())
