"""elements_per_thread on a 2D or 3D kernel of points whose slowest index no guard bounds (a batch or a row the grid
covers exactly, `c[b * n + i]` for b = blockIdx.y): a march along it would reach past the rows, so the thread marches
along x, which the guard bounds, its points a block width apart as in 1D; with vectorize, that many vectors a
block apart (services/generator/rules/marching.py, march_axis).

Each rewrite runs on the CPU (g++, every thread of the launch in turn, AddressSanitizer stopping any access past an
array's ends) leaving every array bit for bit as the submitted kernel does, at sizes no block or vector divides,
aligned and not. The GPU verifies them too (tests/gpu/test_rules_shapes_verified.py).
"""
import itertools

import pytest

from services.generator import rules
from services.generator.rules.cuda_text import normalised
from tests.unit.rules_variants import (BAND_SCALE, BATCH_ALONG_Z, BIAS_RELU_NCHW, NOT_OF_SHAPE,
                                       SCALE_ROWS_BY_BLOCK_INDEX, UNGUARDED_ROWS)
from tests.unit.test_rules_vectorize16 import needs_gxx
from tests.unit.test_rules_window import build, run

KERNELS = {"unguarded_rows": UNGUARDED_ROWS, "band": BAND_SCALE, "batch_along_z": BATCH_ALONG_Z,
           "bias_relu_nchw": BIAS_RELU_NCHW, "rows_by_block_index": SCALE_ROWS_BY_BLOCK_INDEX,
           # a grid-stride loop over x, its class from blockIdx.y: read as one point per thread (grid_stride.py)
           "classes": NOT_OF_SHAPE["conditional stores of a grid-stride loop shared by blocks along y"][1]}
SIZES = {"unguarded_rows": [{"w": 45, "h": 8}, {"w": 64, "h": 16}],  # rows a whole number of blocks, as it needs
         "band": [{"w": 45, "h": 9, "band": 6}, {"w": 64, "h": 5, "band": 4}],
         "batch_along_z": [{"n": 203, "batches": 3}, {"n": 64, "batches": 2}],
         "bias_relu_nchw": [{"N": 2, "C": 3, "HW": 203}, {"N": 1, "C": 2, "HW": 64}],
         "rows_by_block_index": [{"h": 3, "w": 203}, {"h": 2, "w": 64}],
         "classes": [{"n": 203, "k": 3}, {"n": 64, "k": 2}]}
ORDERS = {"marched": ("elements_per_thread",), "vectors": ("elements_per_thread", "vectorize"),
          "vectors_first": ("vectorize", "elements_per_thread")}


def applied(spec_, order):
    current = spec_.as_candidate()
    for rule in order:
        current = rules.apply(rule, spec_, current)
    return current


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_march_goes_along_x_where_no_guard_bounds_the_slowest_index(name):
    candidate = applied(KERNELS[name], ORDERS["marched"])
    assert candidate.grid_div_x == [KERNELS[name].block_size_names[0], "elements_per_thread"]
    assert "points along x, a block width apart" in candidate.source


@needs_gxx
@pytest.mark.parametrize("name, order", list(itertools.product(KERNELS, ORDERS)))
def test_each_point_is_computed_as_the_submitted_kernel_computes_it(tmp_path, name, order):
    spec_ = KERNELS[name]
    if "vectorize" in ORDERS[order] and rules.check("vectorize", spec_, spec_.as_candidate()) is not None:
        pytest.skip("vectorize refuses it")  # classes: it writes x under a condition its guard does not bound
    candidate = applied(spec_, ORDERS[order])
    for sizes, shift in itertools.product(SIZES[name], (0, 1)):
        at_size = spec_.with_sizes(sizes)
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base, shift)
        for ept, block in itertools.product([1, 2, 4], (16, 32)):
            params = {**base, **candidate.params, spec_.block_size_names[0]: block, "elements_per_thread": ept}
            defines = {k: v for k, v in params.items() if k not in spec_.block_size_names}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, defines)
            assert run(library, at_size.for_candidate(candidate), params, shift) == expected, (sizes, shift, params)
