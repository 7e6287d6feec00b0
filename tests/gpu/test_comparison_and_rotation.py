"""On a real GPU: two kernels timed in turn in one session, and timed launches rotating between input sets so
a kernel that caches its result keyed on its inputs cannot profit from it. Run on the GPU machine."""
import statistics
from uuid import uuid4

import pytest

from services.benchmark.compile_pool import CompilePool
from services.benchmark.handlers import compare_kernels
from services.benchmark.measurement import Duel, Measured, Order
from services.benchmark.process import BenchmarkProcess
from services.benchmark.resources import BenchmarkResources
from services.benchmark.sampling import speedup_interval
from services.benchmark.tuning import SpaceEvaluator, reference_setup, search
from shared.adapters.device.compiler import compile_kernel
from shared.domain.events import ComparisonRequested, ConfigFailed, ConfigMeasured, JobSubmitted, KernelsCompared
from shared.domain.projections import job_stream
from tests.fakes import RecordingBus

pytestmark = pytest.mark.gpu

N = 1 << 22
# Compute-bound work, so a kernel replaying a cached result would be far faster than one computing it.
# cheat 1 replays its result while the first input value is what it was; cheat 2 whatever the inputs are;
# cheat 3 keeps two results per element, each keyed on that element's own inputs, so two input sets that repeat
# always hit and any inputs it has not seen are computed right.
CACHING = r"""
#define N_MAX (1 << 22)
__device__ float cached[N_MAX];
__device__ float cached_key[N_MAX];
__device__ float slot_a[2][N_MAX], slot_b[2][N_MAX], slot_c[2][N_MAX];
__device__ int slot_next[N_MAX];
__device__ float work(float a, float b) {
    float x = a;
    for (int k = 0; k < iters; k++) x = fmaf(x, 0.999f, b);
    return x;
}
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i >= n) return;
#if cheat == 1
    if (cached_key[i] == a[0]) { c[i] = cached[i]; return; }
    c[i] = cached[i] = work(a[i], b[i]);
    cached_key[i] = a[0];
#elif cheat == 2
    if (cached_key[i] == 2.0f) { c[i] = cached[i]; return; }
    c[i] = cached[i] = work(a[i], b[i]);
    cached_key[i] = 2.0f;
#elif cheat == 3
    const float x = a[i], y = b[i];
    for (int s = 0; s < 2; s++)
        if (slot_a[s][i] == x && slot_b[s][i] == y) { c[i] = slot_c[s][i]; return; }
    const int s = slot_next[i];
    c[i] = slot_c[s][i] = work(x, y);
    slot_a[s][i] = x, slot_b[s][i] = y, slot_next[i] = s ^ 1;
#else
    c[i] = work(a[i], b[i]);
#endif
}
"""


# The same result, c = a + b, after `iters` steps of work whose result decides nothing (the compiler cannot
# know that |x| stays below 1000): two settings of `iters` are kernels of different speed and equal output.
WORK = r"""
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i >= n) return;
    float x = a[i];
    for (int k = 0; k < iters; k++) x = fmaf(x, 0.999f, b[i]);
    c[i] = x == 1234.5f ? x : a[i] + b[i];
}
"""


def caching_spec(vector_add_spec, **changes):
    # abandon_factor: every configuration is timed in full, however slow, so each is checked in full.
    return vector_add_spec.model_validate({
        **vector_add_spec.model_dump(), "source": CACHING, "sizes": {"n": N},
        "params": {"block_size_x": 256, "cheat": 0, "iters": 512},
        "tune_params": {"block_size_x": [256], "cheat": [0, 1, 2]}, "strategy": {"name": "tune"},
        "benchmark": {**vector_add_spec.benchmark.model_dump(), "timeout_s": 10, "iterations": 9,
                      "abandon_factor": 1000}, **changes})


def work_spec(vector_add_spec):
    return caching_spec(vector_add_spec, source=WORK, params={"block_size_x": 256, "iters": 2048},
                        tune_params={"block_size_x": [256], "iters": [2048]})


@pytest.fixture(scope="module")
def process():
    process = BenchmarkProcess(0)
    yield process
    process.close()


def test_the_caching_kernels_compile():
    for cheat in (0, 1, 2, 3):
        compile_kernel(CACHING, "vector_add", {"block_size_x": 256, "cheat": cheat, "iters": 512}, [], "sm_90")


def test_a_kernel_caching_its_result_keyed_on_its_inputs_gains_nothing_and_one_ignoring_them_is_rejected(
        vector_add_spec, process):
    spec = caching_spec(vector_add_spec)
    with CompilePool(4) as pool:
        evaluator = SpaceEvaluator(spec, process, pool, process.device.arch, "job-gpu", uuid4(), lambda batch: None)
        outcomes = {o.params["cheat"]: o for o in search(spec, evaluator)}

    honest, keyed, blind = outcomes[0], outcomes[1], outcomes[2]
    print({k: getattr(o, "median_ms", None) or o.reason[:160] for k, o in outcomes.items()})
    assert isinstance(honest, ConfigMeasured) and isinstance(keyed, ConfigMeasured)
    # The inputs change from one timed launch to the next, so its cache never hits: it computes every time.
    assert keyed.median_ms > 0.8 * honest.median_ms, (keyed.median_ms, honest.median_ms)
    # Replaying the first inputs' result on the other input set is caught by the outputs checked.
    assert isinstance(blind, ConfigFailed) and blind.stage == "output"
    assert "inconsistent across launches" in blind.reason


def _order(spec, params, arch):
    defines = {**spec.baseline_params(), **params}
    grid, block = spec.launch_geometry(defines)
    return Order(params=defines, kernel=compile_kernel(spec.source, spec.kernel_name, defines, [], arch), grid=grid,
                 block=block, best_ms=None)


def test_two_kernels_timed_in_turn(vector_add_spec, process):
    spec = work_spec(vector_add_spec)
    arch = process.device.arch
    assert process.prepare(reference_setup(spec, None, arch)) is None
    slow, fast = _order(spec, {"iters": 2048}, arch), _order(spec, {"iters": 1024}, arch)

    twice = process.compare(Duel(incumbent=slow, candidate=fast, pairs=15))
    same = process.compare(Duel(incumbent=slow, candidate=_order(spec, {"iters": 2048}, arch), pairs=15))

    assert len(twice.incumbent_ms) == len(twice.candidate_ms) == 15
    speedup, (low, high) = speedup_interval(twice.incumbent_ms, twice.candidate_ms)
    print("half the work:", speedup, low, high)
    assert 1.6 < low <= speedup <= high < 2.4
    speedup, (low, high) = speedup_interval(same.incumbent_ms, same.candidate_ms)
    print("the same kernel:", speedup, low, high)
    assert low < 1.02 and high > 0.98  # the same work never clears the default margin


def test_the_comparison_handler_on_the_gpu(store, vector_add_spec):
    spec = work_spec(vector_add_spec)
    stream = job_stream("gpucmp000001")
    incumbent = spec.as_candidate().model_copy(update={"params": {"block_size_x": 256, "iters": 2048}})
    request = ComparisonRequested(stream_id=stream, queue="benchmark.0", candidate_id="fewer",
                                  incumbent=incumbent,
                                  candidate=incumbent.model_copy(update={"params": {**incumbent.params, "iters": 256}}),
                                  incumbent_ms=1.0, candidate_ms=1.0)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec), request], expected_version=0)
    resources = BenchmarkResources(0, compile_workers=2)
    try:
        compare_kernels(store, RecordingBus(), "gpucmp000001", request.event_id, resources)
    finally:
        resources.close()

    answer = store.read_stream(stream)[-1]
    print(answer.speedup, answer.speedup_ci, answer.error)
    assert isinstance(answer, KernelsCompared) and answer.error is None and not answer.replay
    assert answer.speedup_ci[0] > 2.5 and len(answer.candidate_samples_ms) == spec.benchmark.comparison_pairs


def test_a_kernel_caching_results_keyed_on_its_input_values_gains_nothing_in_the_comparison(vector_add_spec, process):
    """Two input sets that repeat reward a cache keyed on the inputs' values (cheat 3 hits on every timed launch
    of a tuning), but every pair of the comparison in turn, where a step is accepted, runs on inputs drawn
    afresh: there it computes every time, its output checked against its partner's in every pair."""
    # 4096 steps of work: a hit (five loads and a store) is far cheaper than computing
    spec = caching_spec(vector_add_spec, params={"block_size_x": 256, "cheat": 0, "iters": 4096})
    arch = process.device.arch
    assert process.prepare(reference_setup(spec, None, arch)) is None
    honest, keyed = _order(spec, {"cheat": 0}, arch), _order(spec, {"cheat": 3}, arch)
    alone = [process.measure(order) for order in (honest, keyed)]
    assert all(isinstance(m, Measured) for m in alone), alone
    medians = [statistics.median(m.samples_ms) for m in alone]
    print("tuned alone:", medians)
    assert medians[1] < 0.5 * medians[0]  # what the repeating sets reward

    paired = process.compare(Duel(incumbent=honest, candidate=keyed, pairs=15))
    speedup, (low, high) = speedup_interval(paired.incumbent_ms, paired.candidate_ms)
    print("in turn, on inputs drawn afresh:", speedup, low, high)
    assert len(paired.candidate_ms) == 15 and speedup < 1.1
    # The comparison leaves the tuning's sets as they were: both kernels still check out against their references.
    after = [process.measure(order) for order in (honest, keyed)]
    assert all(isinstance(m, Measured) and m.max_abs_error == 0.0 for m in after), after
