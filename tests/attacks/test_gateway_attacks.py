"""Attacks on the gateway and on tenancy, each against the real app over a real event store: TestClient, or
uvicorn on loopback where many connections or processes must run at once.

Keys: alice and bob are tenants, root an admin key."""
import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import insert

from kforge.specfile import load_spec
from services.gateway.access import tenant_of
from services.gateway.app import create_app
from services.generator.handlers import generate
from shared.adapters.eventstore import EventStore, events_table
from shared.adapters.settings import Settings
from shared.application.runtime import Runtime
from shared.domain.events import BaselineMeasured, GenerationRequested, GeneratorCalled, StepAccepted
from shared.domain.projections import job_stream
from tests.conftest import record_attack
from tests.fakes import RecordingBus
from tests.messages_api import messages_api  # noqa: F401  (fixture)
from tests.report_streams import tune_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALICE, BOB, ROOT = {"X-API-Key": "alice-key"}, {"X-API-Key": "bob-key"}, {"X-API-Key": "root-key"}
KEYS = dict(KFORGE_API_KEYS="alice-key,bob-key", KFORGE_ADMIN_API_KEYS="root-key")


@pytest.fixture
def spec_json() -> dict:
    return load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")


@pytest.fixture
def gateway(tmp_path, sqlite_url):
    """make(store_url=..., **settings) -> (TestClient, Runtime): the app over a real store."""
    made = []

    def make(store_url: str = sqlite_url, raise_server_exceptions: bool = True, **env) -> tuple[TestClient, Runtime]:
        rt = Runtime(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, **env), EventStore(store_url),
                     RecordingBus())
        client = TestClient(create_app(lambda: rt), raise_server_exceptions=raise_server_exceptions)
        made.append((client.__enter__(), rt))
        return made[-1]

    yield make
    for client, rt in made:
        client.__exit__(None, None, None)
        rt.store.close()


def _submit(client, spec_json, headers, **params) -> str:
    response = client.post("/v1/jobs", json=spec_json, headers=headers, params=params)
    assert response.status_code == 202, response.text
    return response.json()["job_id"]


# --- tenancy ------------------------------------------------------------------------------------------

def test_another_key_cannot_read_cancel_or_report_on_a_job(gateway, spec_json, vector_add_spec):
    client, rt = gateway(**KEYS)
    job = _submit(client, spec_json, ALICE)
    finished = [e.model_copy(update={"tenant": tenant_of("alice-key")}) if e.type == "JobSubmitted" else e
                for e in tune_job(vector_add_spec, "a11ce0", run="nightly")]
    rt.store.append(finished[0].stream_id, [e.model_copy(update={"stream_version": None, "position": None})
                                            for e in finished], expected_version=0)
    routes = [("GET", f"/v1/jobs/{j}{tail}") for j in (job, "a11ce0")
              for tail in ("", "/events", "/stream", "/tracker", "/suggestions", "/profile", "/webhooks",
                           "/plots/history.svg", "/plots/landscape.svg")]
    routes += [("POST", f"/v1/jobs/{job}/cancel"), ("GET", f"/v1/profile?job={job}"),
               ("GET", f"/v1/compare?baseline={job}&current=a11ce0"),
               ("GET", "/v1/compare?baseline=nightly&current=nightly")]

    for method, url in routes:
        answer = client.request(method, url, headers={**BOB, "content-type": "application/json"})
        assert answer.status_code == 404, (url, answer.text)
        assert answer.headers["content-type"] == "application/json"
    # ...the same answer as for a job that does not exist: nothing tells bob that alice's job is there
    assert client.get(f"/v1/jobs/{job}", headers=BOB).json() == {"detail": f"no job {job}"}
    assert client.get("/v1/jobs", headers=BOB).json() == []
    assert client.get("/v1/slow?threshold=1000", headers=BOB).json() == []
    assert client.get("/v1/profile", headers=BOB).json()["jobs"] == []
    # alice's job is untouched, and alice and the admin key see what bob could not
    assert client.get(f"/v1/jobs/{job}", headers=ALICE).json()["status"] == "submitted"
    assert [j["job_id"] for j in client.get("/v1/jobs", headers=ALICE).json()] == [job, "a11ce0"]
    assert [r["job_id"] for r in client.get("/v1/slow?threshold=1000", headers=ALICE).json()] == ["a11ce0"]
    assert client.get("/v1/compare?baseline=nightly&current=nightly", headers=ALICE).status_code == 200
    assert client.get(f"/v1/jobs/{job}/tracker", headers=ROOT).status_code == 200
    assert {j["job_id"] for j in client.get("/v1/jobs", headers=ROOT).json()} == {job, "a11ce0"}
    # the store holds a hash of the key, never the key
    submitted = rt.store.read_stream(job_stream(job))[0]
    assert submitted.tenant == tenant_of("alice-key") and "alice-key" not in submitted.model_dump_json()
    record_attack("another tenant's job", f"bob's key on {len(routes)} per-job and cross-job routes of alice's jobs "
                  "(get, events, stream, cancel, reports, webhooks, plots, profile, compare by id and run, slow, list)",
                  "404 on each, the same as for no job; empty lists; alice's job not cancelled; the admin key sees all")


REWRITE = """```cuda
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * BLOCK_SIZE_X + threadIdx.x;  // alice's secret rewrite
    if (i < n) c[i] = a[i] + b[i];
}
```

```json
{"tune_params": {"block_size_x": [128, 256]}, "params": {"block_size_x": 128}}
```
"""


def test_retrieval_quotes_no_other_tenants_kernel(gateway, spec_json, messages_api, tmp_path):
    client, rt = gateway(**KEYS)
    settings = Settings(KFORGE_HOME=str(tmp_path), ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=messages_api.url,
                        KFORGE_LLM_MAX_RETRIES=0)
    explicit = {**spec_json, "strategy": {"name": "explicit"}, "generator": {"provider": "anthropic", "rag_k": 3}}

    def ask(job_id: str, kind: str, step=None) -> list:
        stream = job_stream(job_id)
        request = GenerationRequested(stream_id=stream, queue="generator", kind=kind, step=step,
                                      candidate_id=step["id"] if step else None)
        rt.store.append(stream, [request], expected_version=None)
        generate(rt.store, RecordingBus(), job_id, request.event_id, settings)
        return [e for e in rt.store.read_stream(stream) if getattr(e, "request_id", None) == request.event_id]

    alices = _submit(client, explicit, ALICE)
    stream = job_stream(alices)
    rt.store.append(stream, [BaselineMeasured(stream_id=stream, request_id=uuid4(), device="GPU",
                                              params={"block_size_x": 256}, grid=(1, 1, 1), block=(256, 1, 1),
                                              samples_ms=[1.0], median_ms=1.0)], expected_version=None)
    messages_api.answer(REWRITE)
    ask(alices, "rewrite", {"id": "unroll", "description": "unroll", "tune_params": {"unroll": [1, 2]}})
    rt.store.append(stream, [StepAccepted(stream_id=stream, step_id="unroll", candidate_id="unroll", old_time_ms=1.0,
                                          new_time_ms=0.8, best_params={"block_size_x": 128}, speedup=1.25,
                                          speedup_ci=(1.2, 1.3))], expected_version=None)
    bobs, alices_next = _submit(client, explicit, BOB), _submit(client, explicit, ALICE)
    replaying = _submit(client, {**explicit, "generator": {"provider": "replay", "replay_job": alices}}, BOB)
    for _ in range(2):
        messages_api.answer('```json\n{"steps": []}\n```')

    bob_call = next(e for e in ask(bobs, "plan") if isinstance(e, GeneratorCalled))
    alice_call = next(e for e in ask(alices_next, "plan") if isinstance(e, GeneratorCalled))
    replayed = ask(replaying, "plan")

    assert "alice's secret rewrite" not in bob_call.prompt and "accepted earlier" not in bob_call.prompt
    assert "alice's secret rewrite" in alice_call.prompt  # retrieval works within a tenant
    assert all(getattr(e, "response", "") == "" for e in replayed)
    assert "no recorded generator calls" in replayed[-1].reason
    record_attack("retrieval across tenants", "bob's job on the same kernel as alice's accepted rewrite, asking "
                  "for a plan with rag_k=3; and bob's job replaying alice's job's generator answers",
                  "bob's prompt quotes none of alice's kernels (alice's next job does); the replay finds nothing")


def test_per_key_quota_of_open_jobs_holds_under_a_burst(gateway, spec_json, postgres_url):
    client, rt = gateway(store_url=postgres_url, KFORGE_MAX_OPEN_JOBS_PER_KEY="3", **KEYS)
    server = _Server(create_app(lambda: rt)).start()

    def burst(headers) -> list[httpx.Response]:
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(
            httpx.post(server.url + "/v1/jobs", json=spec_json, headers=headers, timeout=30))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return answers

    try:
        alice = burst(ALICE)
        bob = client.post("/v1/jobs", json=spec_json, headers=BOB)
    finally:
        server.stop()

    assert sorted(a.status_code for a in alice) == [202] * 3 + [429] * 5
    refused = next(a for a in alice if a.status_code == 429)
    assert refused.headers["retry-after"] == "30" and "3 of your jobs are unfinished" in refused.json()["detail"]
    assert bob.status_code == 202  # another key's quota is its own
    assert len(rt.store.stream_ids("job-")) == 4
    record_attack("one key flooding the queue", "8 concurrent submissions with one key, quota 3, PostgreSQL store",
                  "3 accepted, 5 refused with 429 and Retry-After (counted in the append lock); another key still "
                  "submits")


def test_api_keys_that_list_no_key_stop_the_gateway(tmp_path, gateway):
    env = {**os.environ, "KFORGE_HOME": str(tmp_path), "KFORGE_API_KEYS": ","}
    env.pop("DATABASE_URL", None), env.pop("REDIS_URL", None)
    started = subprocess.run([sys.executable, "-m", "kforge", "serve", "--port", str(_free_port())], env=env,
                             capture_output=True, text=True, timeout=60)

    assert started.returncode == 2
    assert "KFORGE_API_KEYS" in started.stdout and "lists nothing" in started.stdout
    with pytest.raises(ValueError, match="lists nothing"):
        gateway(KFORGE_API_KEYS=" , ")
    record_attack("a key list that is only commas", 'KFORGE_API_KEYS="," (would parse to no key: an open gateway)',
                  "kforge serve exits 2 naming the setting before it listens")


# --- requests from other sites --------------------------------------------------------------------------

def test_foreign_host_headers_are_refused(gateway, monkeypatch):
    monkeypatch.delenv("KFORGE_ALLOWED_HOSTS")
    client, _ = gateway()  # the default: this machine's loopback names only

    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST"):
        assert client.get("/v1/jobs", headers={"host": host}).status_code == 200, host
    for host in ("evil.example", "localhost.evil.example", "127.0.0.1.nip.io:8000", "testserver", ""):
        answer = client.get("/v1/jobs", headers={"host": host})
        assert answer.status_code == 400 and "KFORGE_ALLOWED_HOSTS" in answer.json()["detail"], host
    assert client.get("/metrics", headers={"host": "evil.example"}).status_code == 400
    anywhere, _ = gateway(KFORGE_ALLOWED_HOSTS="*")
    assert anywhere.get("/v1/jobs", headers={"host": "evil.example"}).status_code == 200
    record_attack("DNS rebinding", "Host: evil.example, localhost.evil.example, 127.0.0.1.nip.io, none",
                  "400 JSON on the API and metrics; loopback names on any port answer; * allows all")


def test_an_empty_cross_site_post_cannot_cancel(gateway, spec_json):
    client, _ = gateway()
    job = _submit(client, spec_json, {})

    for headers, body in (({}, None), ({"content-type": "text/plain"}, "{}"),
                          ({"content-type": "application/x-www-form-urlencoded"}, "reason=x"),
                          ({"content-type": "multipart/form-data; boundary=x"}, "--x--")):
        answer = client.post(f"/v1/jobs/{job}/cancel", headers={"origin": "https://evil.example", **headers},
                             content=body)
        assert answer.status_code == 415 and "application/json" in answer.json()["detail"], headers
    assert client.get(f"/v1/jobs/{job}").json()["status"] == "submitted"
    assert client.post("/v1/jobs", content=b"{}", headers={"content-type": "text/plain"}).status_code == 415
    assert client.post(f"/v1/jobs/{job}/cancel", headers={"content-type": "application/json"}).status_code == 202
    record_attack("cross-site cancel", "POST /cancel with no body and no type, text/plain, a form, multipart "
                  "(what a page on another site may send without asking)", "415 JSON each; the job still runs")


# --- a bad event, a failing server, many streams ------------------------------------------------------

def test_an_undecodable_event_marks_only_its_own_job(gateway, spec_json):
    client, rt = gateway()
    unknown, invalid, fine = (_submit(client, spec_json, {}) for _ in range(3))
    rows = [(unknown, "JobRenamedByTheFuture", 1, {"name": "x"}), (invalid, "JobCompleted", 1, {"summery": "typo"})]
    with rt.store.engine.begin() as conn:
        for job, type_, version, payload in rows:
            conn.execute(insert(events_table).values(
                event_id=str(uuid4()), stream_id=job_stream(job), stream_version=2, type=type_, version=version,
                occurred_at=datetime.now(UTC), payload=payload))
    positions = {job: p for job, p in ((e.stream_id.removeprefix("job-"), e.position)
                                       for e in rt.store.read_log() if e.stream_version == 2)}

    listed = client.get("/v1/jobs")

    assert listed.status_code == 200
    jobs = {j["job_id"]: j for j in listed.json()}
    assert jobs[unknown]["status"] == "unreadable"
    assert jobs[unknown]["unreadable"].startswith(f"event {positions[unknown]} (JobRenamedByTheFuture v1)")
    assert jobs[invalid]["status"] == "unreadable" and "(JobCompleted v1)" in jobs[invalid]["unreadable"]
    assert "summary" in jobs[invalid]["unreadable"]
    assert jobs[fine]["status"] == "submitted" and jobs[fine]["unreadable"] is None
    assert client.get(f"/v1/jobs/{unknown}").json()["status"] == "unreadable"
    events = client.get(f"/v1/jobs/{unknown}/events")
    assert events.status_code == 500 and f"event {positions[unknown]}" in events.json()["detail"]
    assert client.get(f"/v1/jobs/{fine}/events").status_code == 200
    for report in ("/v1/slow", "/v1/profile", f"/v1/compare?baseline={fine}&current={fine}"):
        assert client.get(report).status_code == 200, report  # reports over many jobs go on without those two
    assert client.post(f"/v1/jobs/{fine}/cancel", json={}).status_code == 202
    record_attack("an event this build cannot read", "an unknown event type in one job, a JobCompleted whose payload "
                  "no longer validates in another", "/v1/jobs, /v1/slow, /v1/profile and /v1/compare answer 200: "
                  "those two jobs show status unreadable naming the event's position and type; the third job reads "
                  "and cancels as usual")


def test_an_internal_error_is_a_json_problem_without_internals(gateway, caplog):
    client, rt = gateway(raise_server_exceptions=False)

    def broken(*args, **kwargs):
        raise RuntimeError("password=hunter2 at /srv/kforge/secret.py")

    rt.store.read_log = broken
    answer = client.get("/v1/jobs")

    assert answer.status_code == 500 and answer.headers["content-type"] == "application/json"
    assert "incident" in answer.json()["detail"] and "hunter2" not in answer.text
    assert "hunter2" in caplog.text  # the operator's log has it
    record_attack("an internal error", "the event store failing with secrets in its message during GET /v1/jobs",
                  "500 JSON Problem with an incident id; the message only in the server log")


def test_many_streams_are_bounded_and_a_plain_get_stays_fast(gateway, spec_json):
    client, rt = gateway(KFORGE_SSE_MAX_STREAMS="200", KFORGE_SSE_MAX_STREAMS_PER_KEY="150", **KEYS)
    alices, bobs = _submit(client, spec_json, ALICE), _submit(client, spec_json, BOB)
    server = _Server(create_app(lambda: rt)).start()

    async def attack() -> tuple[dict, float, list[int]]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as http:
            opened, refused, open_responses = [], [], []

            async def open_stream(job: str, headers: dict) -> None:
                request = http.build_request("GET", f"/v1/jobs/{job}/stream", headers=headers)
                response = await http.send(request, stream=True)
                if response.status_code == 200:
                    open_responses.append(response)
                    opened.append(headers["X-API-Key"])
                else:
                    refused.append((response.status_code, response.headers.get("retry-after"),
                                    (await response.aread()).decode()))
                    await response.aclose()

            await asyncio.gather(*(open_stream(alices, ALICE) for _ in range(200)))
            await asyncio.gather(*(open_stream(bobs, BOB) for _ in range(100)))
            started = time.perf_counter()
            plain = await http.get(f"/v1/jobs/{alices}", headers=ALICE)
            get_s = time.perf_counter() - started
            assert plain.status_code == 200
            # one event reaches every open stream, through the one shared poller
            await asyncio.to_thread(client.post, f"/v1/jobs/{alices}/cancel", json={}, headers=ALICE)
            ends = await asyncio.gather(*(_until_end(r) for r in open_responses if r.request.headers["X-API-Key"]
                                          == "alice-key"))
            for response in open_responses:
                await response.aclose()
            return {"opened": opened, "refused": refused}, get_s, ends

    try:
        seen, get_s, ends = asyncio.run(attack())
    finally:
        server.stop()

    assert seen["opened"].count("alice-key") == 150 and seen["opened"].count("bob-key") == 50
    assert len(seen["refused"]) == 100
    assert all(status == 429 and retry == "30" for status, retry, _ in seen["refused"])
    assert any("KFORGE_SSE_MAX_STREAMS_PER_KEY" in body for _, _, body in seen["refused"])
    assert any("KFORGE_SSE_MAX_STREAMS)" in body for _, _, body in seen["refused"])
    assert get_s < 0.5, f"a plain GET took {get_s:.2f} s with 200 streams open"
    assert ends == ["cancelled"] * 150
    record_attack("many live streams", "300 SSE streams at once: 200 with one key, 100 with another (bounds: 150 "
                  "per key, 200 in all); a GET and a cancel while they are open",
                  f"150 + 50 open, 100 refused with 429 JSON and Retry-After; the GET took {get_s * 1000:.0f} ms; "
                  "the cancel reached all 150 of the job's streams")


async def _until_end(response: httpx.Response) -> str:
    import json

    event = None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event == "end":
            return json.loads(line.removeprefix("data: "))["status"]
    return "closed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server(uvicorn.Server):
    """The app under uvicorn in a thread, on a free loopback port."""

    def __init__(self, app):
        super().__init__(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, backlog=1024))
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def start(self) -> "_Server":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        return self

    def stop(self) -> None:
        self.should_exit = True
        self.thread.join(10)
        self.socket.close()
