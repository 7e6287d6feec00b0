"""The gateway's edges over a real SQLite store: cancelling, the live event stream (SSE), API keys, the body
size limit and the bound on unfinished jobs."""
import json
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from kforge.specfile import load_spec
from services.gateway.app import create_app
from services.planner.handlers import catch_up
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.runtime import Runtime
from shared.domain.events import BaselineRequested, JobCompleted
from shared.domain.projections import job_stream
from tests.fakes import RecordingBus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JSON = {"content-type": "application/json"}


@pytest.fixture
def make_client(tmp_path, sqlite_url):
    made = []

    def make(**env) -> tuple[TestClient, Runtime]:
        rt = Runtime(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, **env),
                     EventStore(sqlite_url), RecordingBus())
        made.append((TestClient(create_app(lambda: rt)), rt))
        return made[-1]

    yield make
    for client, rt in made:
        client.close()
        rt.store.close()


@pytest.fixture
def spec_json() -> dict:
    return load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")


def test_cancel_ends_an_unfinished_job_once(make_client, spec_json):
    client, rt = make_client()
    job_id = client.post("/v1/jobs", json=spec_json).json()["job_id"]

    response = client.post(f"/v1/jobs/{job_id}/cancel", json={"reason": "wrong problem size"})

    assert response.status_code == 202
    assert response.json()["status"] == "cancelled" and response.json()["failure"] == "wrong problem size"
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=JSON)  # no body: the default reason
    assert again.status_code == 409 and "cancelled already" in again.json()["detail"]
    assert client.post("/v1/jobs/nosuchjob/cancel", headers=JSON).status_code == 404
    # The planner, reaching the submission only now, starts nothing for the cancelled job.
    catch_up(rt.store, RecordingBus(), ["0"])
    assert [e.type for e in rt.store.read_stream(job_stream(job_id))] == ["JobSubmitted", "JobCancelled"]


def _sse(lines) -> list[dict]:
    """Parse a text/event-stream into its events (comments skipped)."""
    events, current = [], {}
    for line in lines:
        if not line:
            if current:
                events.append(current)
            current = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(": ")
            current[field] = value
    return events


def test_stream_sends_each_event_live_then_the_finished_job(make_client, spec_json):
    client, rt = make_client()
    job_id = client.post("/v1/jobs", json=spec_json).json()["job_id"]
    stream = job_stream(job_id)

    def progress():  # the workers' part, while the client listens
        time.sleep(0.4)
        rt.store.append(stream, [BaselineRequested(stream_id=stream, queue="benchmark.0", params={})], None)
        time.sleep(0.4)
        rt.store.append(stream, [JobCompleted(stream_id=stream, summary="done")], None)

    worker = threading.Thread(target=progress)
    worker.start()
    started = time.monotonic()
    with client.stream("GET", f"/v1/jobs/{job_id}/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _sse(response.iter_lines())
    worker.join()

    assert time.monotonic() - started >= 0.8  # it waited for the events as they happened
    assert [(e["event"], e.get("id")) for e in events] == [
        ("JobSubmitted", "1"), ("BaselineRequested", "2"), ("JobCompleted", "3"), ("end", None)]
    assert json.loads(events[1]["data"])["payload"]["queue"] == "benchmark.0"
    assert json.loads(events[-1]["data"])["status"] == "completed"

    # A client reconnecting with Last-Event-ID gets only what it missed.
    with client.stream("GET", f"/v1/jobs/{job_id}/stream", headers={"Last-Event-ID": "2"}) as response:
        assert [e["event"] for e in _sse(response.iter_lines())] == ["JobCompleted", "end"]
    assert client.get("/v1/jobs/nosuchjob/stream").status_code == 404


def test_api_keys_guard_the_api_but_not_the_openapi_document(make_client, spec_json):
    client, rt = make_client(KFORGE_API_KEYS="k-alpha, k-beta")

    missing = client.get("/v1/jobs")
    assert missing.status_code == 401 and "X-API-Key" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "X-API-Key"
    assert client.get("/v1/jobs", headers={"X-API-Key": "k-gamma"}).status_code == 401
    assert client.post("/v1/jobs", json=spec_json).status_code == 401
    assert rt.store.stream_ids() == []  # nothing submitted without a key
    assert client.get("/v1/jobs", headers={"X-API-Key": "k-beta"}).status_code == 200
    assert client.post("/v1/jobs", json=spec_json, headers={"X-API-Key": "k-alpha"}).status_code == 202
    document = client.get("/openapi.json").json()
    assert document["components"]["securitySchemes"]["APIKeyHeader"] == {
        "type": "apiKey", "in": "header", "name": "X-API-Key",
        "description": "required when the server sets KFORGE_API_KEYS"}

    open_client, _ = make_client()
    assert open_client.get("/v1/jobs").status_code == 200  # no keys configured: an open gateway


def test_bodies_over_the_limit_are_refused_with_413(make_client, spec_json):
    client, rt = make_client(KFORGE_MAX_REQUEST_BYTES="4096")
    big = {**spec_json, "source": spec_json["source"] + "// padding\n" * 1000}

    declared = client.post("/v1/jobs", json=big)
    assert declared.status_code == 413 and "KFORGE_MAX_REQUEST_BYTES" in declared.json()["detail"]

    def chunks():  # no Content-Length: the limit applies as the bytes arrive
        body = json.dumps(big).encode()
        for start in range(0, len(body), 1024):
            yield body[start:start + 1024]

    streamed = client.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert rt.store.stream_ids() == []
    assert client.post("/v1/jobs", json=spec_json).status_code == 202  # a normal spec still fits


def test_submissions_beyond_the_open_job_limit_get_429_and_nothing_is_lost(make_client, spec_json):
    client, rt = make_client(KFORGE_MAX_OPEN_JOBS="3")
    answers = [client.post("/v1/jobs", json=spec_json) for _ in range(5)]

    assert [a.status_code for a in answers] == [202, 202, 202, 429, 429]
    assert answers[3].headers["retry-after"] == "30" and "3 jobs are unfinished" in answers[3].json()["detail"]
    accepted = {a.json()["job_id"] for a in answers if a.status_code == 202}
    assert {s.removeprefix("job-") for s in rt.store.stream_ids("job-")} == accepted
    # Once one has ended there is room again.
    first = sorted(accepted)[0]
    client.post(f"/v1/jobs/{first}/cancel", json={})
    assert client.post("/v1/jobs", json=spec_json).status_code == 202


def test_a_submission_that_finds_every_admission_compile_taken_gets_429(make_client, spec_json, monkeypatch):
    from shared.application import kernel_admission

    monkeypatch.setattr(kernel_admission, "SLOT_WAIT_S", 0.05)
    client, rt = make_client(KFORGE_ADMISSION_COMPILES="1")
    gate = kernel_admission._compile_slots(1)
    assert gate.acquire(timeout=5)  # a compile bomb another request sent, still compiling
    try:
        busy = client.post("/v1/jobs", json=spec_json)
    finally:
        gate.release()

    assert busy.status_code == 429 and busy.headers["retry-after"] == "30"
    assert "KFORGE_ADMISSION_COMPILES" in busy.json()["detail"] and rt.store.stream_ids() == []
    assert client.post("/v1/jobs", json=spec_json).status_code == 202
