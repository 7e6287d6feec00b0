"""Safe arithmetic over problem-size variables and tunable parameters.

Spec fields such as an argument's shape (`[n, m]`), a scalar's value (`n`) or a grid divisor
(`block_size_x * tile_x`) are expressions. They arrive over HTTP, so they are parsed with `ast` and
only arithmetic on known names is evaluated: never `eval` on user text.
"""
import ast
import math
import operator
from collections.abc import Mapping

Number = int | float

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "int": int}
_MAX_EXPONENT = 64  # sizes are at most 2**64; a bigger power is a typo or an attempt to stall a worker


class ExpressionError(ValueError):
    """An expression that is not plain arithmetic, or that names something unknown."""


def names_in(expression: str | Number) -> set[str]:
    """The variable names an expression refers to (functions excluded)."""
    if not isinstance(expression, str):
        return set()
    tree = _parse(expression)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id not in _FUNCTIONS}


def evaluate(expression: str | Number, variables: Mapping[str, Number]) -> Number:
    """Evaluate `expression` with `variables`; a bare number is returned as it is."""
    if isinstance(expression, bool):
        raise ExpressionError(f"{expression!r} is a boolean, not a number")
    if isinstance(expression, int | float):
        return expression
    return _eval(_parse(expression).body, variables, expression)


_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
# Operator tokens appear as nodes of their own in ast.walk; these are the harmless ones.
_RESTRICTION_TOKENS = (ast.Load, ast.And, ast.Or, ast.Not, *_COMPARISONS, *_BINARY, *_UNARY)


def check_restriction(restriction: str) -> str:
    """A restriction (Kernel Tuner's: `block_size_x * block_size_y <= 1024`) must be comparisons of arithmetic,
    joined by and/or/not. Kernel Tuner compiles restrictions as Python, so anything else, which could run
    code on a benchmark worker, is refused here, where it arrives."""
    for node in ast.walk(_parse(restriction).body):
        if not _restriction_node(node):
            raise ExpressionError(f"{restriction!r} is not a restriction Kernel Tuner may run: compare arithmetic "
                                  "of tune parameters and sizes with == != < <= > >=, joined by and, or, not")
    return restriction


def _restriction_node(node: ast.AST) -> bool:
    match node:
        case ast.Compare(ops=ops):
            return all(isinstance(op, _COMPARISONS) for op in ops)
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


def _parse(expression: str) -> ast.Expression:
    try:
        return ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"{expression!r} is not a valid expression ({exc.msg})") from None


def _eval(node: ast.AST, variables: Mapping[str, Number], text: str) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in variables:
            known = ", ".join(sorted(variables)) or "none"
            raise ExpressionError(f"{text!r} uses {node.id!r}, which is not defined (known names: {known})")
        return variables[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, variables, text), _eval(node.right, variables, text)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ExpressionError(f"{text!r} raises to the power {right}; exponents are limited to {_MAX_EXPONENT}")
        return _real(text, lambda: _BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, variables, text))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and not node.keywords:
        values = [_eval(a, variables, text) for a in node.args]
        return _real(text, lambda: _FUNCTIONS[node.func.id](*values))
    raise ExpressionError(
        f"{text!r} is not plain arithmetic: use numbers, names, + - * / // % ** and {', '.join(_FUNCTIONS)}()"
    )


def _real(text: str, compute) -> Number:
    """Run one arithmetic step; its failures become ExpressionErrors that quote the expression."""
    try:
        result = compute()
    except ZeroDivisionError:
        raise ExpressionError(f"{text!r} divides by zero") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise ExpressionError(f"{text!r} cannot be evaluated: {exc}") from None
    if not isinstance(result, int | float):
        raise ExpressionError(f"{text!r} is not a real number")
    return result
