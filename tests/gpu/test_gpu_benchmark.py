"""The benchmark service on a real GPU: run on the GPU machine (`make test-gpu`)."""
import json
import os
import subprocess
import sys
from uuid import uuid4

import pytest

from services.benchmark.compile_pool import CompilePool
from services.benchmark.process import BenchmarkProcess
from services.benchmark.tuning import SpaceEvaluator, search
from shared.domain.events import BaselineMeasured, ConfigFailed, ConfigMeasured
from tests.conftest import EXAMPLES
from tests.gpu.baselines import baseline_events

pytestmark = pytest.mark.gpu

# vector_add with a `fault` parameter that breaks it the ways real candidates break.
CUED = r"""
__device__ int launched;
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
#if fault == 1
    if (i < n) c[i] = a[i] - b[i];                      // wrong answer
#elif fault == 2
    if (i < n) c[i + (1ll << 40)] = a[i] + b[i];        // illegal address: poisons the context
#elif fault == 3
    long long start = clock64(); while (clock64() >= start) {}   // hangs
#elif fault == 4
    if (i < n - 1) c[i] = a[i] + b[i];                  // misses the last element
#elif fault == 5
    __shared__ bool done;                               // reuses results the last launch left in the output:
    int first = blockIdx.x * block_size_x;              // a block whose first element already holds its sum
    if (threadIdx.x == 0) done = first < n && c[first] == a[first] + b[first];   // skips its work
    __syncthreads();
    if (done) return;
    if (i < n) c[i] = a[i] + b[i];
#elif fault == 6
    if (launched && blockIdx.x == 0) return;            // skips work after its first launch of the module
    if (i < n) c[i] = a[i] + b[i];
    if (i == 0) launched = 1;
#elif fault == 7
    if (i < n && c[i] != c[i]) c[i] = a[i] + b[i];      // works only where its output holds the verifier's poison
#elif fault == 8
    if (i < n) atomicAdd(&c[i], a[i] + b[i]);           // accumulates into its output, as a reduction does
#elif fault == 9
    if (i < n && c[i] == 0.0f) c[i] = a[i] + b[i];      // counts on a zeroed output to find its work
#else
    if (i < n) c[i] = a[i] + b[i];
#endif
}
"""


def cued_spec(vector_add_spec, modes, blocks=(128, 256), n=1_000_003, reference=0):
    return vector_add_spec.model_validate({
        **vector_add_spec.model_dump(), "source": CUED, "sizes": {"n": n},
        "params": {"block_size_x": 256, "fault": reference},
        "tune_params": {"block_size_x": list(blocks), "fault": list(modes)}, "strategy": {"name": "tune"},
        "benchmark": {**vector_add_spec.benchmark.model_dump(), "timeout_s": 5}})


@pytest.fixture(scope="module")
def pool():
    with CompilePool(8) as pool:
        yield pool


@pytest.fixture(scope="module")
def process():
    process = BenchmarkProcess(0)
    yield process
    process.close()


def tune(spec, process, pool):
    evaluator = SpaceEvaluator(spec, process, pool, process.device.arch, "job-gpu", uuid4(), lambda batch: None)
    outcomes = search(spec, evaluator)
    return evaluator, {tuple(o.params.values()): o for o in outcomes}


def test_a_kernel_that_reuses_or_skips_work_after_its_first_launch_is_never_ranked_fast(vector_add_spec, process, pool):
    """Every timed launch starts from pristine outputs, and the last one's output is checked too."""
    spec = cued_spec(vector_add_spec, modes=[0, 5, 6], blocks=(256,), n=1 << 24)
    _, outcomes = tune(spec, process, pool)

    honest, stale, counted = outcomes[(256, 0)], outcomes[(256, 5)], outcomes[(256, 6)]
    assert isinstance(stale, ConfigMeasured) and stale.max_abs_error == 0.0
    assert stale.median_ms > 0.7 * honest.median_ms, (stale.median_ms, honest.median_ms)  # it had to do the work
    assert counted.stage == "output" and "inconsistent across launches" in counted.reason


def test_timed_launches_start_from_neither_poison_nor_zeros_unless_the_reference_accumulates(vector_add_spec,
                                                                                          process, pool):
    """A kernel that works only where it finds the verifier's poison, or only where it finds zeros, leaves its
    output wrong in timed launches; where the submitted kernel adds into its output, the output starts zeroed."""
    _, gated = tune(cued_spec(vector_add_spec, modes=[0, 7, 9], blocks=(256,)), process, pool)
    _, accumulated = tune(cued_spec(vector_add_spec, modes=[8, 0], blocks=(256,), reference=8), process, pool)

    print({k: getattr(o, "median_ms", None) or o.reason[:120] for k, o in {**gated, **accumulated}.items()})
    assert gated[(256, 7)].stage == gated[(256, 9)].stage == "output"
    assert all(isinstance(o, ConfigMeasured) and o.max_abs_error == 0.0
               for o in (gated[(256, 0)], accumulated[(256, 8)], accumulated[(256, 0)]))


def test_every_broken_configuration_is_rejected_with_its_reason_and_the_worker_goes_on(vector_add_spec, process, pool):
    spec = cued_spec(vector_add_spec, modes=[0, 1, 2, 3, 4])
    evaluator, outcomes = tune(spec, process, pool)

    for block in (128, 256):
        assert isinstance(outcomes[(block, 0)], ConfigMeasured) and outcomes[(block, 0)].max_abs_error == 0.0
        assert outcomes[(block, 1)].stage == "output" and "differ from the reference" in outcomes[(block, 1)].reason
        assert outcomes[(block, 2)].stage == "launch" and "ILLEGAL_ADDRESS" in outcomes[(block, 2)].reason
        assert outcomes[(block, 3)].stage == "timeout"
        assert outcomes[(block, 4)].stage == "output" and "first at index 1000002" in outcomes[(block, 4)].reason
    assert evaluator.tally.best.params["fault"] == 0
    assert process.replacements >= 4  # two faults and two hangs, each cost a GPU process
    for key, outcome in sorted(outcomes.items()):
        print(key, outcome.type, getattr(outcome, "median_ms", None) or outcome.reason[:100])


def test_a_block_the_device_cannot_launch_is_reported_not_timed(vector_add_spec, process, pool):
    spec = cued_spec(vector_add_spec, modes=[0], blocks=(256, 2048))
    evaluator, outcomes = tune(spec, process, pool)
    # Kernel Tuner's Searchspace drops 2048 (above the device's 1024 threads), so it never reaches the GPU.
    assert list(outcomes) == [(256, 0)]
    from services.benchmark.measurement import Order

    kernel = pool.compile_all(spec.source, "vector_add", [{"block_size_x": 2048, "fault": 0}], [], process.device.arch)
    (compiled,) = list(kernel)
    failed = process.measure(Order(params={"block_size_x": 2048, "fault": 0}, kernel=compiled.kernel,
                                   grid=(489, 1, 1), block=(2048, 1, 1), best_ms=None))
    assert failed.stage == "launch" and "INVALID_VALUE" in failed.reason


def test_matmul_configurations_that_exhaust_registers_are_rejected(process, pool):
    from kforge.specfile import load_spec

    spec = load_spec(EXAMPLES / "matmul.cu", EXAMPLES / "matmul.yaml")
    spec = spec.model_validate({**spec.model_dump(), "sizes": {"n": 512},
                                "tune_params": {"block_size_x": [32], "block_size_y": [8, 32], "tile_size_x": [4, 8],
                                                "tile_size_y": [4, 8]}})
    evaluator, outcomes = tune(spec, process, pool)
    for key, outcome in sorted(outcomes.items()):
        print(key, outcome.type, getattr(outcome, "median_ms", None) or outcome.reason[:120])
    assert any(isinstance(o, ConfigMeasured) for o in outcomes.values())
    rejected = [o for o in outcomes.values() if isinstance(o, ConfigFailed)]
    assert all(o.stage in ("launch", "compile") for o in rejected)
    assert all(o.tflops < 67 for o in outcomes.values() if isinstance(o, ConfigMeasured))


def test_l2_flush_and_adaptive_sampling(vector_add_spec, process, pool):
    spec = cued_spec(vector_add_spec, modes=[0], blocks=(64, 256, 1024), n=1 << 24)
    spec = spec.model_validate({**spec.model_dump(), "benchmark": {**spec.benchmark.model_dump(), "l2_flush": True}})
    evaluator, outcomes = tune(spec, process, pool)
    measured = [o for o in outcomes.values() if isinstance(o, ConfigMeasured)]
    assert len(measured) == 3 and all(0 < o.pct_of_peak < 105 for o in measured)
    assert all(len(o.samples_ms) >= spec.benchmark.min_samples or o.abandoned for o in measured)
    print([(o.params, round(o.median_ms, 4), len(o.samples_ms), round(o.gbps)) for o in measured])


def test_a_fast_kernel_is_not_abandoned_for_its_cold_first_launch(vector_add_spec, process, pool):
    """A 20 us kernel's checked launch loads its module (lazily, at the first launch), several times the kernel's
    own time: judged on it, every configuration after the first was abandoned and the first one won. Block sizes
    of 128 to 1024 add vectors within a few percent of each other, so each is timed until its interval settles."""
    spec = cued_spec(vector_add_spec, modes=[0], blocks=(128, 256, 512, 1024), n=1 << 21)
    spec = spec.model_validate({**spec.model_dump(), "benchmark": {**spec.benchmark.model_dump(), "l2_flush": True}})
    _, outcomes = tune(spec, process, pool)
    measured = [o for o in outcomes.values() if isinstance(o, ConfigMeasured)]
    print([(o.params["block_size_x"], round(o.median_ms, 4), len(o.samples_ms), o.abandoned) for o in measured])
    assert len(measured) == 4 and max(o.median_ms for o in measured) < 0.1
    best = min(o.median_ms for o in measured)
    assert all(not o.abandoned or min(o.samples_ms) > spec.benchmark.abandon_factor * best for o in measured)
    # Judged on the cold launch, all but the first were abandoned. A timed launch may still come out slow once
    # (1 of 4 did on the H100, 2.4 times the others), or a block size be slower on another card (the H200).
    assert sum(o.abandoned for o in measured) <= 2


@pytest.mark.parametrize("example, sizes", [("vector_add", {"n": 1 << 22}), ("matmul", {"n": 1024}),
                                            ("reduction", {"n": 1 << 22, "blocks": 1024})])
def test_baseline_of_each_example_is_measured(tmp_path, example, sizes):
    from kforge.specfile import load_spec

    spec = load_spec(EXAMPLES / f"{example}.cu", EXAMPLES / f"{example}.yaml").model_copy(update={"sizes": sizes})
    events = baseline_events(tmp_path, spec)
    measured = [e for e in events if isinstance(e, BaselineMeasured)]
    assert len(measured) == 1, [e.type for e in events]
    assert measured[0].median_ms > 0 and 1 <= len(measured[0].samples_ms) <= spec.benchmark.iterations
    print(f"{example} {sizes}: median {measured[0].median_ms:.4f} ms on {measured[0].device}")


def test_kforge_tune_tunes_the_vector_add_example(tmp_path):
    env = {**os.environ, "KFORGE_HOME": str(tmp_path), "COLUMNS": "250"}
    env.pop("REDIS_URL", None), env.pop("DATABASE_URL", None)
    kforge = [sys.executable, "-m", "kforge"]
    out = tmp_path / "out"
    tune = subprocess.run([*kforge, "tune", str(EXAMPLES / "vector_add.cu"), "--out", str(out)], capture_output=True,
                          text=True, env=env, timeout=300)
    print(tune.stdout[-3000:], tune.stderr[-2000:])
    assert tune.returncode == 0 and "completed" in tune.stdout and "tuned" in tune.stdout
    jobs = subprocess.run([*kforge, "jobs", "--json"], capture_output=True, text=True, env=env, timeout=60).stdout
    job_id = next(job["job_id"] for job in map(json.loads, jobs.splitlines()) if job["kernel_name"] == "vector_add")
    listed = subprocess.run([*kforge, "events", job_id, "--json"], capture_output=True, text=True, env=env,
                            timeout=60).stdout.splitlines()
    events = [json.loads(line) for line in listed]
    types = [e["type"] for e in events if e["type"] != "TaskProfiled"]
    assert types[:4] == ["JobSubmitted", "BaselineRequested", "KernelCompiled", "BaselineMeasured"]
    assert types.count("ConfigMeasured") == 6 and types[-2:] == ["TuningCompleted", "JobCompleted"]
    # Each of the two worker tasks recorded its effort; the baseline recorded the device's facts.
    assert sorted(e["task"] for e in events if e["type"] == "TaskProfiled") == ["benchmark.measure_baseline",
                                                                                 "benchmark.tune_shard"]
    facts = next(e for e in events if e["type"] == "BaselineMeasured")["facts"]
    print("device facts:", facts)
    assert facts["sm_count"] > 0 and facts["dram_gbps"] > 100 and facts["l2_mb"] > 0
    written = sorted(p.name for p in (out / job_id).iterdir())
    assert "history.json" in written and any(n.startswith("vector_add_optimised_") for n in written)
