"""Webhooks end to end: a real loopback receiver (allowed by configuration, as loopback must be), signatures
checked with the Standard Webhooks reference library, retries with backoff recorded as events, the
delivery history over HTTP, and refusal of private, loopback and link-local addresses."""
import ipaddress
import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from kforge.specfile import load_spec
from services.gateway.app import create_app
from services.webhooks import handlers
from services.webhooks.sender import HttpSender
from services.webhooks.signing import signed_headers
from shared.adapters.settings import Settings
from shared.adapters.webhook_addresses import WebhookUrlRefused, allowed_addresses
from shared.application import runtime
from shared.application.jobs import job_events
from shared.domain.events import JobSubmitted, WebhookRequested
from shared.domain.projections import job_stream
from tests.fakes import RecordingBus
from tests.webhook_receivers import (SECRET, deliver_all, finished_job, receiver_factory,  # noqa: F401 (the fixture)
                                     webhook_settings)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# --- signing ---------------------------------------------------------------------------------------

def test_signature_verifies_with_the_standard_webhooks_library():
    body = json.dumps({"type": "job.completed", "data": {"job_id": "abc"}}).encode()
    now = int(time.time())
    headers = signed_headers(SECRET, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", now, body)

    verified = Webhook(SECRET).verify(body, headers)

    assert verified == {"type": "job.completed", "data": {"job_id": "abc"}}
    tampered = body.replace(b"abc", b"abd")
    with pytest.raises(Exception, match="signature"):
        Webhook(SECRET).verify(tampered, headers)


# --- where webhooks may go -------------------------------------------------------------------------

@pytest.mark.parametrize("url, kind", [
    ("http://127.0.0.1:9000/x", "loopback"), ("http://localhost/x", "loopback"), ("http://[::1]/x", "loopback"),
    ("http://10.1.2.3/x", "private"), ("http://192.168.0.7/x", "private"),
    ("http://169.254.169.254/latest/meta-data", "link-local"), ("http://[fe80::1]/x", "link-local"),
    ("http://[::ffff:127.0.0.1]/x", "loopback"), ("http://0.0.0.0/x", "unspecified"),
])
def test_private_loopback_and_link_local_addresses_are_refused(url, kind):
    with pytest.raises(WebhookUrlRefused, match=rf"\({kind} address\)") as refused:
        allowed_addresses(url, [])
    assert "KFORGE_WEBHOOK_ALLOWED_NETWORKS" in str(refused.value)


def test_public_addresses_and_allowed_networks_pass():
    assert allowed_addresses("https://8.8.8.8/hook", []) == [ipaddress.ip_address("8.8.8.8")]
    assert allowed_addresses("http://127.0.0.1:9000/x", ["127.0.0.0/8"]) == [ipaddress.ip_address("127.0.0.1")]
    # IPv6 forms that embed a public IPv4 address (NAT64, 6to4) pass, and the request goes to the IPv6 address.
    for public in ("64:ff9b::808:808", "2002:808:808::1"):
        assert allowed_addresses(f"http://[{public}]/x", []) == [ipaddress.ip_address(public)]
    with pytest.raises(WebhookUrlRefused, match="does not resolve"):
        allowed_addresses("http://no-such-host.invalid/x", [])
    with pytest.raises(WebhookUrlRefused, match="http"):
        allowed_addresses("ftp://8.8.8.8/x", [])


def test_gateway_refuses_a_loopback_webhook_unless_configured(tmp_path, sqlite_url, vector_add_spec):
    from shared.adapters.eventstore import EventStore
    from shared.application.runtime import Runtime

    body = {**vector_add_spec.model_dump(mode="json"), "webhook_url": "http://127.0.0.1:8080/hook"}
    strict = Runtime(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None), EventStore(sqlite_url),
                     RecordingBus())
    with TestClient(create_app(lambda: strict)) as client:
        response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert error["field"] == "webhook_url" and "loopback" in error["message"]
    assert strict.store.stream_ids() == []  # nothing recorded

    allowing = Runtime(webhook_settings(tmp_path), strict.store, RecordingBus())
    with TestClient(create_app(lambda: allowing)) as client:
        assert client.post("/v1/jobs", json=body).status_code == 202


# --- delivery, retries, history --------------------------------------------------------------------

def test_a_failed_delivery_is_retried_with_backoff_until_it_is_delivered(store, vector_add_spec, tmp_path, receiver_factory):
    receiver = receiver_factory([500, 503])
    settings = webhook_settings(tmp_path, KFORGE_WEBHOOK_RETRY_DELAYS_S="1,2,4")
    job_id, request = finished_job(store, vector_add_spec, receiver.url)

    events = deliver_all(store, settings, job_id, request.event_id)

    assert [e.type for e in events] == ["WebhookRequested", "WebhookAttempted", "WebhookAttempted",
                                        "WebhookAttempted", "WebhookDelivered"]
    attempts = events[1:4]
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert [a.status_code for a in attempts] == [500, 503, 200]
    assert [a.retry_in_s for a in attempts] == [1.0, 2.0, None]  # the configured backoff, then none needed
    assert attempts[0].error == "HTTP 500: thanks" and attempts[2].error is None
    assert events[-1].attempts == 3 and events[-1].status_code == 200
    # Every attempt carries the same webhook-id (receivers drop repeats by it) and a valid signature.
    for headers, body, _ in receiver.received:
        assert headers["webhook-id"] == str(request.event_id)
        sent = Webhook(SECRET).verify(body, headers)
        assert sent["type"] == "job.completed" and sent["data"]["job_id"] == job_id
        assert sent["data"]["status"] == "completed" and sent["data"]["summary"] == "tuned 1.0 ms"
    assert receiver.received[0][0]["host"] == receiver.url.split("/")[2]  # sent to the checked address, same Host
    assert receiver.received[0][0]["accept-encoding"] == "identity"  # answers are never decompressed
    assert len({body for _, body, _ in receiver.received}) == 1  # the job as it ended: one body for every attempt

    # A redelivered task records nothing twice.
    handlers.deliver(store, RecordingBus(), job_id, request.event_id, 2, settings, HttpSender())
    assert len(job_events(store, job_id)) == 3 + 4


def test_delivery_is_abandoned_when_retries_run_out_or_the_receiver_is_gone(store, vector_add_spec, tmp_path,
                                                                             receiver_factory):
    failing = receiver_factory([500, 500, 500])
    settings = webhook_settings(tmp_path, KFORGE_WEBHOOK_RETRY_DELAYS_S="1")
    job_id, request = finished_job(store, vector_add_spec, failing.url)
    events = deliver_all(store, settings, job_id, request.event_id)
    assert [e.type for e in events][1:] == ["WebhookAttempted", "WebhookAttempted", "WebhookAbandoned"]
    assert events[-1].reason == "2 attempts failed, the last: HTTP 500: thanks"

    gone = receiver_factory([410])
    stream = job_stream("fedcba987654")
    request = WebhookRequested(stream_id=stream, queue="webhooks", url=gone.url, kind="job.failed")
    store.append(stream, [JobSubmitted(stream_id=stream, spec=vector_add_spec), request], expected_version=0)
    events = deliver_all(store, settings, "fedcba987654", request.event_id)
    assert [e.type for e in events][1:] == ["WebhookAttempted", "WebhookAbandoned"]
    assert events[-1].reason == "HTTP 410: thanks" and len(gone.received) == 1


def test_a_url_refused_at_delivery_is_abandoned_without_a_request(store, vector_add_spec, tmp_path, receiver_factory):
    receiver = receiver_factory()
    job_id, request = finished_job(store, vector_add_spec, receiver.url)
    strict = Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, KFORGE_WEBHOOK_SECRET=SECRET)

    events = deliver_all(store, strict, job_id, request.event_id)

    assert [e.type for e in events][1:] == ["WebhookAttempted", "WebhookAbandoned"]
    assert "loopback" in events[-1].reason and events[1].status_code is None
    assert receiver.received == []


def test_embedded_job_announces_its_end_and_the_history_is_served(tmp_path, receiver_factory):
    """The whole path in one process: planner, replayed benchmark, webhooks worker with real backoff."""
    import kforge.worker  # noqa: F401  (registers every service's tasks)

    receiver = receiver_factory([502])
    rt = runtime.build(webhook_settings(tmp_path, KFORGE_WEBHOOK_RETRY_DELAYS_S="0.5"))
    runtime.install(rt)
    try:
        body = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")
        body = {**body, "benchmark": {**body["benchmark"], "replay": True}, "webhook_url": receiver.url}
        with TestClient(create_app(runtime.current)) as client:
            job_id = client.post("/v1/jobs", json=body).json()["job_id"]
            rt.bus.wait_idle()  # includes the retry, which waits its backoff first
            history = client.get(f"/v1/jobs/{job_id}/webhooks").json()
    finally:
        runtime.install(None)
        rt.store.close()

    [delivery] = history
    assert delivery["kind"] == "job.completed" and delivery["status"] == "delivered"
    assert [(a["attempt"], a["status_code"], a["retry_in_s"]) for a in delivery["attempts"]] == [
        (1, 502, 0.5), (2, 200, None)]
    (_, _, first), (headers, body, second) = receiver.received
    assert second - first >= 0.5  # the backoff was waited
    sent = Webhook(SECRET).verify(body, headers)
    assert sent["data"]["replay"] is True and sent["data"]["speedup"] > 0
