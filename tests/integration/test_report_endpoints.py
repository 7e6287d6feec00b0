"""The reports over HTTP, read from a real SQLite store holding whole jobs' event streams."""
import pytest
from fastapi.testclient import TestClient

from services.gateway.app import create_app
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.runtime import Runtime
from tests.fakes import RecordingBus
from tests.report_streams import rewrite_job, tune_job


@pytest.fixture
def client(tmp_path, sqlite_url, vector_add_spec):
    rt = Runtime(settings=Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None),
                 store=EventStore(sqlite_url), bus=RecordingBus())
    for events in (tune_job(vector_add_spec, "aaaa1", run="before"), tune_job(vector_add_spec, "bbbb2", run="after",
                                                                               scale=1.5),
                   rewrite_job(vector_add_spec, "cccc3")):
        rt.store.append(events[0].stream_id, [e.model_copy(update={"stream_version": None, "position": None})
                                              for e in events], expected_version=0)
    with TestClient(create_app(lambda: rt)) as client:
        yield client
    rt.store.close()


def test_tracker_and_its_derived_figures(client):
    body = client.get("/v1/jobs/cccc3/tracker").json()
    assert body["baseline_time"] == 1.0 and body["final_time"] == 0.5 and body["speedup"] == 2.0
    assert body["total_improvement_percent"] == 50.0
    assert [s["step_id"] for s in body["steps"]] == ["elements_per_thread"]
    assert client.get("/v1/jobs/nope/tracker").status_code == 404


def test_compare_runs_by_name(client):
    body = client.get("/v1/compare", params={"baseline": "before", "current": "after"}).json()
    assert body["summary"]["regressions_count"] == 1
    assert body["kernels"][0]["change_type"] == "REGRESSION" and body["kernels"][0]["change_percent"] == \
        pytest.approx(50.0)
    # Over HTTP a run is a name or a job, never a file on the server.
    missing = client.get("/v1/compare", params={"baseline": "/etc/passwd.json", "current": "after"})
    assert missing.status_code == 404 and "neither a run file" in missing.json()["detail"]
    assert client.get("/v1/compare", params={"baseline": "before", "current": "after", "alpha": 2}).status_code == 422


def test_suggestions_profile_slow_and_plots(client):
    suggestions = client.get("/v1/jobs/aaaa1/suggestions").json()
    assert {s["type"] for s in suggestions} >= {"memory", "occupancy"}
    profile = client.get("/v1/jobs/cccc3/profile", params={"threshold": 0.35}).json()
    assert profile["bottlenecks"] == ["verification"] and profile["jobs"] == ["cccc3"]
    everything = client.get("/v1/profile").json()
    assert everything["jobs"] == ["aaaa1", "bbbb2", "cccc3"]
    assert client.get("/v1/profile", params={"threshold": 0}).status_code == 422
    # The kernel's best over its three jobs is the rewrite's 2x: below 2.5x, not below 1.5x.
    slow = client.get("/v1/slow", params={"threshold": 2.5}).json()
    assert [(k["kernel"], k["speedup"], k["job_id"]) for k in slow] == [("vector_add[n=67108864]", 2.0, "cccc3")]
    assert client.get("/v1/slow", params={"threshold": 1.5}).json() == []
    plot = client.get("/v1/jobs/cccc3/plots/landscape.svg")
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/svg+xml" and "<svg" in plot.text
    assert client.get("/v1/jobs/cccc3/plots/other.svg").status_code == 422
