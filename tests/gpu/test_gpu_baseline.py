"""GPU checks of the baseline path: run them on the GPU machine (`make test-gpu`)."""
import json
import os
import subprocess
import sys
from uuid import uuid4

import numpy as np
import pytest

from services.benchmark import compiler, gpu, handlers
from services.planner.policy import react
from shared.events import BaselineMeasured, JobSubmitted
from shared.eventstore import EventStore
from shared.inputs import make_arrays
from shared.projections import project_job
from tests.fakes import RecordingBus
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu


def _compile(spec, params):
    arch = gpu.probe(0).arch
    return compiler.compile_kernel(spec.source, spec.kernel_name, params, spec.compiler_options, arch)


def test_vector_add_output_is_exact_on_an_odd_size(vector_add_spec):
    spec = vector_add_spec.model_copy(update={"sizes": {"n": 1_000_003}})
    params = spec.baseline_params()
    kernel = _compile(spec, params)
    arrays = make_arrays(spec, seed=7)
    args = [arrays[a.name] if a.is_array else spec.scalar_of(a, params) for a in spec.args]
    grid, block = spec.launch_geometry(params)
    timing = gpu.time_kernel(0, kernel.cubin, kernel.lowered_name, grid, block, args, [0], warmup=1, iterations=3)
    np.testing.assert_array_equal(timing.outputs["0"], arrays["a"] + arrays["b"])
    assert len(timing.samples_ms) == 3 and all(t > 0 for t in timing.samples_ms)


def test_an_impossible_block_is_reported_not_timed(vector_add_spec):
    params = {**vector_add_spec.baseline_params(), "block_size_x": 2048}
    spec = vector_add_spec.model_copy(update={"sizes": {"n": 4096}})
    kernel = _compile(spec, params)
    arrays = make_arrays(spec, seed=1)
    args = [arrays[a.name] if a.is_array else spec.scalar_of(a, params) for a in spec.args]
    with pytest.raises(gpu.LaunchFailed, match="INVALID_VALUE"):
        gpu.time_kernel(0, kernel.cubin, kernel.lowered_name, (2, 1, 1), (2048, 1, 1), args, [0], 0, 1)


@pytest.mark.parametrize("example, sizes", [("vector_add", {"n": 1 << 22}), ("matmul", {"n": 1024}),
                                            ("reduction", {"n": 1 << 22, "blocks": 1024})])
def test_baseline_of_each_example_is_measured(tmp_path, example, sizes):
    from kforge.specfile import load_spec

    spec = load_spec(EXAMPLES / f"{example}.cu", EXAMPLES / f"{example}.yaml").model_copy(update={"sizes": sizes})
    store, bus = EventStore(f"sqlite:///{tmp_path / 'e.db'}"), RecordingBus()
    stream = f"job-{uuid4().hex[:12]}"
    submitted = store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)[0]
    request = react(submitted, project_job([submitted]), ["0"]).events
    store.append(stream, request, expected_version=1)
    handlers.measure_baseline(store, bus, stream.removeprefix("job-"), request[0].event_id, 0, "sm_90")
    measured = [e for e in store.read_stream(stream) if isinstance(e, BaselineMeasured)]
    assert len(measured) == 1, [e.type for e in store.read_stream(stream)]
    assert measured[0].median_ms > 0 and len(measured[0].samples_ms) == spec.benchmark.iterations
    print(f"{example} {sizes}: median {measured[0].median_ms:.4f} ms on {measured[0].device}")


def test_kforge_tune_completes_a_baseline_job(tmp_path):
    env = {**os.environ, "KFORGE_HOME": str(tmp_path), "COLUMNS": "200"}
    env.pop("REDIS_URL", None), env.pop("DATABASE_URL", None)
    kforge = [sys.executable, "-m", "kforge"]
    tune = subprocess.run([*kforge, "tune", str(EXAMPLES / "vector_add.cu"), "--spec", str(EXAMPLES / "vector_add.yaml")],
                          capture_output=True, text=True, env=env, timeout=300)
    print(tune.stdout, tune.stderr)
    assert tune.returncode == 0 and "completed" in tune.stdout
    jobs = subprocess.run([*kforge, "jobs"], capture_output=True, text=True, env=env, timeout=60).stdout
    job_id = next(line.split()[1] for line in jobs.splitlines() if "vector_add" in line)
    listed = subprocess.run([*kforge, "events", job_id, "--json"], capture_output=True, text=True, env=env,
                            timeout=60).stdout.splitlines()
    events = [json.loads(line) for line in listed]
    assert [e["type"] for e in events] == ["JobSubmitted", "BaselineRequested", "KernelCompiled",
                                           "BaselineMeasured", "JobCompleted"]
    assert [e["position"] for e in events] == sorted(e["position"] for e in events)
