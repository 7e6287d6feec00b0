"""The counter-based input generator on the host (its device twin is checked bit for bit in
tests/gpu/test_verifier_device.py), and kforge's own kernels compiling through the sandbox."""
import numpy as np
import pytest

from shared.device.own_kernels import compile_module, module_source
from shared.inputs import SPECIAL_STRIDE, draw, make_arrays, stream_key
from shared.spec import DTYPES, KernelSpec

RANGES = {"f": (-1, 1), "i": (-100, 100), "u": (0, 100)}  # [low, high)


def spec_with(dtype: str, n: int = 1000, specials=()) -> KernelSpec:
    source = 'extern "C" __global__ void k(float *out, const float *x) {{}}'
    return KernelSpec.model_validate({
        "kernel_name": "k", "source": source, "sizes": {"n": n},
        "args": [{"name": "out", "dtype": dtype, "shape": ["n"], "role": "out"},
                 {"name": "x", "dtype": dtype, "shape": ["n"], "specials": list(specials)}]})


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_draws_its_range_and_covers_it(dtype):
    values = draw(np.dtype(dtype), stream_key(7, 1), 0, 200_000)
    low, high = RANGES[np.dtype(dtype).kind]
    assert values.dtype == dtype and values.min() >= low and values.max() < high
    if np.dtype(dtype).kind == "f":
        assert values.min() < -0.99 and values.max() > 0.99 and abs(float(values.astype(np.float64).mean())) < 0.01
    else:
        assert np.array_equal(np.unique(values), np.arange(low, high))  # every integer of the range comes up
        assert abs(float(values.astype(np.float64).mean()) - (low + high - 1) / 2) < 0.01 * (high - low)


def test_values_depend_on_seed_position_and_index_only():
    key = stream_key(5, 2)
    whole = draw(np.dtype(np.float32), key, 0, 10_000)
    pieces = np.concatenate([draw(np.dtype(np.float32), key, start, count)
                             for start, count in ((0, 1), (1, 4094), (4095, 5000), (9095, 905))])
    assert np.array_equal(whole.view(np.uint32), pieces.view(np.uint32))  # however the work is split
    assert np.array_equal(whole, draw(np.dtype(np.float32), stream_key(5, 2), 0, 10_000))
    assert not np.array_equal(whole, draw(np.dtype(np.float32), stream_key(6, 2), 0, 10_000))
    assert not np.array_equal(whole, draw(np.dtype(np.float32), stream_key(5, 3), 0, 10_000))
    # Pinned: the device computes exactly these bits, so a change here must change both.
    assert stream_key(1, 0) == 0x9E0160293A33AAF7
    assert draw(np.dtype(np.float32), stream_key(1, 1), 0, 3).tolist() == [-0.19606709480285645, 0.5645439624786377,
                                                                             -0.7308920621871948]


def test_chunked_arrays_equal_one_draw(monkeypatch):
    import shared.inputs

    spec = spec_with("float64", n=1000)
    monkeypatch.setattr(shared.inputs, "CHUNK", 64)  # 16 chunks, on several threads
    chunked = make_arrays(spec, 3)["x"]
    assert np.array_equal(chunked, draw(np.dtype(np.float64), stream_key(3, 1), 0, 1000))


def test_float16_and_specials_cycle_every_stride():
    x = make_arrays(spec_with("float16", specials=["nan", "-inf", "denormal"]), 3)["x"]
    assert x.dtype == np.float16 and np.isnan(x[0]) and x[SPECIAL_STRIDE] == -np.inf
    assert x[2 * SPECIAL_STRIDE] == np.finfo(np.float16).smallest_subnormal and np.isnan(x[3 * SPECIAL_STRIDE])
    rest = np.delete(x, np.arange(0, x.size, SPECIAL_STRIDE))
    assert np.isfinite(rest).all() and rest.min() >= -1 and rest.max() < 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_kforges_own_kernels_compile_through_the_sandbox_for_sm_90(dtype):
    compiled = compile_module(dtype, "sm_90")
    assert compiled.lowered_name == "kforge_generate" and compiled.arch == "sm_90" and len(compiled.cubin) > 1000
    source = module_source(dtype)
    assert "0x9e3779b97f4a7c15ull" in source and f"SPECIAL_STRIDE {SPECIAL_STRIDE}ull" in source
