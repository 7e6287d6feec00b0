"""Splitting CUDA code into statements, on masked text (cuda_text.mask), well enough to restructure a kernel.

A statement is a span of the text: a simple statement up to its `;` (brackets, lambdas' braces included,
counted), a braced block, a preprocessor line, or a control statement (if/else, for, while, do, switch) with
the statement it controls. Offsets are those of the text given, so a span found here is the same span in the
unmasked source.
"""
import re
from collections.abc import Iterator
from dataclasses import dataclass

from services.generator.rules.cuda_text import Kernel, closing

_CONTROL = re.compile(r"(if|for|while|switch)\s*\(")
_WORD_AFTER = re.compile(r"\s*(else|while)\b")


@dataclass(frozen=True)
class Statement:
    kind: str  # simple | block | directive | empty | if | for | while | do | switch
    start: int
    end: int  # one past its last character (its ; or })
    head: tuple[int, int] | None = None  # inside the parentheses of if/for/while/switch (and do's while)
    body: "Statement | None" = None  # the statement controlled (if: the then branch)
    orelse: "Statement | None" = None  # if: the else branch
    inner: tuple[int, int] | None = None  # block: inside its braces

    def text(self, source: str) -> str:
        return source[self.start:self.end]

    def children(self, masked: str) -> list["Statement"]:
        """The statements directly inside: a block's, or the controlled statement(s)."""
        if self.kind == "block":
            return statements(masked, *self.inner)
        return [s for s in (self.body, self.orelse) if s is not None]


class Unparsed(ValueError):
    """The text could not be split into statements; the message says where."""


def body_of(kernel: Kernel, masked: str, refuse: type[Exception]) -> list[Statement]:
    """The statements of `kernel`'s body, in order; `refuse` is raised, saying why, when they cannot be read."""
    try:
        return statements(masked, kernel.body_open + 1, kernel.body_close)
    except Unparsed as exc:
        raise refuse(f"its body could not be read: {exc}") from None


def statements(masked: str, start: int, end: int) -> list[Statement]:
    """The statements of masked[start:end], in order."""
    found, at = [], _skip_space(masked, start, end)
    while at < end:
        statement = statement_at(masked, at, end)
        found.append(statement)
        at = _skip_space(masked, statement.end, end)
    return found


def made_whenever_run(masked: str, parts: list[Statement], at: int) -> bool:
    """Whether what stands at offset `at` is evaluated wherever the statements `parts` run: it lies in one of them
    that is simple, or in an if's condition, before any `?`, `&&` or `||` there (not in a branch)."""
    statement = next((s for s in parts if s.start <= at < s.end), None)
    if statement is None or statement.kind not in ("simple", "if"):
        return False
    start, end = (statement.start, statement.end) if statement.kind == "simple" else statement.head
    return start <= at < end and not re.search(r"\?|&&|\|\|", masked[start:at])


def indexed_whenever_run(masked: str, start: int, end: int, array: str) -> bool:
    """Whether masked[start:end] indexes `array` wherever its statements run (made_whenever_run)."""
    parts = statements(masked, start, end)
    return any(made_whenever_run(masked, parts, start + access.start())
               for access in re.finditer(rf"(?<![\w.]){array}\s*\[", masked[start:end]))


def statement_at(masked: str, at: int, end: int) -> Statement:
    char = masked[at]
    if char == "#":
        line_end = at
        while True:
            line_end = masked.find("\n", line_end)
            if line_end == -1 or line_end >= end:
                line_end = end
                break
            if masked[line_end - 1] != "\\":
                break
            line_end += 1
        return Statement("directive", at, line_end)
    if char == ";":
        return Statement("empty", at, at + 1)
    if char == "{":
        close = closing(masked, at)
        return Statement("block", at, close + 1, inner=(at + 1, close))
    control = _CONTROL.match(masked, at)
    if control and (at == 0 or not (masked[at - 1].isalnum() or masked[at - 1] == "_")):
        opening = control.end() - 1
        close = closing(masked, opening)
        body = statement_at(masked, _skip_space(masked, close + 1, end), end)
        kind = control.group(1)
        orelse = None
        if kind == "if":
            following = _WORD_AFTER.match(masked, body.end)
            if following and following.group(1) == "else":
                orelse = statement_at(masked, _skip_space(masked, following.end(), end), end)
        return Statement(kind, at, (orelse or body).end, head=(opening + 1, close), body=body, orelse=orelse)
    if re.match(r"do\b", masked[at:at + 3]):
        body = statement_at(masked, _skip_space(masked, at + 2, end), end)
        following = _WORD_AFTER.match(masked, body.end)
        if not following or following.group(1) != "while":
            raise Unparsed(f"do without while at offset {at}")
        opening = masked.index("(", following.end())
        close = closing(masked, opening)
        semicolon = masked.index(";", close)
        return Statement("do", at, semicolon + 1, head=(opening + 1, close), body=body)
    return Statement("simple", at, simple_end(masked, at, end))


def for_loops(masked: str) -> Iterator[Statement]:
    """Every for statement of the text, nested ones included, in the order they begin; one that cannot be read
    is passed over."""
    for match in re.finditer(r"\bfor\s*\(", masked):
        try:
            yield statement_at(masked, match.start(), len(masked))
        except (Unparsed, ValueError):
            continue


def walk(masked: str, statements_: list[Statement], depth: int = 0) -> Iterator[tuple[Statement, int]]:
    """Every statement, nested ones included, with how many loops (for/while/do) enclose it."""
    for statement in statements_:
        yield statement, depth
        inner = depth + (statement.kind in ("for", "while", "do"))
        yield from walk(masked, statement.children(masked), inner)


def expression_end(masked: str, at: int, end: int, stops: str = ";,") -> int:
    """Where the expression (or declaration) from `at` ends: at the first of `stops` outside brackets, or at the
    bracket that closes one it lies in, or at `end`."""
    depth = 0
    while at < end:
        char = masked[at]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return at
            depth -= 1
        elif char in stops and depth == 0:
            return at
        at += 1
    return at


def simple_end(masked: str, at: int, end: int) -> int:
    """One past the `;` that ends the simple statement starting at `at` (brackets counted)."""
    depth = 0
    for i in range(at, end):
        char = masked[i]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                raise Unparsed(f"unbalanced {char!r} at offset {i}")
        elif char == ";" and depth == 0:
            return i + 1
    raise Unparsed(f"a statement at offset {at} has no closing ;")


def _skip_space(masked: str, at: int, end: int) -> int:
    while at < end and masked[at].isspace():
        at += 1
    return at
