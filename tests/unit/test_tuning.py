"""The search runner on this GPU-less machine: NVRTC compiles every configuration for real in the pool,
Kernel Tuner's Searchspace and strategies choose them, and a scripted stand-in plays the GPU."""
from uuid import uuid4

import pytest
from kernel_tuner.searchspace import Searchspace
from kernel_tuner.util import ErrorConfig, get_best_config

from services.benchmark.tuning import (SetupFailed, SpaceEvaluator, _kernel_tuner, _runner_class, reference_setup,
                                       search)
from shared.domain.events import ConfigFailed, ConfigMeasured
from tests.fakes import LocalProcess, ScriptedBenchmarkSession, scripted_time_ms

# The stand-in's cues that fail without killing anything (hang and crash need a real process: test_benchmark_process).
SAFE = [b for b in range(32, 1025, 32) if b not in (ScriptedBenchmarkSession.HANG, ScriptedBenchmarkSession.CRASH)]


def with_blocks(spec, blocks, **search):
    return spec.model_validate({**spec.model_dump(), "tune_params": {"block_size_x": blocks},
                                "benchmark": {**spec.benchmark.model_dump(), "search": search or {}}})


def evaluator(spec, pool, process=None, sent=None, **kw):
    process = process or LocalProcess(ScriptedBenchmarkSession(0))
    return SpaceEvaluator(spec, process, pool, "sm_90", "job-t", uuid4(),
                          (sent if sent is not None else []).extend, **kw)


def test_brute_force_ranks_only_configurations_that_ran_correctly(sweep_spec, compile_pool):
    spec = with_blocks(sweep_spec, SAFE)
    sent = []
    ev = evaluator(spec, compile_pool, sent=sent)

    outcomes = search(spec, ev)

    assert sorted(o.params["block_size_x"] for o in outcomes) == SAFE
    assert sorted(o.params["block_size_x"] for o in sent) == SAFE  # every outcome was handed on to be recorded
    failed = {o.params["block_size_x"]: o for o in outcomes if isinstance(o, ConfigFailed)}
    poisoned = failed[ScriptedBenchmarkSession.POISON]
    assert poisoned.stage == "launch" and "ILLEGAL_ADDRESS" in poisoned.reason
    assert failed[ScriptedBenchmarkSession.WRONG].stage == "output"
    assert "OUT_OF_RESOURCES" in failed[ScriptedBenchmarkSession.NO_LAUNCH].reason
    # 1e-6 ms for 12 MB would be 12,000 TB/s: rejected as impossible, never ranked
    assert failed[ScriptedBenchmarkSession.TOO_FAST].stage == "roofline"
    assert "above the device's" in failed[ScriptedBenchmarkSession.TOO_FAST].reason
    assert ev.tally.best.params == {"block_size_x": 256}
    assert ev.tally.best.median_ms == pytest.approx(scripted_time_ms(256))
    measured = [o for o in outcomes if isinstance(o, ConfigMeasured)]
    assert all(m.gbps > 0 and m.pct_of_peak > 0 and m.compile_ms > 0 for m in measured)
    assert ev.tally.measured == len(measured) and ev.tally.failed == len(failed) == 4


def test_kernel_tuner_sees_errors_as_error_markers_never_as_times(sweep_spec, compile_pool):
    spec = with_blocks(sweep_spec, [ScriptedBenchmarkSession.NO_LAUNCH, ScriptedBenchmarkSession.TOO_FAST, 128, 256])
    kt = _kernel_tuner()
    runner = _runner_class(kt)(evaluator(spec, compile_pool), ScriptedBenchmarkSession(0).info)
    options = kt.Options(tune_params=spec.tune_params, budget=kt.TuningBudget(time_limit=None, max_fevals=4))

    results = runner.run([(320,), (32,), (128,), (256,)], options)

    assert [isinstance(r.get("__error__"), ErrorConfig) for r in results] == [True, True, False, False]
    assert all("time" not in r for r in results[:2])
    assert all(type(r["time"]) is float for r in results[2:])  # Kernel Tuner ignores anything but a float
    assert get_best_config(results, "time", False)["block_size_x"] == 256


def test_brute_force_shards_split_the_space_without_overlap(sweep_spec, compile_pool):
    spec = with_blocks(sweep_spec, SAFE)
    shards = [{o.params["block_size_x"] for o in search(spec, evaluator(spec, compile_pool), shard, 3)}
              for shard in range(3)]
    assert set().union(*shards) == set(SAFE)
    assert sum(map(len, shards)) == len(SAFE) and max(map(len, shards)) - min(map(len, shards)) <= 1


def test_revisits_and_already_recorded_outcomes_are_not_measured_again(sweep_spec, compile_pool):
    spec = with_blocks(sweep_spec, [128, 256, 512])
    first = evaluator(spec, compile_pool)
    recorded = first.evaluate([{"block_size_x": 128}, {"block_size_x": 256}])
    process = LocalProcess(ScriptedBenchmarkSession(0))
    again = evaluator(spec, compile_pool, process=process, recorded=recorded)

    outcomes = again.evaluate([{"block_size_x": 256}, {"block_size_x": 512}, {"block_size_x": 512}])

    assert [o.params["block_size_x"] for o in outcomes] == [256, 512, 512]
    assert [o.params["block_size_x"] for o in process.orders] == [512]  # only the new one reached the GPU
    assert outcomes[0] is recorded[1] and outcomes[1] is outcomes[2]
    assert again.tally.best.params == {"block_size_x": 256}


@pytest.mark.parametrize("strategy", ["random_sample", "genetic_algorithm", "greedy_ils"])
def test_kernel_tuner_strategies_drive_the_runner_within_their_budget(sweep_spec, compile_pool, strategy):
    spec = with_blocks(sweep_spec, SAFE, strategy=strategy, max_fevals=8)
    ev = evaluator(spec, compile_pool)

    outcomes = search(spec, ev)

    assert 1 <= len(outcomes) <= 8
    assert ev.tally.best is not None and isinstance(ev.tally.best, ConfigMeasured)


def test_a_reference_that_does_not_compile_fails_the_setup_with_the_log(sweep_spec, compile_pool):
    broken = sweep_spec.model_validate({**sweep_spec.model_dump(),
                                        "source": sweep_spec.source.replace("c[i] = a[i] + b[i];", "c[i] = a[i] +;")})
    with pytest.raises(SetupFailed, match="does not compile"):
        search(broken, evaluator(broken, compile_pool))


def test_the_examples_spaces_are_what_kernel_tuner_builds(vector_add_spec):
    from kforge.specfile import load_spec
    from tests.conftest import EXAMPLES

    matmul = load_spec(EXAMPLES / "matmul.cu", EXAMPLES / "matmul.yaml")
    space = Searchspace(matmul.tune_params, matmul.restrictions, 1024, block_size_names=matmul.block_size_names)
    assert 150 <= space.size <= 250  # the tiled-matmul space of the Kernel Tuner comparison
    assert all(bx * by <= 1024 for bx, by, _, _ in space.list)


def test_every_configuration_is_launched_with_its_own_dynamic_shared_memory(sweep_spec, compile_pool):
    shared = sweep_spec.model_validate({**sweep_spec.model_dump(), "smem_args": {"size": "block_size_x * 4"}})
    spec = with_blocks(shared, [64, 128, 512])
    process = LocalProcess(ScriptedBenchmarkSession(0))

    search(spec, evaluator(spec, compile_pool, process=process))

    assert {o.params["block_size_x"]: o.shared_bytes for o in process.orders} == {64: 256, 128: 512, 512: 2048}
    assert reference_setup(spec, compile_pool.cache, "sm_90").reference_shared_bytes == 256 * 4  # its params: 256


def test_a_configuration_whose_shared_memory_is_negative_fails_without_a_launch(sweep_spec, compile_pool):
    spec = with_blocks(sweep_spec.model_validate({**sweep_spec.model_dump(),
                                                  "smem_args": {"size": "(block_size_x - 100) * 4"}}), [64, 128])
    process = LocalProcess(ScriptedBenchmarkSession(0))

    outcomes = search(spec, evaluator(spec, compile_pool, process=process))

    failed = {o.params["block_size_x"]: o for o in outcomes if isinstance(o, ConfigFailed)}
    assert list(failed) == [64] and failed[64].stage == "geometry" and "0 or more" in failed[64].reason
    assert [o.params["block_size_x"] for o in process.orders] == [128]
