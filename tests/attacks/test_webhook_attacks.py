"""Attacks through a job's webhook: a receiver that holds the worker by dripping its answer, one that answers
with a compression bomb or without end, and webhook URLs that hide a private IPv4 address inside an IPv6 one.

The receivers are real HTTP servers on loopback (allowed by KFORGE_WEBHOOK_ALLOWED_NETWORKS, as loopback
must be for them to be called at all); the deliveries are the webhooks handler with its real sender,
recorded in a real event store."""
import resource
import time
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler

import pytest

from services.webhooks import handlers
from services.webhooks.sender import MAX_ANSWER_BYTES, HttpSender
from shared.adapters.settings import Settings
from shared.application.jobs import Admission, AdmissionRefused, job_events, submit_job
from tests.conftest import record_attack
from tests.fakes import RecordingBus
from tests.webhook_receivers import (SECRET, deliver_all, finished_job, receiver_factory,  # noqa: F401 (the fixture)
                                     webhook_settings)

DEADLINE_S = 1.0
SLACK_S = 0.5
DRIP_EVERY_S = 0.25  # well under the deadline: a timeout per read would never fire
BOMB_BYTES = 256 << 20  # what the gzip answer below grows to when decompressed
MEMORY_GROWTH_LIMIT = 4 << 20
MIB_OF_X = b"x" * (1 << 20)  # made once: the receiver runs in this process, inside what is measured


def _first_attempt(store, settings, job_id, request):
    """Run the delivery's first attempt as the webhooks worker would; its WebhookAttempted event."""
    handlers.deliver(store, RecordingBus(), job_id, request.event_id, 1, settings, HttpSender())
    [attempted] = [e for e in job_events(store, job_id) if e.type == "WebhookAttempted"]
    return attempted


def _drip(handler: BaseHTTPRequestHandler, head: bytes, dripped: bytes) -> None:
    """Send `head` at once, then `dripped` one byte at a time, until the client hangs up."""
    try:
        handler.wfile.write(head)
        for byte in dripped:
            handler.wfile.write(bytes([byte]))
            time.sleep(DRIP_EVERY_S)
    except OSError:
        pass  # the sender gave up: what this attack is for


DRIPS = {
    "status line and headers": (b"", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Padding: " + b"a" * 100),
    "body": (b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1000\r\n\r\n", b"slow" * 250),
}


@pytest.mark.parametrize("part", sorted(DRIPS))
def test_a_receiver_dripping_its_answer_holds_the_worker_no_longer_than_the_deadline(
        part, store, vector_add_spec, tmp_path, receiver_factory):
    head, dripped = DRIPS[part]
    receiver = receiver_factory(answer=lambda handler: _drip(handler, head, dripped))
    settings = webhook_settings(tmp_path, KFORGE_WEBHOOK_TIMEOUT_S=str(DEADLINE_S), KFORGE_WEBHOOK_RETRY_DELAYS_S="5")
    job_id, request = finished_job(store, vector_add_spec, receiver.url)

    started = time.monotonic()
    attempted = _first_attempt(store, settings, job_id, request)
    took = time.monotonic() - started

    assert len(receiver.received) == 1  # the request went out, and the drip began
    assert took < DEADLINE_S + SLACK_S
    assert attempted.status_code is None and attempted.retry_in_s == 5.0  # a failed attempt, retried later
    assert f"no whole answer within {DEADLINE_S:g} s (KFORGE_WEBHOOK_TIMEOUT_S)" in attempted.error
    assert attempted.duration_ms < (DEADLINE_S + SLACK_S) * 1e3
    record_attack(f"webhook receiver drips its {part}",
                  f"one byte every {DRIP_EVERY_S} s, {len(dripped)} bytes in all ({len(dripped) * DRIP_EVERY_S:.0f} s)",
                  f"attempt ended after {took:.2f} s (deadline {DEADLINE_S:g} s), recorded as failed and retried")


def _gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    zeros = bytes(1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(BOMB_BYTES >> 20)) + compressor.flush()


def _endless(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(500)
    handler.send_header("Content-Type", "text/plain")
    handler.end_headers()  # no length: the body ends when the connection does
    try:
        while True:
            handler.wfile.write(MIB_OF_X)
    except OSError:
        pass


def _gzip_answer(body: bytes):
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(500)
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        try:
            handler.wfile.write(body)
        except OSError:
            pass
    return answer


@pytest.mark.parametrize("answer", ["a gzip bomb", "an endless body"])
def test_a_huge_answer_neither_grows_the_worker_nor_fills_the_history(answer, store, vector_add_spec, tmp_path,
                                                                       receiver_factory):
    bomb = _gzip_bomb() if answer == "a gzip bomb" else b""
    receiver = receiver_factory(answer=_gzip_answer(bomb) if bomb else _endless)
    settings = webhook_settings(tmp_path, KFORGE_WEBHOOK_RETRY_DELAYS_S="5")
    job_id, request = finished_job(store, vector_add_spec, receiver.url)

    # ru_maxrss is the process's peak so far: it grows only if this attempt goes past every earlier peak, so it
    # bounds the growth from above; tracemalloc sees every Python allocation, the decompressed bytes included.
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        attempted = _first_attempt(store, settings, job_id, request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_rss_kib) << 10

    assert receiver.received[0][0]["accept-encoding"] == "identity"
    assert peak < MEMORY_GROWTH_LIMIT and rss_growth < MEMORY_GROWTH_LIMIT
    assert attempted.status_code == 500 and attempted.retry_in_s == 5.0
    # What was read, as it was sent: the first bytes of the bomb, still gzip (its magic bytes 1f 8b first).
    sent = bomb or MIB_OF_X
    kept = sent[:MAX_ANSWER_BYTES].decode("utf-8", "backslashreplace")
    assert attempted.error == (f"HTTP 500: {'[gzip, not decoded] ' if bomb else ''}{kept}"
                               f"… (cut at {MAX_ANSWER_BYTES} bytes)")
    tried = (f"{len(bomb) >> 10} KiB of gzip growing to {BOMB_BYTES >> 20} MiB, sent despite Accept-Encoding: identity"
             if bomb else "a 500 whose body never ends (1 MiB writes until the connection closes)")
    record_attack(f"webhook receiver answers with {answer}", tried,
                  f"Python heap peak {peak >> 10} KiB, RSS peak +{rss_growth >> 10} KiB; "
                  f"{MAX_ANSWER_BYTES} bytes kept, undecoded, in the failed attempt")


# Each hides a private IPv4 address in an IPv6 one; written out by hand, as an attacker would send them.
EMBEDDED = {
    "IPv4-compatible ::/96": ("::7f00:1", "127.0.0.1", "::/96"),
    "IPv4-translated ::ffff:0:0:0/96": ("::ffff:0:7f00:1", "127.0.0.1", "::ffff:0:0:0/96"),
    "IPv4-mapped ::ffff:0:0/96": ("::ffff:a9fe:a9fe", "169.254.169.254", "::ffff:0:0/96"),
    "NAT64 64:ff9b::/96": ("64:ff9b::a9fe:a9fe", "169.254.169.254", "64:ff9b::/96"),
    "local-use NAT64 64:ff9b:1::/48, /96 layout": ("64:ff9b:1::a00:1", "10.0.0.1", "64:ff9b:1::/48"),
    "local-use NAT64 64:ff9b:1::/48, /48 layout (bits 64-71 skipped)": ("64:ff9b:1:7f00:0:100::", "127.0.0.1",
                                                                       "64:ff9b:1::/48"),
    "6to4 2002::/16": ("2002:a9fe:a9fe::1", "169.254.169.254", "2002::/16"),
    "Teredo 2001::/32, client XOR-obfuscated": ("2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1", "2001::/32"),
}


@pytest.mark.parametrize("form", sorted(EMBEDDED))
@pytest.mark.parametrize("ipv6_prefix_allowed", [False, True], ids=["nothing allowed", "IPv6 prefix allowed"])
def test_an_ipv6_address_embedding_a_private_ipv4_is_refused_at_submission_and_at_each_attempt(
        form, ipv6_prefix_allowed, store, vector_add_spec, tmp_path):
    address, ipv4, prefix = EMBEDDED[form]
    url = f"http://[{address}]:8080/hook"
    # Allowing the IPv6 prefix itself leaves the embedded IPv4 address the only thing that can refuse it.
    settings = Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, KFORGE_WEBHOOK_SECRET=SECRET,
                        KFORGE_WEBHOOK_ALLOWED_NETWORKS=prefix if ipv6_prefix_allowed else "")
    spec = vector_add_spec.model_validate({**vector_add_spec.model_dump(), "webhook_url": url})

    bus = RecordingBus()
    with pytest.raises(AdmissionRefused) as refused:
        submit_job(store, bus, spec, admission=Admission.of(settings))
    assert store.stream_ids() == [] and bus.messages == []  # nothing recorded, nothing sent
    [error] = refused.value.errors
    assert error.field == "webhook_url"
    if ipv6_prefix_allowed:  # with nothing allowed, an IPv6 address that is not public is refused as itself
        assert f"{ipv4} (" in error.message

    job_id, request = finished_job(store, vector_add_spec, url)  # as if it had been allowed when submitted
    events = deliver_all(store, settings, job_id, request.event_id)
    assert [e.type for e in events][1:] == ["WebhookAttempted", "WebhookAbandoned"]
    assert events[1].status_code is None and events[-1].reason == error.message
    record_attack(f"webhook URL in {form}" + (f", with {prefix} allowed" if ipv6_prefix_allowed else ""),
                  f"{url} (embeds {ipv4})", "refused at submission (nothing recorded) and abandoned at the attempt "
                  "(no request): " + error.message.partition(" resolves to ")[2].partition(", where")[0])
