"""kforge's own kernels and the verifier's trial cache on a real GPU: the device generator gives numpy's
bits for every dtype, the device comparison finds what numpy finds, and trials beyond the cache's budget
are evicted oldest first and made again, identical, when asked for."""
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.verifier.compare import POISON
from services.verifier.session import TrialRun, VerifierSession
from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.own_kernels import OwnKernels
from shared.adapters.inputs import SPECIAL_STRIDE, distribution, draw, special_values, stream_key
from shared.domain.dtypes import as_numbers, host_dtype, is_float, kind
from shared.domain.spec import DEFAULT_RANGES, DTYPES, KernelSpec
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu
N = 3 * (1 << 20) + 17  # more elements than the kernels' threads, so every thread loops; not a multiple of anything


@pytest.fixture(scope="module")
def session():
    session = VerifierSession(0, cache_bytes=0)
    yield session
    session.stream.sync()


@pytest.fixture(scope="module")
def own(session):
    return OwnKernels(session)


def read(session, buffer, dtype, count) -> np.ndarray:
    return session.download(np.empty(count, dtype), buffer)


def default(dtype: str):
    """The distribution of an input without a range."""
    return distribution(dtype, *DEFAULT_RANGES[kind(dtype)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_device_draws_numpys_bits_for_every_dtype(session, own, dtype):
    key = stream_key(12345, 2)
    held = host_dtype(dtype)  # a bfloat16's bits as uint16
    buffer = session.allocate(N * held.itemsize, keep=False)
    own.generate(int(buffer.handle), N, key, default(dtype), np.zeros(0, held))
    expected = draw(default(dtype), key, 0, N)
    got = read(session, buffer, held, N)
    assert got.tobytes() == expected.tobytes(), f"first difference at {np.flatnonzero(got != expected)[:5]}"
    if is_float(dtype):  # and the specials, at the same places as make_array puts them
        arg = KernelSpec.model_validate({
            "kernel_name": "k", "source": 'extern "C" __global__ void k(float *x) {}', "sizes": {"n": N},
            "args": [{"name": "y", "dtype": dtype, "shape": ["n"], "role": "out"},
                     {"name": "x", "dtype": dtype, "shape": ["n"], "specials": ["nan", "-inf", "denormal", "-zero"]}],
        }).args[1]
        own.generate(int(buffer.handle), N, key, default(dtype), special_values(arg))
        expected[::SPECIAL_STRIDE] = np.resize(special_values(arg), expected[::SPECIAL_STRIDE].size)
        assert read(session, buffer, held, N).tobytes() == expected.tobytes()
    buffer.close(session.stream)


# Per dtype, a range and whether sorted: narrow and wide, negative, ranges where rounding reaches high (float16
# holds 2 values in [1000, 1001), bfloat16 one), 64-bit spans that take the 128-bit product, and sorted spans
# below and above the element count.
RANGED = [(dtype, low, high, sorted_) for dtype, low, high in [
    ("float16", 1000, 1001), ("float16", -0.3, 60000), ("bfloat16", 1000, 1001), ("bfloat16", -0.3, 60000),
    ("bfloat16", -1e30, 1e-30), ("float32", 0.5, 3.25), ("float32", -1e30, 1e-30),
    ("float64", -1e-3, 5.0), ("float64", 0, 1e18), ("int8", -128, 128), ("int16", -7, 3), ("int32", 0, 1000003),
    ("int64", -2 ** 63, 2 ** 63 - 1), ("int64", 0, 1 << 40), ("uint8", 250, 256), ("uint16", 0, 65536),
    ("uint32", 1, 2 ** 32), ("uint64", 0, 2 ** 64 - 1), ("uint64", 2 ** 63, 2 ** 63 + 5)] for sorted_ in (False, True)]


@pytest.mark.parametrize("dtype, low, high, sorted_", RANGED)
def test_the_device_draws_numpys_bits_in_a_range_sorted_or_not(session, own, dtype, low, high, sorted_):
    how = distribution(dtype, low, high, N if sorted_ else 0)
    key = stream_key(777, 3)
    held = host_dtype(dtype)
    buffer = session.allocate(N * held.itemsize, keep=False)
    own.generate(int(buffer.handle), N, key, how, np.zeros(0, held))
    got, expected = read(session, buffer, held, N), draw(how, key, 0, N)
    assert got.tobytes() == expected.tobytes(), f"first difference at {np.flatnonzero(got != expected)[:5]}"
    values = as_numbers(got, dtype)
    assert (values.astype(object) >= low).all() and (values.astype(object) < high).all()
    if sorted_:
        assert (values[1:] >= values[:-1]).all()
    buffer.close(session.stream)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint8"])
def test_the_device_comparison_finds_what_numpy_finds(session, own, dtype):
    rng = np.random.default_rng(1)
    ref = draw(default(dtype), stream_key(1, 0), 0, N)
    out = ref.copy()
    changed = np.sort(rng.choice(N, 50, replace=False))
    out[changed[:20]] += np.array(1, dtype)  # beyond tolerance
    out.view(np.uint8).reshape(N, -1)[changed[20:30]] = POISON  # unwritten (NaN or the maximum)
    if dtype.startswith("float"):
        out[changed[30:40]] = np.inf  # not finite where the reference is
        out[changed[40]] = ref[changed[40]] * np.array(1 + 1e-3, dtype)  # within a loose tolerance
        ref[changed[45]] = out[changed[45]] = np.nan  # NaN against NaN: a match
    buffers = [session.upload(a, keep=False) for a in (out, ref)]
    found = own.compare(int(buffers[0].handle), int(buffers[1].handle), N, dtype, 1e-2, 1e-2)
    o, r = out.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        special = ~np.isfinite(o) | ~np.isfinite(r)
        bad = np.where(special, ~((np.isnan(o) & np.isnan(r)) | (np.isinf(o) & (o == r))),
                       np.abs(o - r) > 1e-2 + 1e-2 * np.abs(r))
        error = np.where(special, 0, np.abs(o - r))
        poisoned = (np.all(out.view(np.uint8).reshape(N, -1) == POISON, axis=1)
                    & ~np.all(ref.view(np.uint8).reshape(N, -1) == POISON, axis=1))  # -1 in a reference is written
    assert (found.beyond_tolerance.count, found.beyond_tolerance.first) == (bad.sum(), np.flatnonzero(bad)[0])
    assert (found.unwritten.count, found.unwritten.first) == (poisoned.sum(), np.flatnonzero(poisoned)[0])
    not_finite = ~np.isfinite(o) & np.isfinite(r)
    assert found.not_finite.count == not_finite.sum()
    assert found.max_abs == error.max()
    for buffer in buffers:
        buffer.close(session.stream)


def test_trials_beyond_the_budget_are_evicted_oldest_first_and_made_again_alike():
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").with_sizes({"n": 1 << 20})
    params = spec.baseline_params()
    kernel = compile_kernel(spec.source, spec.kernel_name, params, [], "sm_90")
    good = Path(__file__).resolve().parents[1] / "corpus" / "vector_add" / "good_grid_stride.cu"
    candidate = compile_kernel(good.read_text(), spec.kernel_name, params, [], "sm_90")
    per_trial = 3 * ((1 << 22) + 2 * spec.verify.guard_bytes)  # a and b pristine, c's reference
    session = VerifierSession(0, cache_bytes=2 * per_trial)
    trials = [TrialRun(spec, seed, kernel, params) for seed in (1, 2, 3)]
    for trial in trials:
        assert isinstance(session.reference(trial), float)
        assert session.candidate(TrialRun(spec, trial.seed, candidate, params)).passed
    assert session.cache.keys() == [trials[1].reference_key, trials[2].reference_key]
    assert session.cache.total_bytes == 2 * per_trial
    kept = session.cache.get(trials[2].reference_key)
    session.reference(trials[2])  # cached: nothing made again
    assert session.cache.get(trials[2].reference_key) is kept
    session.reference(trials[0])  # evicted: made again, pushing out the oldest
    assert session.cache.keys() == [trials[2].reference_key, trials[0].reference_key]
    assert session.candidate(TrialRun(spec, 1, candidate, params)).passed


def test_the_l2_eviction_reads_its_buffer_and_writes_nothing(session, own):
    """evict_l2 flushes by reading (a memset would leave L2 dirty, and the timed launch would write it back): the
    buffer, and the stats buffer its kernel is handed but never writes, come out as they went in."""
    data = np.random.default_rng(2).integers(0, 256, 3 * (1 << 20) + 48, dtype=np.uint8)
    buffer = session.upload(data, keep=False)
    stats_before = session.download(np.empty(8, np.uint64), own._stats)
    own.evict_l2(buffer)
    session.stream.sync()
    assert np.array_equal(read(session, buffer, np.uint8, data.size), data)
    assert np.array_equal(session.download(np.empty(8, np.uint64), own._stats), stats_before)
    buffer.close(session.stream)
