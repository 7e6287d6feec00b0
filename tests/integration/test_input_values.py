"""Inputs users need, end to end without a GPU: a gather kernel whose indices come from `range: [0, n]`
compiles with NVRTC, its spec is admitted and its drawn indices are valid; the gateway refuses a spec that
names files (data, answer) and records nothing."""
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from kforge.specfile import load_spec
from services.gateway.app import create_app
from shared.adapters.device.compiler import compile_kernel, parameter_types
from shared.adapters.eventstore import EventStore
from shared.adapters.inputs import make_arrays
from shared.adapters.settings import Settings
from shared.application.limits import Limits, limit_errors
from shared.application.runtime import Runtime
from tests.fakes import RecordingBus

GATHER = """// out[i] = x[idx[i]]: every index must be a valid element of x.
extern "C" __global__ void gather(float *out, const float *x, const int *idx, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) out[i] = x[idx[i]];
}
"""
SPEC = """kernel_name: gather
sizes: {n: 100003}
args:
  - {name: out, dtype: float32, shape: [n], role: out}
  - {name: x, dtype: float32, shape: [n]%s}
  - {name: idx, dtype: int32, shape: [n], range: [0, n]}
  - {name: n, dtype: int32, value: n}
tune_params: {block_size_x: [128, 256]}
"""


@pytest.fixture
def gather(tmp_path) -> Path:
    (tmp_path / "gather.cu").write_text(GATHER)
    (tmp_path / "gather.yaml").write_text(SPEC % "")
    return tmp_path / "gather.cu"


def test_a_gather_kernel_with_an_index_range_compiles_and_is_admitted(gather):
    spec = load_spec(gather, None)
    assert limit_errors(spec, Limits()) == []
    params = spec.baseline_params()
    compiled = compile_kernel(spec.source, spec.kernel_name, params, spec.compiler_options, "sm_90")
    assert compiled.lowered_name == "gather" and compiled.cubin
    assert parameter_types(spec.source, spec.kernel_name, params, [], "sm_90") == ["u64", "u64", "u64", "u32"]
    for trial in (spec, spec.with_sizes({"n": 100002})):  # the verifier's odd sizes draw their own range
        arrays = make_arrays(trial, 7)
        n = trial.sizes["n"]
        assert arrays["idx"].min() >= 0 and arrays["idx"].max() == n - 1
        assert np.array_equal(arrays["x"][arrays["idx"]], np.take(arrays["x"], arrays["idx"], mode="raise"))


@pytest.fixture
def client(tmp_path, sqlite_url):
    settings = Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None)
    rt = Runtime(settings=settings, store=EventStore(sqlite_url), bus=RecordingBus())
    with TestClient(create_app(lambda: rt)) as client:
        yield client, rt
    rt.store.close()


def test_the_gateway_refuses_files_and_records_nothing(gather, client):
    client, rt = client
    np.save(gather.parent / "x.npy", np.ones(100003, np.float32))
    (gather.parent / "gather.yaml").write_text(SPEC % ", data: x.npy")
    spec = load_spec(gather, None).model_dump(mode="json")
    spec["args"][1]["data"]["path"] = "/etc/passwd"  # what a stranger would send
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    assert response.json()["errors"] == [{"field": "args[1].data", "message": (
        "names a file on kforge's machines, which a submission over HTTP may not: submit the job with the kforge CLI "
        "or Python API where the file is, or describe the values with range and sorted")}]
    assert rt.store.stream_ids("job-") == [] and rt.bus.messages == []
