"""What a point body changes besides its arrays' elements (services/generator/rules/points.py: hidden_effects),
which grid_stride, shared_tile and register_window's recorded stores rely on: every declarator of a list is a
local of its own, a comma expression declares nothing, and a reference or pointer declared after the first
declarator is an alias."""
import pytest

from services.generator.rules import points
from services.generator.rules.cuda_text import find_kernel, mask
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


@pytest.mark.parametrize("new", ["(out + y * out_w + x)[1] = sum;", "((float *)out)[y * out_w + x + 1] += 1.0f;",
                                 "++(out + 1)[y * out_w + x];"])
def test_a_write_through_an_indexed_expression_is_seen(new):
    """No access records `(out + i)[0] = v;` (review, helper-102), so grid_stride and shared_tile, which run the
    body elsewhere or in another order, would not know of the write."""
    spec = edited(CONV2D, "out[y * out_w + x] = sum;", f"out[y * out_w + x] = sum;\n        {new}")
    assert "writes through an indexed expression" in (points.hidden_effects(points.recognise(spec)) or "none")


def test_a_read_through_an_indexed_cast_is_no_effect():
    spec = edited(CONV2D, "float sum = 0.0f;",
                  "float sum = ((const float4 *)image)[0].x * 0.0f;")
    assert points.hidden_effects(points.recognise(spec)) is None


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


# --- a parameter a thread's next point would see changed (points.parameter_changed) --------------------------
KERNEL = """
struct Rng { unsigned int seed; };
__device__ void advance(Rng &r) { r.seed = r.seed * 1664525u + 1013904223u; }
__device__ float twice(const float &v) { return 2.0f * v; }
__device__ float first(const float *p) { return p[0]; }
extern "C" __global__ void k(float *out, const float *in, Rng state, float gain, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        BODY
    }
}
"""


VIA = " (through its address or a reference)"


def _changed(body: str) -> str | None:
    source = KERNEL.replace("BODY", body)
    kernel = find_kernel(source, "k")
    masked = mask(source)
    return points.parameter_changed(kernel, masked, kernel.body_open, ["out", "in", "state", "gain", "n"])


@pytest.mark.parametrize("body, changed", [
    ("gain *= 0.5f; out[i] = in[i] * gain;", "changes its parameter gain"),
    ("(gain) += 1.0f; out[i] = gain;", "changes its parameter gain"),
    ("state.seed += 1u; out[i] = (float)state.seed;", "changes its parameter state"),
    ("++state.seed; out[i] = (float)state.seed;", "changes its parameter state"),
    ("float &g = gain; g = in[i]; out[i] = g;", "may change its parameter gain" + VIA),
    ("auto &s{state}; s.seed = 1u; out[i] = in[i];", "may change its parameter state" + VIA),
    ("float *g = &gain; *g = 1.0f; out[i] = in[i];", "may change its parameter gain" + VIA),
    ("advance(state); out[i] = (float)state.seed;", "may change its parameter state" + VIA),
    ("advance((state)); out[i] = in[i];", "may change its parameter state" + VIA),
    # what changes nothing of the parameters: a const reference, an element's address, a pointer argument's data
    ("const float &g = gain; out[i] = in[i] * g;", None),
    ("float const &g = gain; out[i] = twice(g);", None),
    ("out[i] = twice(gain) + first(&in[i]);", None),
    ("Rng mine = state; advance(mine); out[i] = (float)mine.seed;", None),
    ("atomicAdd(&out[i], in[i] * gain);", None),
])
def test_a_parameter_changed_otherwise_than_by_assignment_is_seen(body, changed):
    assert _changed(body) == changed


@pytest.mark.parametrize("helper, bound", [
    ("__device__ float f() { return (float)threadIdx.y; }", "calls f, which uses threadIdx"),
    ("__device__ float g() { return 1.0f; }\n__device__ float f() { return g() + blockDim.x; }", "calls f, which uses blockDim"),
    ('__device__ float g() { unsigned l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); return (float)l; }\n'
     "__device__ float f() { return g(); }", "calls g, which uses asm"),
    ('__device__ float f() { float v; asm("shfl.sync.bfly.b32 %0, %0, 1, 31, -1;" : "+f"(v)); return v; }',
     "calls f, which uses asm"),
    # assembly naming neither the thread nor other threads, and a helper that no body reaches
    ('__device__ float f() { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(1.0f)); return h; }',
     None),
    ("__device__ float f() { return 1.0f; }\n__device__ float unused() { return threadIdx.x; }", None),
])
def test_a_function_the_body_calls_that_reads_the_thread_is_seen(helper, bound):
    source = helper + "\n" + KERNEL.replace("BODY", "out[i] = in[i] * f();")
    assert points.thread_bound_helper(find_kernel(source, "k"), mask(source), mask(source, literals=False)) == bound
