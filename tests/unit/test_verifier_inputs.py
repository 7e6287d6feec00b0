"""The counter-based input generator on the host (its device twin is checked bit for bit in
tests/gpu/test_verifier_device.py), and kforge's own kernels compiling through the sandbox."""
import numpy as np
import pytest

from shared.adapters.device.own_kernels import compile_module, module_source
from shared.adapters.inputs import SPECIAL_STRIDE, distribution, draw, make_arrays, stream_key
from shared.domain.dtypes import as_numbers, host_dtype, kind
from shared.domain.spec import DTYPES, KernelSpec

RANGES = {"f": (-1, 1), "i": (-100, 100), "u": (0, 100)}  # [low, high)


def default(dtype):
    """The distribution of an input without a range."""
    return distribution(dtype, *RANGES[kind(dtype)])


def spec_with(dtype: str, n: int = 1000, specials=(), **values) -> KernelSpec:
    """`values`: the input's range and sorted, as a spec gives them."""
    source = 'extern "C" __global__ void k(float *out, const float *x) {{}}'
    return KernelSpec.model_validate({
        "kernel_name": "k", "source": source, "sizes": {"n": n},
        "args": [{"name": "out", "dtype": dtype, "shape": ["n"], "role": "out"},
                 {"name": "x", "dtype": dtype, "shape": ["n"], "specials": list(specials), **values}]})


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_draws_its_range_and_covers_it(dtype):
    drawn = draw(default(dtype), stream_key(7, 1), 0, 200_000)
    values = as_numbers(drawn, dtype)  # a bfloat16's bits as its float32 value
    low, high = RANGES[kind(dtype)]
    assert drawn.dtype == host_dtype(dtype) and values.min() >= low and values.max() < high
    if kind(dtype) == "f":
        assert values.min() < -0.99 and values.max() > 0.99 and abs(float(values.astype(np.float64).mean())) < 0.01
    else:
        assert np.array_equal(np.unique(values), np.arange(low, high))  # every integer of the range comes up
        assert abs(float(values.astype(np.float64).mean()) - (low + high - 1) / 2) < 0.01 * (high - low)


def test_values_depend_on_seed_position_and_index_only():
    key = stream_key(5, 2)
    whole = draw(default(np.float32), key, 0, 10_000)
    pieces = np.concatenate([draw(default(np.float32), key, start, count)
                             for start, count in ((0, 1), (1, 4094), (4095, 5000), (9095, 905))])
    assert np.array_equal(whole.view(np.uint32), pieces.view(np.uint32))  # however the work is split
    assert np.array_equal(whole, draw(default(np.float32), stream_key(5, 2), 0, 10_000))
    assert not np.array_equal(whole, draw(default(np.float32), stream_key(6, 2), 0, 10_000))
    assert not np.array_equal(whole, draw(default(np.float32), stream_key(5, 3), 0, 10_000))
    # Pinned: the device computes exactly these bits, so a change here must change both.
    assert stream_key(1, 0) == 0x9E0160293A33AAF7
    assert draw(default(np.float32), stream_key(1, 1), 0, 3).tolist() == [-0.19606709480285645, 0.5645439624786377,
                                                                             -0.7308920621871948]


def test_chunked_arrays_equal_one_draw(monkeypatch):
    import shared.adapters.inputs

    spec = spec_with("float64", n=1000)
    monkeypatch.setattr(shared.adapters.inputs, "CHUNK", 64)  # 16 chunks, on several threads
    chunked = make_arrays(spec, 3)["x"]
    assert np.array_equal(chunked, draw(default(np.float64), stream_key(3, 1), 0, 1000))


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


# --- range and sorted ----------------------------------------------------------------------------------
RANGED = [("int32", [0, "n"]), ("int8", [-128, 128]), ("uint8", [250, 256]), ("int64", [-2 ** 63, 2 ** 63 - 1]),
          ("uint64", [0, 2 ** 64 - 1]), ("uint16", ["n // 4", "n // 2"]), ("float32", [0.5, "n"]),
          ("float16", [-3, 0.25]), ("float64", [-1e18, 1e18])]


@pytest.mark.parametrize("dtype, bounds", RANGED)
def test_a_range_holds_every_value_low_included_high_left_out(dtype, bounds):
    spec = spec_with(dtype, n=20_000, range=bounds)
    low, high = spec.value_range(spec.args[1])
    x = make_arrays(spec, 4)["x"]
    assert x.dtype == dtype and x.shape == (20_000,)
    integers = np.dtype(dtype).kind != "f"
    assert (x.astype(object) >= low).all() and (x.astype(object) < high).all()  # exact, also for 64-bit integers
    if integers and high - low <= 10:
        assert sorted(set(x.tolist())) == list(range(low, high))  # every integer of a small range comes up
    spread = (x.astype(np.float64) - low) / (float(high) - float(low) - integers)  # 0 at low, 1 at the last value
    assert 0.45 < float(spread.mean()) < 0.55 and float(spread.max()) > 0.99  # spread over it, not piled up


def test_rounding_to_the_dtype_never_reaches_high():
    # float16 holds only 1000 and 1000.5 in [1000, 1001): draws that round up to 1001 are taken back below it.
    x = make_arrays(spec_with("float16", n=5000, range=[1000, 1001]), 2)["x"]
    assert set(x.tolist()) == {1000.0, 1000.5}


@pytest.mark.parametrize("dtype, bounds, n", [("int32", [0, "n + 1"], 100_000), ("int32", [5, 9], 100_000),
                                               ("uint64", [0, 2 ** 64 - 1], 50_000), ("int16", [-7, 3], 11),
                                               ("float32", [-1, 1], 100_000), ("float16", [0, 1], 70_000),
                                               ("float64", [1e-3, 1e9], 1000)])
def test_sorted_values_never_decrease_and_stay_in_range(dtype, bounds, n):
    spec = spec_with(dtype, n=n, range=bounds, sorted=True)
    low, high = spec.value_range(spec.args[1])
    x = make_arrays(spec, 9)["x"]
    assert (x[1:] >= x[:-1]).all()
    assert x.astype(object).min() >= low and (x.astype(object) < high).all()
    assert float(x[-1]) - float(x[0]) > 0.9 * (float(high) - float(low)) - 1  # the whole range, first to last


def test_sorted_values_are_the_same_however_the_array_is_chunked(monkeypatch):
    import shared.adapters.inputs

    spec = spec_with("int32", n=10_000, range=[0, "3 * n"], sorted=True)
    whole = make_arrays(spec, 5)["x"]
    monkeypatch.setattr(shared.adapters.inputs, "CHUNK", 64)
    assert np.array_equal(make_arrays(spec, 5)["x"], whole)
    assert np.array_equal(make_arrays(spec, 5)["x"], whole)  # deterministic
    assert not np.array_equal(make_arrays(spec, 6)["x"], whole)  # and the seed's


def test_a_range_follows_the_trials_sizes():
    spec = spec_with("int32", n=1000, range=[0, "n"])
    odd = spec.with_sizes({"n": 997})
    assert odd.value_range(odd.args[1]) == (0, 997)
    x = make_arrays(odd, 1)["x"]
    assert x.shape == (997,) and x.max() == 996


def test_the_wide_integer_product_is_exact():
    from shared.adapters.inputs import _high_product

    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2 ** 64, 10_000, dtype=np.uint64, endpoint=False)
    for factor in (2 ** 32 + 1, 2 ** 63 + 12345, 2 ** 64 - 1):
        expected = [(int(b) * factor) >> 64 for b in bits]
        assert _high_product(bits, factor).tolist() == expected
