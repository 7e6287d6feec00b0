"""kforge.tune_kernel, Kernel Tuner's tune_kernel on kforge, without a GPU: how each argument is read into the
spec, Kernel Tuner's cache file read and written (checked with Kernel Tuner's own reader), resuming from it,
and the clear refusals. The job itself is played by a stand-in that answers the spec it is given; the last
test runs a real job in a process of its own, which gets as far as needing the GPU."""
import hashlib
import io
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from uuid import uuid4

import numpy as np
import pytest
from kernel_tuner import util as kt_util

import kforge
from kforge.kernel_tuner_compat import tuning
from kforge.kernel_tuner_compat.arguments import spec_args
from kforge.kernel_tuner_compat.options import problem_dims
from kforge.kernel_tuner_compat.space import DropInError, TuneSpace, exclusions
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.domain.events import BaselineMeasured, ConfigFailed, ConfigMeasured, JobCompleted, JobSubmitted
from shared.domain.expressions import restriction_holds

ROOT = Path(__file__).resolve().parents[2]
VECTOR_ADD = """
__global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) { c[i] = a[i] + b[i]; }
}
"""
DEVICE = "NVIDIA Stand-in 80GB"


def vector_add_arguments(n=1000):
    a, b = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    return [np.zeros_like(a), a, b, np.int32(n)], a + b


# --- arguments -------------------------------------------------------------------------------------------
def test_arrays_become_args_with_their_data_and_the_answer_decides_the_outputs(tmp_path):
    arguments, expected = vector_add_arguments()
    args = spec_args(arguments, [expected, None, None, None], VECTOR_ADD, "vector_add", tmp_path, 1 << 30)
    assert [(a["name"], a["dtype"], a.get("shape"), a.get("role")) for a in args] == [
        ("c", "float32", [1000], "inout"), ("a", "float32", [1000], "in"), ("b", "float32", [1000], "in"),
        ("n", "int32", None, None)]
    assert args[3]["value"] == 1000
    for arg, array in zip(args, arguments):  # the kernel's inputs are the caller's arrays, not drawn values
        if "data" in arg:
            assert np.array_equal(np.load(arg["data"]["path"]), array)
    assert np.array_equal(np.load(args[0]["answer"]["path"]), expected)


def test_without_an_answer_the_signature_decides_and_python_scalars_take_its_dtypes(tmp_path):
    source = "__global__ void scale(double *x, const double *y, double alpha, long long n) {}"
    y = np.ones(8)
    args = spec_args([np.zeros(8), y, 2, 8], None, source, "scale", tmp_path, 1 << 30)
    assert [a.get("role") for a in args] == ["inout", "in", None, None]
    assert (args[2]["dtype"], args[2]["value"]) == ("float64", 2.0)
    assert (args[3]["dtype"], args[3]["value"]) == ("int64", 8)


def test_a_fortran_ordered_array_goes_flat_in_its_memory_order_as_kernel_tuner_copies_it(tmp_path):
    source = "__global__ void k(float *out, const float *m) {}"
    m = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    args = spec_args([np.zeros(6, np.float32), m], None, source, "k", tmp_path, 1 << 30)
    assert np.array_equal(np.load(args[1]["data"]["path"]), [0, 3, 1, 4, 2, 5])


@pytest.mark.parametrize("arguments, answer, says", [
    ([np.zeros(4, np.float64), np.zeros(4, np.float32), np.zeros(4, np.float32), np.int32(4)], None,
     "a float64 array, where c is a pointer to float32"),
    ([np.zeros(4, np.float32)] * 3, None, "3 given, and vector_add takes 4"),
    ([np.zeros(4, np.float32)] * 3 + [np.int64(4)], None, "a int64 scalar, where n is int32"),
    ([np.zeros(4, np.float32)] * 3 + [4.5], None, "the float 4.5, where n is int32"),
    ([np.zeros(4, bool)] + [np.zeros(4, np.float32)] * 2 + [4], None, "kforge has no dtype bool"),
    ([np.zeros(4, np.float32)] * 3 + [4], [None, None], "one entry per argument (4)"),
    ([np.zeros(4, np.float32)] * 3 + [4], [np.zeros(4, np.float64), None, None, None], "in the argument's dtype"),
    ([np.zeros(4, np.float32)] * 3 + [4], [None, None, None, 4], "argument 3 is a scalar"),
])
def test_arguments_kforge_cannot_pass_are_refused_saying_why(tmp_path, arguments, answer, says):
    with pytest.raises(DropInError, match=says.replace("(", r"\(").replace(")", r"\)")):
        spec_args(arguments, answer, VECTOR_ADD, "vector_add", tmp_path, 1 << 30)


# --- problem_size and restrictions ----------------------------------------------------------------------
@pytest.mark.parametrize("given, dims", [(4096, [4096]), (np.int64(10), [10]), ((64, 32), [64, 32]),
                                         ([8, 4, 2], [8, 4, 2]), ("100", [100])])
def test_problem_size_takes_kernel_tuners_forms(given, dims):
    assert problem_dims(given) == dims


@pytest.mark.parametrize("given", [lambda p: (p["n"],), ("n*block_size_x",), (1, 2, 3, 4)])
def test_a_problem_size_of_parameters_is_refused_naming_the_fix(given):
    with pytest.raises(DropInError, match="problem_size"):
        problem_dims(given)


SPACE = TuneSpace({"block_size_x": list(range(32, 1025, 32)), "tile": [1, 2, 4, 8], "unroll": [0, 1]})


def kept_by(restrictions):
    return [c for c in SPACE.configs() if all(restriction_holds(r, c) for r in restrictions)]


def test_exclusions_rule_out_exactly_the_configurations_given_even_split_over_many_restrictions():
    configs = list(SPACE.configs())
    restrictions = exclusions(SPACE, configs[::3])
    assert len(restrictions) > 1  # too many for one expression within kforge's bounds
    assert kept_by(restrictions) == [c for i, c in enumerate(configs) if i % 3]


@pytest.mark.parametrize("out, longest", [
    (lambda i, c: i < 100, 400),  # a brute-force cache stopped midway: a prefix of Kernel Tuner's order
    (lambda i, c: c["tile"] == 2, 20),  # what a restriction on one parameter rules out, whatever the others
    (lambda i, c: c["block_size_x"] <= 512 and c["unroll"] == 1, 400),
])
def test_a_subtree_of_every_combination_needs_no_condition_so_structured_exclusions_stay_short(out, longest):
    configs = list(SPACE.configs())
    restrictions = exclusions(SPACE, [c for i, c in enumerate(configs) if out(i, c)])
    assert sum(map(len, restrictions)) <= longest, restrictions
    assert kept_by(restrictions) == [c for i, c in enumerate(configs) if not out(i, c)]


def test_a_text_valued_parameter_cannot_be_excluded_and_the_error_says_so():
    with pytest.raises(DropInError, match="not a finite number"):
        exclusions(TuneSpace({"layout": ["row", "column"]}), [{"layout": "row"}])


# --- tune_kernel with a stand-in job --------------------------------------------------------------------
class StandInJob:
    """Plays the job of a spec: every configuration Kernel Tuner's search space would hold (the spec's
    restrictions met, at most 1024 threads) is measured, its time a function of the configuration; block
    sizes in `failing` fail at launch."""

    def __init__(self, failing=()):
        self.specs, self.searched, self.failing = [], [], set(failing)

    def __call__(self, spec, on_event):
        self.specs.append(spec)
        stream = "job-0123456789ab"
        names = list(spec.tune_params)
        configs = [dict(zip(names, v)) for v in itertools.product(*spec.tune_params.values())]
        configs = [c for c in configs if spec.restrictions_hold(c) and math.prod(spec.launch_geometry(c)[1]) <= 1024]
        self.searched.append(configs)
        on_event(JobSubmitted(stream_id=stream, spec=spec, submitted_by="python"))
        on_event(BaselineMeasured(stream_id=stream, request_id=uuid4(), device=DEVICE, params=spec.params,
                                  grid=(1, 1, 1), block=(256, 1, 1), samples_ms=[1.0], median_ms=1.0))
        for c in configs:
            if c.get("block_size_x") in self.failing:
                on_event(ConfigFailed(stream_id=stream, request_id=uuid4(), params=c, stage="launch",
                                      reason="CUDA_ERROR_INVALID_VALUE"))
                continue
            ms = 1.0 + abs(c["block_size_x"] - 256) / 1000 + 0.01 * sum(v for k, v in c.items() if k != "block_size_x")
            on_event(ConfigMeasured(stream_id=stream, request_id=uuid4(), params=c, grid=(1, 1, 1),
                                    block=(c["block_size_x"], 1, 1), samples_ms=[ms, ms], median_ms=ms, min_ms=ms,
                                    mean_ms=ms, stddev_ms=0.0, ci95_ms=0.0, compile_ms=12.5))
        on_event(JobCompleted(stream_id=stream, summary="tuned"))
        return "0123456789ab"


@pytest.fixture
def job(monkeypatch, tmp_path):
    stand_in = StandInJob()
    monkeypatch.setattr(tuning, "run_job", stand_in)
    monkeypatch.setattr(tuning, "gpu_name_here", lambda settings: DEVICE)
    monkeypatch.setattr(runtime, "_current", SimpleNamespace(settings=Settings(KFORGE_HOME=str(tmp_path / "home"))))
    return stand_in


BLOCKS = {"block_size_x": [64, 128, 256, 512]}


def tune(cache=None, tune_params=BLOCKS, **kw):
    arguments, expected = vector_add_arguments()
    return kforge.tune_kernel("vector_add", VECTOR_ADD, 1000, arguments, tune_params,
                              answer=[expected, None, None, None], cache=cache, **{"quiet": True, **kw})


def test_results_and_env_come_back_as_kernel_tuners(job):
    results, env = tune(metrics={"GB/s": lambda p: 12e3 / 1e9 / (p["time"] / 1e3)})
    spec = job.specs[0]
    assert spec.strategy.name == "tune" and spec.benchmark.search.strategy == "brute_force"
    assert spec.params["block_size_x"] == 64  # the reference: the space's first configuration
    assert (spec.verify.atol, spec.verify.rtol) == (1e-6, 1e-5)  # numpy.allclose's, as Kernel Tuner compares
    assert [r["block_size_x"] for r in results] == BLOCKS["block_size_x"]
    assert results[2]["time"] == 1.0 and results[2]["times"] == [1.0, 1.0] and results[2]["compile_time"] == 12.5
    assert all(key in results[0] for key in ("verification_time", "benchmark_time", "strategy_time",
                                             "framework_time", "timestamp", "GB/s"))
    assert env["best_config"] is results[2] and env["device_name"] == DEVICE
    assert env["problem_size"] == [1000, 1, 1] and env["iterations"] == 7 and env["kforge_job_id"] == "0123456789ab"
    assert "total_compile_time" in env and "overhead_time" in env


def test_kernel_tuners_strategies_and_options_go_to_the_search(job):
    tune(strategy="random_sample", strategy_options={"max_fevals": 3, "time_limit": 60, "fraction": 0.5},
         iterations=32, seed=5)
    search, benchmark = job.specs[0].benchmark.search, job.specs[0].benchmark
    assert (search.strategy, search.max_fevals, search.time_limit_s, search.options) == (
        "random_sample", 3, 60.0, {"fraction": 0.5})
    assert (benchmark.iterations, benchmark.min_samples, benchmark.seed) == (32, 32, 5)


def test_restriction_functions_and_python_strings_run_here_and_exclude_exactly_what_they_rule_out(job):
    space = {"block_size_x": [64, 128, 256, 512], "tile": [1, 2, 3]}
    restrictions = ["block_size_x * tile <= 1024", lambda p: p["tile"] != 2, "tile in (1, 3)"]
    results, _ = tune(tune_params=space, restrictions=restrictions, grid_div_x=["block_size_x", "tile"])
    expected = [{"block_size_x": b, "tile": t} for b in space["block_size_x"] for t in (1, 3) if b * t <= 1024]
    assert job.searched[0] == expected
    assert [{k: r[k] for k in space} for r in results] == expected
    assert job.specs[0].restrictions[0] == "block_size_x * tile <= 1024"  # kforge evaluates this one itself
    assert job.specs[0].grid_div_x == ["block_size_x", "tile"]


def test_a_failed_configuration_carries_kernel_tuners_error_and_kforges_reason(job):
    job.failing = {512}
    results, env = tune()
    assert isinstance(results[3]["__error__"], kt_util.RuntimeFailedConfig) and "time" not in results[3]
    assert results[3]["kforge_error"] == "launch: CUDA_ERROR_INVALID_VALUE"
    assert env["best_config"]["block_size_x"] == 256


def test_the_cache_file_is_kernel_tuners_and_a_second_run_measures_only_what_it_lacks(job, tmp_path):
    job.failing = {512}
    cache = tmp_path / "vector_add_cache"  # Kernel Tuner appends .json, and so does kforge
    first, _ = tune(cache=str(cache))
    data = kt_util.read_cache(str(cache) + ".json", open_cache=False)  # Kernel Tuner's own reader
    assert (data["device_name"], data["kernel_name"], data["tune_params_keys"]) == (DEVICE, "vector_add",
                                                                                     ["block_size_x"])
    assert set(data["cache"]) == {"64", "128", "256", "512"}
    assert data["cache"]["256"]["time"] == 1.0 and isinstance(data["cache"]["512"]["__error__"],
                                                              kt_util.RuntimeFailedConfig)
    # Kernel Tuner resumes from it: its own checks of the header pass for the same kernel, size and device.
    kernel_options = SimpleNamespace(kernel_name="vector_add", problem_size=1000)
    tuning_options = SimpleNamespace(tune_params=BLOCKS, simulation_mode=False, objective=["time"])
    runner = SimpleNamespace(get_device_info=lambda: SimpleNamespace(name=DEVICE), simulation_mode=False)
    resumed = kt_util.process_cache(str(cache) + ".json", kernel_options, tuning_options, runner)
    assert set(resumed) == set(data["cache"])
    kt_util.close_cache(str(cache) + ".json")

    wider = {"block_size_x": [64, 128, 256, 512, 1024]}
    second, env = tune(cache=str(cache), tune_params=wider)
    assert job.searched[1] == [{"block_size_x": 1024}]  # only what the cache lacks is measured
    assert [r["block_size_x"] for r in second] == wider["block_size_x"]
    assert second[2]["time"] == first[2]["time"] and env["best_config"]["block_size_x"] == 256
    assert set(kt_util.read_cache(str(cache) + ".json", open_cache=False)["cache"]) == {"64", "128", "256", "512",
                                                                                       "1024"}
    third, env = tune(cache=str(cache), tune_params=wider)  # everything cached: no job at all
    assert len(job.specs) == 2 and [r["block_size_x"] for r in third] == wider["block_size_x"]
    assert env["device_name"] == DEVICE and "kforge_job_id" not in env


def test_kforge_resumes_a_cache_kernel_tuner_left_open(job, tmp_path):
    path = str(tmp_path / "kt.json")
    kernel_options = SimpleNamespace(kernel_name="vector_add", problem_size=1000)
    tuning_options = SimpleNamespace(tune_params=BLOCKS, simulation_mode=False, objective=["time"])
    runner = SimpleNamespace(get_device_info=lambda: SimpleNamespace(name=DEVICE), simulation_mode=False)
    cache = kt_util.process_cache(path, kernel_options, tuning_options, runner)
    kt_util.store_cache("128", {"block_size_x": 128, "time": 0.5, "times": [0.5]}, path, cache)
    results, env = tune(cache=path)
    assert {"block_size_x": 128} not in job.searched[0] and len(job.searched[0]) == 3
    assert env["best_config"]["block_size_x"] == 128 and env["best_config"]["time"] == 0.5
    assert json.loads(Path(path).read_text())["cache"]["64"]["block_size_x"] == 64  # closed: plain JSON


def test_a_cache_too_costly_to_exclude_is_measured_again_keeping_its_results(job, monkeypatch, tmp_path, capsys):
    cache = str(tmp_path / "cache.json")
    first, _ = tune(cache=cache)
    monkeypatch.setattr(tuning, "too_slow_to_check", lambda restrictions, space: bool(restrictions))
    second, _ = tune(cache=cache, tune_params={"block_size_x": [64, 128, 256, 512, 1024]}, quiet=False)
    assert len(job.searched[1]) == 5 and "the cache's 4 configurations are measured again" in capsys.readouterr().out
    assert [r["timestamp"] for r in second[:4]] == [r["timestamp"] for r in first]  # the cached results kept


def test_restriction_functions_too_costly_to_exclude_are_refused_naming_the_fix(job, monkeypatch):
    monkeypatch.setattr(tuning, "too_slow_to_check", lambda restrictions, space: bool(restrictions))
    with pytest.raises(DropInError, match="write the restrictions as strings"):
        tune(restrictions=[lambda p: p["block_size_x"] != 128])
    assert not job.specs


@pytest.mark.parametrize("change, says", [
    (dict(kernel_name="other"), "results of kernel other"),
    (dict(problem_size=2000), "problem_size 2000"),
    (dict(tune_params_keys=["tile", "block_size_x"]), "with other parameters"),
])
def test_a_cache_of_another_tuning_is_refused(job, tmp_path, change, says):
    header = {"device_name": DEVICE, "kernel_name": "vector_add", "problem_size": 1000,
              "tune_params_keys": ["block_size_x"], "tune_params": BLOCKS, "objective": ["time"], "cache": {}}
    path = tmp_path / "other.json"
    path.write_text(json.dumps({**header, **change}))
    with pytest.raises(DropInError, match=says):
        tune(cache=str(path))


def test_a_cache_of_another_device_is_refused_before_anything_runs(job, monkeypatch, tmp_path):
    path = tmp_path / "other_gpu.json"
    path.write_text(json.dumps({"device_name": "NVIDIA A100", "kernel_name": "vector_add", "problem_size": 1000,
                                "tune_params_keys": ["block_size_x"], "cache": {}}))
    with pytest.raises(DropInError, match="results of NVIDIA A100"):
        tune(cache=str(path))
    assert not job.specs


def test_where_the_gpu_cannot_be_asked_first_the_jobs_device_is_checked_and_the_cache_left_as_it_was(
        job, monkeypatch, tmp_path):
    monkeypatch.setattr(tuning, "gpu_name_here", lambda settings: None)  # workers elsewhere, or no device here
    path = tmp_path / "other_gpu.json"
    path.write_text(json.dumps({"device_name": "NVIDIA A100", "kernel_name": "vector_add", "problem_size": 1000,
                                "tune_params_keys": ["block_size_x"], "cache": {}}))
    before = path.read_text()
    with pytest.raises(DropInError, match="results of NVIDIA A100, and this tuning runs on NVIDIA Stand-in"):
        tune(cache=str(path))
    assert path.read_text() == before


def test_a_metric_that_fails_is_raised_once_the_job_has_ended(job):
    with pytest.raises(ZeroDivisionError):
        tune(metrics={"broken": lambda p: 1 / 0})
    assert len(job.specs) == 1  # the stand-in ran to its end before the error surfaced


@pytest.mark.parametrize("kw, says", [
    (dict(verify=lambda answer, result, atol: True), "verify: .*answer="),
    (dict(lang="OpenCL"), "kforge tunes CUDA kernels"),
    (dict(cmem_args={"d filter": np.zeros(4)}), r"cmem_args\['d filter'\]: a key names the __constant__"),
    (dict(strategy="skopt"), "kforge runs these of Kernel Tuner's strategies"),
    (dict(simulation_mode=True), "simulation_mode=True"),
    (dict(device=1), "KFORGE_GPUS=1"),
    (dict(problem_size=lambda p: 1000), "problem_size: a function"),
    (dict(grid_div_x=lambda p: 64), "grid_div_x: a function"),
    (dict(restrictions=[42]), r"restrictions\[0\]: int"),
    (dict(objective="GB/s", strategy="random_sample"), "minimise time"),
    (dict(tune_params={"block_size_x": [64], "time": [1]}), "'time' is a name Kernel Tuner reserves"),
    (dict(kernel_source="missing_file.cu"), "neither a file nor CUDA source"),
])
def test_what_kforge_cannot_honour_is_refused_naming_the_argument_and_the_fix(job, kw, says):
    arguments, _ = vector_add_arguments()
    call = {"kernel_name": "vector_add", "kernel_source": VECTOR_ADD, "problem_size": 1000, "arguments": arguments,
            "tune_params": BLOCKS, "quiet": True, **kw}
    with pytest.raises(DropInError, match=says) as refused:
        kforge.tune_kernel(**call)
    assert isinstance(refused.value, ValueError) and not job.specs


FILTERED = """
__constant__ float d_filter[3][3];
__global__ void filtered(float *out, const float *in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = d_filter[1][1] * in[i];
}
"""


def test_cmem_args_fill_the_kernels_constant_arrays_with_their_values(job):
    """As Kernel Tuner's convolution example passes its filter: a __constant__ array, not a parameter."""
    weights = np.arange(9, dtype=np.float32).reshape(3, 3)
    arguments = [np.zeros(1000, np.float32), np.ones(1000, np.float32), np.int32(1000)]
    kforge.tune_kernel("filtered", FILTERED, 1000, arguments, BLOCKS, cmem_args={"d_filter": weights}, quiet=True)
    spec = job.specs[0]
    assert [(a.name, a.effective_role) for a in spec.args] == [("out", "inout"), ("in", "in"), ("n", "scalar"),
                                                                ("d_filter", "constant")]
    assert [a.name for a in spec.parameters] == ["out", "in", "n"] and spec.shape_of(spec.args[3]) == (3, 3)
    saved = io.BytesIO()
    np.save(saved, weights)  # the job's data file holds the weights as they were given
    assert spec.args[3].data.sha256 == hashlib.sha256(saved.getvalue()).hexdigest()


def test_the_source_may_be_a_file_name_and_the_call_goes_through_the_module_too(job, tmp_path):
    source = tmp_path / "vector_add.cu"
    source.write_text(VECTOR_ADD)
    arguments, _ = vector_add_arguments()
    import kforge as kernel_tuner  # the drop-in form of `import kernel_tuner`

    results, _ = kernel_tuner.tune_kernel("vector_add", str(source), 1000, arguments, BLOCKS, quiet=True)
    assert len(results) == 4 and job.specs[0].source == VECTOR_ADD
    assert [a.effective_role for a in job.specs[0].args] == ["inout", "in", "in", "scalar"]


# --- a real job ---------------------------------------------------------------------------------------------
def test_a_kernel_tuner_script_runs_as_a_real_job_up_to_the_gpu(tmp_path):
    """The vector_add script of examples/kernel_tuner, at a small size, through kforge's runtime in a process of
    its own: admitted (its dtypes checked against the kernel's PTX) and run; without a GPU it ends where the
    device is needed, saying so."""
    script = (ROOT / "examples" / "kernel_tuner" / "vector_add.py").read_text().replace("50_000_000", "100_000")
    (tmp_path / "script.py").write_text(script)
    env = {**os.environ, "KFORGE_HOME": str(tmp_path / "home")}
    for name in ("REDIS_URL", "DATABASE_URL"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "script.py", "cache.json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    from tests.conftest import HAS_GPU

    if HAS_GPU:
        assert done.returncode == 0, done.stderr
        assert "best block size" in done.stdout
    else:
        assert "failed at device: no CUDA device" in done.stderr, done.stdout + done.stderr
