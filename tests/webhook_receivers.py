"""Webhook receivers on loopback and a finished job asking for its webhook, for the webhook tests.

A Receiver is a real HTTP server on 127.0.0.1 that records each POST (headers, body, arrival time) and
answers with scripted statuses or with a given answer function. Use it through the `receiver_factory`
fixture: `from tests.webhook_receivers import receiver_factory` in a test module. Loopback must be allowed
for a webhook to reach it: `webhook_settings` allows 127.0.0.0/8."""
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from services.webhooks import handlers
from services.webhooks.sender import HttpSender
from shared.adapters.settings import Settings
from shared.application.jobs import job_events
from shared.domain.contracts import DeliverWebhook
from shared.domain.events import JobCompleted, JobSubmitted, WebhookRequested
from shared.domain.projections import job_stream
from tests.fakes import RecordingBus

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class Receiver:
    """An HTTP server on loopback. It records each POST, then answers with `answer` (called with the request
    handler) or, by default, with the next scripted status (200 once they run out) and "thanks"."""

    def __init__(self, statuses: Iterable[int] = (), answer: Callable[[BaseHTTPRequestHandler], None] | None = None):
        self.statuses, self.received = list(statuses), []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append((dict(self.headers), body, time.monotonic()))
                if answer:
                    return answer(self)
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.end_headers()
                self.wfile.write(b"thanks")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/kforge?source=test"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_factory():
    made = []

    def make(statuses=(), answer=None):
        made.append(Receiver(list(statuses), answer))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def webhook_settings(tmp_path, **env) -> Settings:
    return Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, KFORGE_WEBHOOK_SECRET=SECRET,
                    KFORGE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8", **env)


def finished_job(store, spec, url: str) -> tuple[str, WebhookRequested]:
    """A job that has completed and asked for its webhook, as the planner leaves it."""
    stream = job_stream("0123456789ab")
    submitted = JobSubmitted(stream_id=stream, spec=spec.model_validate({**spec.model_dump(), "webhook_url": url}))
    request = WebhookRequested(stream_id=stream, queue="webhooks", url=url, kind="job.completed")
    store.append(stream, [submitted, JobCompleted(stream_id=stream, summary="tuned 1.0 ms"), request],
                 expected_version=0)
    return "0123456789ab", request


def deliver_all(store, settings, job_id, request_id) -> list:
    """Run the delivery task and every retry it schedules, as the webhooks worker would (without the waits)."""
    bus, attempt = RecordingBus(), 1
    while True:
        handlers.deliver(store, bus, job_id, request_id, attempt, settings, HttpSender())
        if not bus.messages:
            return [e for e in job_events(store, job_id) if e.type.startswith("Webhook")]
        message = bus.messages.pop()
        assert message.task == DeliverWebhook.task and message.kwargs["attempt"] == attempt + 1
        assert message.message_id == f"{request_id}:{attempt + 1}"
        attempt += 1
