"""Loops over a few constant values read unrolled (services/generator/rules/unrolled.py): a 1D window or a row
pass of a separable blur then reads as a stencil, whose neighbours vectorize takes into registers; loops the
copies could not stand for stay. The emulation (test_rules_stencil_vectors.py: window_loop, box_rows) and the GPU
(tests/gpu/test_rules_shapes_verified.py) check the rewrites."""
import pytest

from services.generator.rules.canonical import canonical
from services.generator.rules.shapes import reading
from services.generator.rules.unrolled import unrolled_form
from tests.unit.rules_variants import ONE_D, edited

WINDOW = ONE_D["window_loop"]


def squeezed(text: str) -> str:
    return " ".join(text.split())


def test_a_loop_over_constant_offsets_is_read_unrolled():
    read = reading(WINDOW)
    assert squeezed("s += in[i + (-3)]; s += in[i + (-2)]; s += in[i + (-1)]; s += in[i + (0)]; s += in[i + (1)]; "
                    "s += in[i + (2)]; s += in[i + (3)];") in squeezed(read.source)


def test_copies_that_declare_keep_their_declarations_in_blocks():
    declaring = edited(WINDOW, "s += in[i + k];", "{ const float v = in[i + k]; s += v * v; }")
    assert "{ const float v = in[i + (-3)]; s += v * v; } { const float v" in \
        squeezed(unrolled_form(canonical(declaring)).source)


@pytest.mark.parametrize("loop", [
    "for (int k = -R; k <= n; ++k) s += in[i + k];",  # a bound of a parameter
    "for (int k = 0; k < 17; ++k) s += in[i + k];",  # more copies than are worth it
    "for (int k = -R; k <= R; ++k) { if (in[i + k] < 0) break; s += in[i + k]; }",  # a jump
    "for (int k = -R; k <= R; ++k) { s += in[i + k]; k += 0; }",  # the variable changed
    "for (int k = -R; k <= R; k += 2) s += in[i + k];",  # another step
    "for (short k = -R; k <= R; ++k) s += in[i + k];",  # a narrow variable
])
def test_a_loop_the_copies_could_not_stand_for_stays(loop):
    kept = edited(WINDOW, "for (int k = -R; k <= R; ++k) s += in[i + k];", loop)
    assert unrolled_form(canonical(kept)) is None
