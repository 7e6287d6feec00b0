"""The compile cache and the parallel compile pool, with real NVRTC (no GPU needed)."""
import itertools
import time

import pytest

from kforge.specfile import load_spec
from services.benchmark.compile_cache import CompileCache
from services.benchmark.compile_pool import CompilePool
from shared.adapters.device import compiler
from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.nvrtc import CompileError
from tests.conftest import EXAMPLES

ARCH = "sm_90"


@pytest.fixture(scope="module")
def matmul():
    return load_spec(EXAMPLES / "matmul.cu", EXAMPLES / "matmul.yaml")


def matmul_configs(spec, count):
    space = itertools.product(*spec.tune_params.values())
    return [dict(zip(spec.tune_params, values)) for values in itertools.islice(space, count)]


def test_cache_misses_then_hits_with_the_same_cubin(tmp_path, matmul):
    cache = CompileCache(tmp_path)
    kernel = compile_kernel(matmul.source, matmul.kernel_name, matmul.params, [], ARCH)
    assert cache.get(kernel.cache_key) is None
    cache.put(kernel)
    again = CompileCache(tmp_path).get(kernel.cache_key)  # a new process sees what another stored
    assert again == kernel
    assert (cache.hits, cache.misses, cache.hit_rate) == (0, 1, 0.0)


def test_a_half_written_entry_is_a_miss_not_an_error(tmp_path, matmul):
    cache = CompileCache(tmp_path)
    kernel = compile_kernel(matmul.source, matmul.kernel_name, matmul.params, [], ARCH)
    cache.put(kernel)
    cubin, meta = cache._paths(kernel.cache_key)
    meta.write_text("{")  # as a crashed writer might leave it
    assert cache.get(kernel.cache_key) is None and cache.misses == 1


def test_the_pool_compiles_every_config_like_a_serial_compile(tmp_path, matmul):
    configs = matmul_configs(matmul, 6)
    with CompilePool(workers=2, cache=CompileCache(tmp_path)) as pool:
        outcomes = list(pool.compile_all(matmul.source, matmul.kernel_name, configs, [], ARCH))
    assert sorted(o.index for o in outcomes) == list(range(6))
    for outcome in outcomes:
        assert outcome.params == configs[outcome.index] and outcome.error is None and not outcome.cache_hit
        serial = compile_kernel(matmul.source, matmul.kernel_name, outcome.params, [], ARCH)
        assert outcome.kernel.cache_key == serial.cache_key and outcome.kernel.cubin == serial.cubin


def test_a_second_request_is_served_from_the_cache(tmp_path, matmul):
    configs = matmul_configs(matmul, 4)
    cache = CompileCache(tmp_path)
    with CompilePool(workers=2, cache=cache) as pool:
        first = list(pool.compile_all(matmul.source, matmul.kernel_name, configs, [], ARCH))
        second = list(pool.compile_all(matmul.source, matmul.kernel_name, configs, [], ARCH))
    assert not any(o.cache_hit for o in first) and all(o.cache_hit for o in second)
    assert {o.index: o.kernel.cubin for o in first} == {o.index: o.kernel.cubin for o in second}
    assert (cache.misses, cache.hits) == (4, 4)


def test_a_config_that_fails_to_compile_is_reported_and_the_rest_compile(tmp_path, matmul):
    # Shared memory scales with the tile: 32 x (32*64) floats is far over the 48 KiB static limit.
    configs = [matmul.params, {**matmul.params, "block_size_y": 32, "tile_size_y": 64}]
    with CompilePool(workers=2) as pool:
        outcomes = {o.index: o for o in pool.compile_all(matmul.source, matmul.kernel_name, configs, [], ARCH)}
    assert outcomes[0].kernel is not None
    assert isinstance(outcomes[1].error, CompileError) and "shared" in outcomes[1].error.log.lower()


def test_every_pool_process_starts_and_loads_nvrtc_at_creation():
    """Compiler children start when the pool is made, not one per submission during the first batch."""
    with CompilePool(workers=3) as pool:
        assert pool.wait_ready() == 3


def test_a_compile_killed_for_its_limit_costs_its_child_not_the_pool(monkeypatch):
    """A configuration that turns the source into a compile bomb is killed and reported; the rest of the batch
    and every later batch compile as usual (a process pool whose child died stayed broken for every job)."""
    monkeypatch.setenv("KFORGE_COMPILE_CPU_S", "2")
    source = """#define A(x) x x x x x x x x x x
#define B(x) A(A(A(A(x))))
#define C(x) B(B(B(B(x))))
#define D(x) C(C(C(C(x))))
#if BOMB
__device__ int v[] = {D(1)};
#endif
extern "C" __global__ void k(float *out) { out[0] = BOMB; }
"""
    with CompilePool(workers=2) as pool:
        first = {o.index: o for o in pool.compile_all(source, "k", [{"BOMB": 1}, {"BOMB": 0}], [], ARCH)}
        again = list(pool.compile_all(source, "k", [{"BOMB": 0}], [], ARCH))
    assert isinstance(first[0].error, CompileError) and "KFORGE_COMPILE_CPU_S" in str(first[0].error)
    assert first[1].kernel is not None and again[0].kernel is not None


def test_a_batch_abandoned_part_way_drops_the_compiles_not_yet_started(monkeypatch, matmul):
    """A cancelled search stops taking outcomes: what is still queued is not compiled for nobody."""
    started = []

    def slow_compile(source, kernel_name, params, options, arch):
        started.append(params)
        time.sleep(0.05)
        raise CompileError("stand-in", "")

    monkeypatch.setattr(compiler, "compile_kernel", slow_compile)
    with CompilePool(workers=1) as pool:
        outcomes = pool.compile_all(matmul.source, matmul.kernel_name, matmul_configs(matmul, 20), [], ARCH)
        next(outcomes)
        outcomes.close()
    assert len(started) <= 2  # the one taken, and at most the one compiling when the rest were dropped
