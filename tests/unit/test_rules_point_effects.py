"""What a point body changes besides its arrays' elements (services/generator/rules/points.py: hidden_effects),
which grid_stride, shared_tile and register_window's recorded stores rely on: every declarator of a list is a
local of its own, a comma expression declares nothing, and a reference or pointer declared after the first
declarator is an alias."""
import pytest

from services.generator.rules import points
from services.generator.rules.cuda_text import mask
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import edited

CONV2D = next(kernel for kernel in corpus() if kernel.name == "conv2d").spec()


@pytest.mark.parametrize("text, names", [
    ("int w = a, h = b;", {"w", "h"}),
    ("for (int i = 0, j = 1; i < 2; i++) {}", {"i", "j"}),
    ("int a[2] = {1, 2}, b = 3;", {"a", "b"}),
    ("bool q = a < b, g = c > d;", {"q", "g"}),
    ("int a = f<1, 2>(x), g;", {"a", "g"}),
    # comma expressions: g is assigned, not declared
    ("float t; t = a * b, g = 1;", {"t", "b"}),
    ("float t = fmaxf(a * b, g = 1.0f);", {"t", "b"}),
    ("t = (int)a * b, g = 1;", {"b"}),
])
def test_every_declarator_of_a_list_is_declared_and_a_comma_expression_declares_nothing(text, names):
    assert points.declared_names(mask(text)) == names


def test_the_second_declarator_of_conv2ds_sizes_is_its_own_local():
    # `int out_w = width - k + 1, out_h = height - k + 1;` changes no name it does not declare
    assert points.hidden_effects(points.recognise(CONV2D)) is None


@pytest.mark.parametrize("old, new, reason", [
    ("float sum = 0.0f;", "float sum = 0.0f;\n        float t = 2.0f, &o = out[y * out_w + x];",
     "declares a pointer, a reference or a static"),
    ("float sum = 0.0f;", "float sum = 0.0f;\n        float t = 2.0f, *o = out + y * out_w + x;",
     "reads or writes through a pointer"),  # `, *o` reads as a dereference first
    ("out[y * out_w + x] = sum;", "out[y * out_w + x] = sum;\n        float t;\n        t = sum * k, g_seen = 1;",
     "changes g_seen, which it does not declare"),
])
def test_what_a_later_declarator_or_a_comma_expression_hides_is_still_seen(old, new, reason):
    spec = edited(edited(CONV2D, 'extern "C"', '__device__ int g_seen;\n\nextern "C"'), old, new)
    assert reason in (points.hidden_effects(points.recognise(spec)) or "none")


@pytest.mark.parametrize("body, once", [
    ("int w = a - b + 1, h = c; out[y * w + x] = s;", True),
    ("int w = a; { int w = x; out[w] = s; }", False),  # shadowed in a block
    ("int w = a; { int w(x); out[w] = s; }", False),  # shadowed by direct initialisation
    ("int w = a; { int w{x}; out[w] = s; }", False),
    ("int w = a; for (int w = 0; w < 4; w++) s += w;", False),
    ("int h = a, w = b; int v = w;", True),
])
def test_declared_once_counts_every_declaration_of_a_name(body, once):
    assert points.declared_once(body, "w") is once
