"""The HTTP gateway over a real SQLite event store: submit, read, validation errors, OpenAPI, and one
embedded end-to-end job (planner and benchmark tasks run in-process; NVRTC compiles for real)."""
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kforge.specfile import load_spec
from services.gateway.app import create_app
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.application.runtime import Runtime
from shared.domain.contracts import PlannerCatchUp
from tests.conftest import HAS_GPU
from tests.fakes import RecordingBus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def rt(tmp_path, sqlite_url):
    settings = Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None)
    rt = Runtime(settings=settings, store=EventStore(sqlite_url), bus=RecordingBus())
    yield rt
    rt.store.close()


@pytest.fixture
def client(rt):
    with TestClient(create_app(lambda: rt)) as client:
        yield client


@pytest.fixture
def spec_json() -> dict:
    return load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")


def _submit(client, body) -> str:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()["job_id"]


# --- submitting and reading ---------------------------------------------------------------------

def test_submit_returns_202_with_job_id_and_urls(client, rt, spec_json):
    response = client.post("/v1/jobs", json=spec_json)

    assert response.status_code == 202
    body = response.json()
    job_id = body["job_id"]
    assert job_id and set(body) == {"job_id", "status_url", "events_url", "stream_url"}
    assert body["status_url"] == f"/v1/jobs/{job_id}"
    assert body["events_url"] == f"/v1/jobs/{job_id}/events"
    assert body["stream_url"] == f"/v1/jobs/{job_id}/stream"
    # the job is in the store and the planner was asked to act on it
    assert rt.store.stream_ids("job-") == [f"job-{job_id}"]
    assert [m.task for m in rt.bus.messages] == [PlannerCatchUp.task]
    # the URLs it hands back work
    assert client.get(body["status_url"]).status_code == 200
    assert client.get(body["events_url"]).status_code == 200


def test_get_job_shows_submitted(client, spec_json):
    job_id = _submit(client, spec_json)

    response = client.get(f"/v1/jobs/{job_id}")

    assert response.status_code == 200
    job = response.json()
    assert job["job_id"] == job_id
    assert job["status"] == "submitted"
    assert job["kernel_name"] == "vector_add"
    assert job["strategy"] == "tune"  # the example tunes its block size
    assert job["events"] == 1
    assert job["submitted_at"] is not None
    assert job["failed_stage"] is None and job["failure"] is None and job["baseline_ms"] is None


def test_get_events_lists_job_submitted_with_position_and_payload(client, spec_json):
    job_id = _submit(client, spec_json)

    response = client.get(f"/v1/jobs/{job_id}/events")

    assert response.status_code == 200
    (event,) = response.json()
    assert event["type"] == "JobSubmitted"
    assert event["version"] == 3  # v2 added `run`, v3 `tenant`
    assert event["stream_id"] == f"job-{job_id}"
    assert event["stream_version"] == 1
    assert isinstance(event["position"], int) and event["position"] >= 1
    assert event["payload"]["submitted_by"] == "http"
    assert event["payload"]["tenant"] == "local"  # an open gateway's callers are the local tenant, as the CLI is
    assert event["payload"]["spec"]["kernel_name"] == "vector_add"
    assert event["payload"]["spec"]["source"] == spec_json["source"]
    assert event["payload"]["spec"]["sizes"] == {"n": 67108864}
    # the envelope is not repeated inside the payload
    assert "event_id" not in event["payload"] and "position" not in event["payload"]


def test_unknown_job_is_404(client):
    for url in ("/v1/jobs/doesnotexist", "/v1/jobs/doesnotexist/events"):
        response = client.get(url)
        assert response.status_code == 404
        assert "doesnotexist" in response.json()["detail"]


def test_list_jobs_oldest_first(client, spec_json):
    assert client.get("/v1/jobs").json() == []
    first = _submit(client, spec_json)
    second = _submit(client, spec_json)

    response = client.get("/v1/jobs")

    assert response.status_code == 200
    jobs = response.json()
    assert [j["job_id"] for j in jobs] == [first, second]
    assert all(j["status"] == "submitted" and j["kernel_name"] == "vector_add" for j in jobs)


# --- validation errors --------------------------------------------------------------------------

def _problem(client, body) -> dict:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert set(problem) == {"detail", "errors"}
    assert problem["detail"] == f"{len(problem['errors'])} invalid field(s)"
    for error in problem["errors"]:
        assert set(error) == {"field", "message"}
        assert not error["field"].startswith("body")
    return problem


def _only(problem: dict) -> dict:
    (error,) = problem["errors"]
    return error


def test_unknown_dtype_names_the_arg_and_the_dtypes(client, rt, spec_json):
    spec_json["args"][0]["dtype"] = "float"

    error = _only(_problem(client, spec_json))

    assert error["field"] == "args[0].dtype"
    assert "'float'" in error["message"]
    assert "float32" in error["message"] and "use one of" in error["message"]
    assert rt.store.stream_ids() == [] and rt.bus.messages == []  # nothing submitted


def test_missing_kernel_name(client, spec_json):
    del spec_json["kernel_name"]

    error = _only(_problem(client, spec_json))

    assert error == {"field": "kernel_name", "message": "required: add this field"}


def test_unknown_field_suggests_the_known_one(client, spec_json):
    spec_json["tune_param"] = {"block_size_x": [32, 64]}

    error = _only(_problem(client, spec_json))

    assert error["field"] == "tune_param"
    assert "unknown field" in error["message"]
    assert "did you mean 'tune_params'?" in error["message"]


def test_unknown_nested_field_suggests_the_known_one(client, spec_json):
    spec_json["benchmark"] = {"iteration": 5}

    error = _only(_problem(client, spec_json))

    assert error["field"] == "benchmark.iteration"
    assert "did you mean 'iterations'?" in error["message"]


def test_wrong_type_says_what_it_got(client, spec_json):
    spec_json["sizes"] = {"n": "lots"}

    error = _only(_problem(client, spec_json))

    assert error["field"] == "sizes.n"
    assert "valid integer" in error["message"]
    assert "(got 'lots')" in error["message"]


def test_several_errors_are_all_reported(client, spec_json):
    spec_json["args"][1]["dtype"] = "double"
    spec_json["benchmark"] = {"iterations": "many"}
    del spec_json["kernel_name"]

    problem = _problem(client, spec_json)

    fields = {e["field"] for e in problem["errors"]}
    assert fields == {"args[1].dtype", "benchmark.iterations", "kernel_name"}
    assert problem["detail"] == "3 invalid field(s)"


def test_whole_spec_checks_name_their_field(client, spec_json):
    spec_json["kernel_name"] = "vector_sub"

    error = _only(_problem(client, spec_json))

    assert error["field"] == "kernel_name"
    assert "'vector_sub' is not defined in source" in error["message"]
    assert "vector_add" in error["message"]


def test_a_kernel_that_disagrees_with_its_args_is_one_422_naming_every_argument_and_limit(client, rt, spec_json):
    # vector_add(float *c, const float *a, const float *b, int n): the spec swaps n for an array and passes c by
    # value, as a 64-bit float, and asks for a size above the limit; a tune job would launch it on these args.
    spec_json["args"][0] = {"name": "c", "dtype": "float64", "value": 1}
    spec_json["args"][3] = {"name": "n", "dtype": "int32", "shape": ["n"], "role": "out"}
    spec_json["sizes"]["n"] = 1 << 40

    problem = _problem(client, spec_json)

    assert [e["field"] for e in problem["errors"]] == ["sizes.n", "args[0]", "args[3]"]
    assert "declares .u64: give c a shape if the kernel takes an array there" in problem["errors"][1]["message"]
    assert "declares .u32: give n a value instead of a shape" in problem["errors"][2]["message"]
    assert rt.store.stream_ids() == [] and rt.bus.messages == []  # nothing submitted


def test_malformed_json_body_is_not_reported_as_an_array_index(client):
    response = client.post("/v1/jobs", content=b'{"kernel_name": ', headers={"content-type": "application/json"})

    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["field"] == ""  # the offset of the syntax error is not an array index
    assert "not valid JSON at character 16" in error["message"] and "JSON object" in error["message"]


# --- OpenAPI ------------------------------------------------------------------------------------

def test_openapi_operation_ids(client):
    response = client.get("/openapi.json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    operations = {(path, method): op["operationId"] for path, ops in paths.items() for method, op in ops.items()}
    assert operations == {
        ("/v1/jobs", "post"): "submit_job",
        ("/v1/jobs", "get"): "list_jobs",
        ("/v1/jobs/{job_id}", "get"): "get_job",
        ("/v1/jobs/{job_id}/events", "get"): "get_job_events",
        ("/v1/jobs/{job_id}/tracker", "get"): "get_job_tracker",
        ("/v1/jobs/{job_id}/suggestions", "get"): "get_job_suggestions",
        ("/v1/jobs/{job_id}/profile", "get"): "get_job_profile",
        ("/v1/jobs/{job_id}/plots/{plot}.svg", "get"): "get_job_plot",
        ("/v1/profile", "get"): "get_profile",
        ("/v1/compare", "get"): "compare_runs",
        ("/v1/slow", "get"): "list_slow_kernels",
        ("/v1/jobs/{job_id}/cancel", "post"): "cancel_job",
        ("/v1/jobs/{job_id}/stream", "get"): "stream_job_events",
        ("/v1/jobs/{job_id}/webhooks", "get"): "get_job_webhooks",
    }
    submit = paths["/v1/jobs"]["post"]["responses"]
    assert "202" in submit and "422" in submit
    assert submit["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ValidationProblem")


# --- one job end to end, embedded ---------------------------------------------------------------

@pytest.fixture
def embedded(tmp_path):
    import kforge.worker  # noqa: F401  (registers the planner and benchmark Celery tasks)

    rt = runtime.build(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None))
    runtime.install(rt)
    yield rt
    runtime.install(None)
    rt.store.close()


@pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the job measures a baseline instead of failing")
def test_embedded_job_runs_to_device_failure(embedded, tmp_path):
    assert embedded.settings.embedded
    assert embedded.store.url == f"sqlite:///{tmp_path / 'kforge.db'}"
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")

    with TestClient(create_app(runtime.current)) as client:
        job_id = _submit(client, spec)
        embedded.bus.wait_idle()

        job = client.get(f"/v1/jobs/{job_id}").json()
        events = client.get(f"/v1/jobs/{job_id}/events").json()

    assert job["status"] == "failed"
    assert job["failed_stage"] == "device"
    assert job["failure"].startswith("no CUDA device")
    assert job["events"] == 6
    assert [e["type"] for e in events if e["type"] != "TaskProfiled"] == [
        "JobSubmitted", "BaselineRequested", "KernelCompiled", "BaselineFailed", "JobFailed"]
    assert [e["stream_version"] for e in events] == [1, 2, 3, 4, 5, 6]
    positions = [e["position"] for e in events]
    assert positions == sorted(positions) and len(set(positions)) == 6
    events = [e for e in events if e["type"] != "TaskProfiled"]
    requested, compiled, failed = events[1], events[2], events[3]
    assert requested["payload"]["queue"] == "benchmark.0"
    assert requested["payload"]["params"]["block_size_x"] == 256
    assert compiled["payload"]["arch"] == "sm_90"
    assert compiled["payload"]["request_id"] == requested["event_id"] == failed["payload"]["request_id"]
    assert failed["payload"]["stage"] == "device"
    assert events[4]["payload"] == {"stage": "device", "reason": job["failure"]}
