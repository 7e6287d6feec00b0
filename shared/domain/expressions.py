"""Safe, bounded arithmetic over problem-size variables and tunable parameters.

Spec fields such as an argument's shape (`[n, m]`), a scalar's value (`n`) or a grid divisor
(`block_size_x * tile_x`) are expressions, and restrictions compare them. They arrive over HTTP and are
evaluated in the gateway and in every worker, so they are parsed with `ast` (never `eval` on user text)
and bounded before and while they run: Python's integers grow without limit, and one `9 ** 9 ** 9` holds
the GIL for minutes. The text, the syntax tree and every intermediate value have a ceiling; a power whose
result would pass it is refused before it is computed.
"""
import ast
import math
import operator
from collections.abc import Mapping
from functools import lru_cache

Number = int | float

MAX_LENGTH = 1000  # characters of one expression
MAX_NODES = 500  # syntax-tree nodes, operators included
MAX_DEPTH = 50  # nesting; also keeps the recursive evaluator far from Python's recursion limit
MAX_MAGNITUDE = 2 ** 64  # of every constant, variable and intermediate value: sizes and byte counts fit

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "int": int}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
# Operator tokens appear as nodes of their own in ast.walk; these are the harmless ones.
_RESTRICTION_TOKENS = (ast.Load, ast.And, ast.Or, ast.Not, *_COMPARE, *_BINARY, *_UNARY)


class ExpressionError(ValueError):
    """An expression that is not plain arithmetic, names something unknown, or passes a bound."""


def names_in(expression: str | Number) -> set[str]:
    """The variable names an expression refers to (functions excluded)."""
    if not isinstance(expression, str):
        return set()
    tree = _parse(expression)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCTIONS}


def evaluate(expression: str | Number, variables: Mapping[str, object]) -> Number:
    """Evaluate `expression` with `variables`; a bare number is checked and returned as it is."""
    if isinstance(expression, bool):
        raise ExpressionError(f"{expression!r} is a boolean, not a number")
    if isinstance(expression, int | float):
        return _bounded(str(expression), expression)
    return _Evaluation(expression, variables).number(_parse(expression).body)


def check_restriction(restriction: str) -> str:
    """A restriction (Kernel Tuner's: `block_size_x * block_size_y <= 1024`) must be comparisons of arithmetic,
    joined by and/or/not. Kernel Tuner compiles restrictions as Python, so anything else, which could run
    code on a benchmark worker, is refused here, where it arrives."""
    for node in ast.walk(_parse(restriction).body):
        if not _restriction_node(node):
            raise ExpressionError(f"{_quoted(restriction)} is not a restriction Kernel Tuner may run: compare "
                                  "arithmetic of tune parameters and sizes with == != < <= > >=, joined by and, or, not")
    return restriction


def restriction_holds(restriction: str, variables: Mapping[str, object]) -> bool:
    """Whether a configuration (with the sizes) meets a restriction, evaluated under the same bounds as every
    expression. Tune parameters with text values may be compared with == and !=, never computed with."""
    return _Evaluation(restriction, variables).truth(_parse(check_restriction(restriction)).body)


def _restriction_node(node: ast.AST) -> bool:
    match node:
        case ast.Compare(ops=ops):
            return all(type(op) in _COMPARE for op in ops)
        case ast.BoolOp() | ast.Name():
            return True
        case ast.UnaryOp(op=op):
            return isinstance(op, (ast.Not, *_UNARY))
        case ast.BinOp(op=op):
            return type(op) in _BINARY
        case ast.Constant(value=value):
            return isinstance(value, int | float) and not isinstance(value, bool)
        case ast.Call(func=ast.Name(id=name), keywords=[]):
            return name in _FUNCTIONS
    return isinstance(node, _RESTRICTION_TOKENS)


@lru_cache(maxsize=4096)  # workers evaluate the same few expressions for every configuration
def _parse(expression: str) -> ast.Expression:
    if len(expression) > MAX_LENGTH:
        raise ExpressionError(f"{_quoted(expression)} has {len(expression):,} characters; an expression may have "
                              f"at most {MAX_LENGTH}: write it shorter")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{_quoted(expression)} is not a valid expression ({exc.msg})") from None
    except (RecursionError, MemoryError):  # the parser's own stack, on deeply nested text
        raise ExpressionError(f"{_quoted(expression)} is nested too deeply to parse: simplify it") from None
    nodes, deepest, stack = 0, 0, [(tree.body, 1)]
    while stack:  # iterative: a deep tree must not overflow the stack that measures it
        node, depth = stack.pop()
        nodes, deepest = nodes + 1, max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    if nodes > MAX_NODES:
        raise ExpressionError(f"{_quoted(expression)} has {nodes} terms and operators; an expression may have at "
                              f"most {MAX_NODES}: simplify it")
    if deepest > MAX_DEPTH:
        raise ExpressionError(f"{_quoted(expression)} is nested {deepest} levels deep; an expression may nest at "
                              f"most {MAX_DEPTH}: simplify it")
    return tree


class _Evaluation:
    """One evaluation of one expression: every step's result is checked before the next step uses it."""

    def __init__(self, text: str, variables: Mapping[str, object]):
        self.text, self.variables = text, variables

    def number(self, node: ast.AST) -> Number:
        match node:
            case ast.Constant(value=int() | float() as value) if not isinstance(value, bool):
                return _bounded(self.text, value)
            case ast.Name(id=name):
                value = self._variable(name)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ExpressionError(f"{_quoted(self.text)}: {name} is {value!r}, not a number, so it cannot "
                                          "be computed with (compare it with == or != only)")
                return _bounded(self.text, value)
            case ast.BinOp(op=op, left=left, right=right) if type(op) in _BINARY:
                a, b = self.number(left), self.number(right)
                if isinstance(op, ast.Pow):
                    self._check_power(a, b)
                return self._step(lambda: _BINARY[type(op)](a, b))
            case ast.UnaryOp(op=op, operand=operand) if type(op) in _UNARY:
                value = self.number(operand)
                return self._step(lambda: _UNARY[type(op)](value))
            case ast.Call(func=ast.Name(id=name), args=args, keywords=[]) if name in _FUNCTIONS:
                values = [self.number(a) for a in args]
                return self._step(lambda: _FUNCTIONS[name](*values))
        raise ExpressionError(f"{_quoted(self.text)} is not plain arithmetic: use numbers, names, + - * / // % ** "
                              f"and {', '.join(_FUNCTIONS)}()")

    def truth(self, node: ast.AST) -> bool:
        match node:
            case ast.BoolOp(op=ast.And(), values=values):
                return all(self.truth(v) for v in values)
            case ast.BoolOp(op=ast.Or(), values=values):
                return any(self.truth(v) for v in values)
            case ast.UnaryOp(op=ast.Not(), operand=operand):
                return not self.truth(operand)
            case ast.Compare(left=left, ops=ops, comparators=comparators):
                values = [self._operand(left), *(self._operand(c) for c in comparators)]
                return all(self._step(lambda: _COMPARE[type(op)](a, b), result=bool)
                           for op, a, b in zip(ops, values, values[1:]))
        return bool(self.number(node))

    def _operand(self, node: ast.AST) -> object:
        """What a comparison compares: a number, or the text value of a tune parameter named alone."""
        if isinstance(node, ast.Name) and isinstance(value := self._variable(node.id), str):
            return value
        return self.number(node)

    def _variable(self, name: str) -> object:
        if name not in self.variables:
            known = ", ".join(sorted(self.variables)) or "none"
            raise ExpressionError(f"{_quoted(self.text)} uses {name!r}, which is not defined (known names: {known})")
        return self.variables[name]

    def _check_power(self, base: Number, exponent: Number) -> None:
        """Refuse a power whose result would pass MAX_MAGNITUDE before computing it: its size is known from
        the logarithms, while computing it may take minutes."""
        if base == 0 or abs(base) == 1:
            return
        if exponent * math.log2(abs(base)) > math.log2(MAX_MAGNITUDE):
            raise ExpressionError(f"{_quoted(self.text)} raises {base} to the power {exponent}, past 2**64; values "
                                  "in expressions are limited to 2**64: check the expression")

    def _step(self, compute, result: type = Number):
        """Run one step; its failures become ExpressionErrors that quote the expression."""
        try:
            value = compute()
        except ZeroDivisionError:
            raise ExpressionError(f"{_quoted(self.text)} divides by zero") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise ExpressionError(f"{_quoted(self.text)} cannot be evaluated: {exc}") from None
        if result is bool:
            return bool(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ExpressionError(f"{_quoted(self.text)} is not a real number")
        return _bounded(self.text, value)


def _bounded(text: str, value: Number) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"{_quoted(text)} gives {value}, not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(f"{_quoted(text)} reaches a value past 2**64; values in expressions are limited to "
                              "2**64: check the expression")
    return value


def _quoted(text: str) -> str:
    """The expression as error messages quote it: whole when short, else its start and its length."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text):,} characters)"
