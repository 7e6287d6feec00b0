"""Safe arithmetic for spec fields: what is evaluated, what is refused, and how the refusal reads."""
import math
import time

import pytest

from shared.domain.expressions import (MAX_MAGNITUDE, ExpressionError, check_restriction, evaluate, names_in,
                                       restriction_holds)


@pytest.mark.parametrize("expression, variables, expected", [
    ("1 + 2 * 3", {}, 7),
    ("(1 + 2) * 3", {}, 9),
    ("n - 1", {"n": 10}, 9),
    ("n / 4", {"n": 10}, 2.5),
    ("n // 4", {"n": 10}, 2),
    ("n % 4", {"n": 10}, 2),
    ("2 ** k", {"k": 10}, 1024),
    ("-n + +m", {"n": 3, "m": 5}, 2),
    ("n * m", {"n": 3, "m": 0.5}, 1.5),
    ("  n  ", {"n": 8}, 8),
    ("block_size_x * tile_x", {"block_size_x": 32, "tile_x": 4}, 128),
])
def test_arithmetic(expression, variables, expected):
    assert evaluate(expression, variables) == expected


@pytest.mark.parametrize("expression, expected", [
    ("min(n, 100)", 100),
    ("max(n, 100)", 4096),
    ("min(n, m, 7)", 7),
    ("ceil(n / 1000)", math.ceil(4096 / 1000)),
    ("floor(n / 1000)", 4),
    ("int(n / 3)", 1365),
    ("ceil(n / max(m, 1)) * 2", 2 * math.ceil(4096 / 9)),
])
def test_functions(expression, expected):
    assert evaluate(expression, {"n": 4096, "m": 9}) == expected


def test_numbers_pass_through_and_booleans_are_refused():
    assert evaluate(5, {}) == 5
    assert evaluate(2.5, {}) == 2.5
    with pytest.raises(ExpressionError, match="boolean"):
        evaluate(True, {})
    with pytest.raises(ExpressionError, match="not plain arithmetic"):
        evaluate("True", {})


def test_unknown_name_lists_the_known_names():
    with pytest.raises(ExpressionError) as info:
        evaluate("n * tile", {"n": 1, "block_size_x": 2})

    message = str(info.value)
    assert "'tile'" in message
    assert "not defined" in message
    assert "known names: block_size_x, n" in message


def test_unknown_name_with_nothing_known():
    with pytest.raises(ExpressionError, match=r"known names: none"):
        evaluate("n", {})


@pytest.mark.parametrize("expression", [
    "__import__('os')",
    "__import__('os').system('true')",
    "n.real",
    "n.__class__",
    "(lambda: 1)()",
    "lambda: 1",
    "open('/etc/passwd')",
    "abs(n)",
    "[n, n]",
    "n if n else 1",
    "n < 2",
    "'text'",
    "min(n, key=abs)",
    "x[0]",
])
def test_anything_but_arithmetic_is_refused(expression):
    with pytest.raises(ExpressionError) as info:
        evaluate(expression, {"n": 4, "x": 1})
    message = str(info.value)
    assert "not plain arithmetic" in message
    assert "min, max, ceil, floor, int" in message  # says what is allowed


def test_syntax_error_is_an_expression_error():
    with pytest.raises(ExpressionError, match=r"'n \+' is not a valid expression"):
        evaluate("n +", {"n": 1})
    with pytest.raises(ExpressionError, match="not a valid expression"):
        names_in("import os")


@pytest.mark.parametrize("expression", ["n / 0", "n // (m - m)", "n % 0", "ceil(1 / (n - 4))"])
def test_division_by_zero(expression):
    with pytest.raises(ExpressionError) as info:
        evaluate(expression, {"n": 4, "m": 2})
    assert str(info.value) == f"{expression!r} divides by zero"


def test_names_in():
    assert names_in("n * m + ceil(k / block_size_x)") == {"n", "m", "k", "block_size_x"}
    assert names_in("min(1, 2)") == set()
    assert names_in(42) == set()
    assert names_in(1.5) == set()


@pytest.mark.parametrize("expression", ["max(n)", "min()", "ceil(n, 2)"])
def test_wrong_function_arity_is_an_expression_error(expression):
    with pytest.raises(ExpressionError):
        evaluate(expression, {"n": 4})


@pytest.mark.parametrize("restriction", [
    "block_size_x * block_size_y >= 32", "block_size_x * (block_size_y * tile_size_y + 8) * 4 <= 49152",
    "n % block_size_x == 0 and not tile_size_x > 4 or min(a, b) != 3", "-a < 2 ** b"])
def test_restrictions_of_arithmetic_comparisons_pass(restriction):
    assert check_restriction(restriction) == restriction


@pytest.mark.parametrize("restriction", [
    "__import__('os').system('id') == 0", "open('/etc/passwd')", "a.real > 1", "a in [1, 2]", "a is 1",
    "(lambda: 1)() > 0", "'x' * 10 > 'y'", "True", "[a for a in b]", "a if b else c"])
def test_restrictions_that_could_run_code_are_refused(restriction):
    with pytest.raises(ExpressionError, match="not a restriction Kernel Tuner may run"):
        check_restriction(restriction)


def test_a_spec_names_the_restriction_at_fault(vector_add_spec):
    from pydantic import ValidationError

    body = {**vector_add_spec.model_dump(), "tune_params": {"block_size_x": [64, 128]}}
    with pytest.raises(ValidationError, match=r"restrictions\.0"):
        type(vector_add_spec).model_validate({**body, "restrictions": ["__import__('os').getpid() > 0"]})
    with pytest.raises(ValidationError, match=r"restrictions\[0\]: 'tile_x > 2' uses tile_x"):
        type(vector_add_spec).model_validate({**body, "restrictions": ["tile_x > 2"]})


# --- bounds: every intermediate value, the text, the tree --------------------------------------------
@pytest.mark.parametrize("bomb", ["(((9**64)**64)**64)**64", "9 ** 9 ** 9", "(10**64)**64", "2 ** 65",
                                  "0.5 ** -65", "(2**40) * (2**40)", "n * n * n", "1e308 * 10", "1e300",
                                  "18446744073709551617", "ceil(2**63 * 4.0)", "-(2**64) - 1"])
def test_every_intermediate_value_is_bounded_and_refused_at_once(bomb):
    started = time.perf_counter()
    with pytest.raises(ExpressionError, match="2\\*\\*64|finite"):
        evaluate(bomb, {"n": 2 ** 30})
    assert time.perf_counter() - started < 0.05


def test_values_up_to_the_bound_evaluate():
    assert evaluate("2 ** 64", {}) == MAX_MAGNITUDE
    assert evaluate("n * 4 + 2 * n ** 2", {"n": 2 ** 30}) == 2 ** 32 + 2 ** 61
    assert evaluate("0.5 ** 10", {}) == 0.5 ** 10
    assert evaluate("(-2) ** 63", {}) == -(2 ** 63)


def test_a_number_given_as_it_is_must_be_within_the_bound():
    with pytest.raises(ExpressionError, match="2\\*\\*64"):
        evaluate(2 ** 65, {})
    with pytest.raises(ExpressionError, match="finite"):
        evaluate(float("inf"), {})


@pytest.mark.parametrize("expression, limit", [
    ("+".join(["n"] * 100_000), "at most 1000"),  # 100k terms: was a RecursionError
    ("-" * 600 + "1", "at most 500"),
    ("(" * 250 + "n" + ")" * 250, "not a valid expression"),  # the parser's own nesting limit
    ("+".join(["n"] * 60), "nest at most 50"),
])
def test_length_nodes_and_depth_are_capped_with_an_expression_error(expression, limit):
    started = time.perf_counter()
    with pytest.raises(ExpressionError, match=limit) as info:
        names_in(expression)
    assert time.perf_counter() - started < 0.5
    assert len(str(info.value)) < 300  # the expression is quoted by its start and length, not in full


def test_restriction_holds_evaluates_comparisons_under_the_bounds():
    variables = {"block_size_x": 256, "n": 4096, "variant": "a", "other": "b"}
    assert restriction_holds("block_size_x <= 512 and n % block_size_x == 0", variables)
    assert not restriction_holds("not block_size_x < 1024 or variant == other", variables)
    assert restriction_holds("32 <= block_size_x <= 1024", variables)
    assert restriction_holds("variant != other", variables)
    with pytest.raises(ExpressionError, match="past 2\\*\\*64"):
        restriction_holds("9 ** 9 ** 9 > block_size_x", variables)
    with pytest.raises(ExpressionError, match="not a number"):
        restriction_holds("variant * 1000000000 == other", variables)  # text is compared, never repeated
    with pytest.raises(ExpressionError, match="not a restriction"):
        restriction_holds("__import__('os') == 1", variables)
