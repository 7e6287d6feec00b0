"""Recovery sends again exactly the requests the broker lost: checked against the real Redis broker, with
messages really queued (and really missing) there, and a real event store."""
import pytest
from celery import Celery

from services.planner.handlers import catch_up
from services.planner.recovery import resend_lost
from shared.adapters.broker import Broker
from shared.adapters.bus import CeleryBus, configure_celery
from shared.adapters.settings import Settings
from shared.application.jobs import cancel_job
from shared.domain.contracts import DeliverWebhook, MeasureBaseline
from shared.domain.events import (BaselineMeasured, BaselineRequested, JobCompleted, JobSubmitted, WebhookAttempted,
                                  WebhookRequested)
from shared.domain.projections import job_stream
from tests.fakes import RecordingBus

pytestmark = pytest.mark.redis


@pytest.fixture
def broker_bus(redis_url, tmp_path):
    app = configure_celery(Celery("kforge-recovery-test"), Settings(REDIS_URL=redis_url, KFORGE_HOME=tmp_path))
    broker = Broker(redis_url)
    yield broker, CeleryBus(app)
    broker.close()


def _job(store, spec, job_id: str) -> BaselineRequested:
    """A submitted job whose baseline request the planner has reached and sent."""
    stream = job_stream(job_id)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)
    catch_up(store, RecordingBus(), ["0"])
    return next(e for e in store.read_stream(stream) if isinstance(e, BaselineRequested))


def test_only_requests_whose_messages_are_gone_are_sent_again(store, vector_add_spec, broker_bus):
    broker, celery_bus = broker_bus
    lost = _job(store, vector_add_spec, "aaaaaaaaaaa1")
    queued = _job(store, vector_add_spec, "aaaaaaaaaaa2")
    celery_bus.dispatch(MeasureBaseline.message(queued.queue, "aaaaaaaaaaa2", queued.event_id))  # still in Redis
    answered = _job(store, vector_add_spec, "aaaaaaaaaaa3")
    store.append(answered.stream_id, [BaselineMeasured(
        stream_id=answered.stream_id, request_id=answered.event_id, device="H100", params={}, grid=(1, 1, 1),
        block=(256, 1, 1), samples_ms=[1.0], median_ms=1.0)], expected_version=None)
    cancelled = _job(store, vector_add_spec, "aaaaaaaaaaa4")
    cancel_job(store, RecordingBus(), "aaaaaaaaaaa4", reason="no longer needed", cancelled_by="test")
    # A finished job's webhook is owed; its second attempt waits in the broker, so nothing is lost there.
    stream = job_stream("aaaaaaaaaaa5")
    webhook = WebhookRequested(stream_id=stream, queue="webhooks", url="https://example.com/h", kind="job.completed")
    store.append(stream, [JobSubmitted(stream_id=stream, spec=vector_add_spec), JobCompleted(stream_id=stream,
                 summary="done"), webhook, WebhookAttempted(stream_id=stream, request_id=webhook.event_id, attempt=1,
                 url=webhook.url, status_code=500, error="HTTP 500", duration_ms=3.0, retry_in_s=60.0)],
                 expected_version=0)
    celery_bus.dispatch(DeliverWebhook.message("aaaaaaaaaaa5", webhook.event_id, attempt=2, delay_s=60))
    orphan = WebhookRequested(stream_id=job_stream("aaaaaaaaaaa6"), queue="webhooks", url="https://example.com/h",
                              kind="job.failed")
    store.append(orphan.stream_id, [JobSubmitted(stream_id=orphan.stream_id, spec=vector_add_spec),
                                    JobCompleted(stream_id=orphan.stream_id, summary="x"), orphan], expected_version=0)
    catch_up(store, RecordingBus(), ["0"])
    # Not yet reached by the planner: it will send this one itself.
    unreached = job_stream("aaaaaaaaaaa7")
    store.append(unreached, [JobSubmitted(stream_id=unreached, spec=vector_add_spec),
                             BaselineRequested(stream_id=unreached, queue="benchmark.0", params={})],
                 expected_version=0)

    resent = RecordingBus()
    requests = resend_lost(store, resent, broker, ["0"])

    assert [r.event_id for r in requests] == [lost.event_id, orphan.event_id]
    assert [(m.task, m.message_id) for m in resent.messages] == [
        (MeasureBaseline.task, str(lost.event_id)), (DeliverWebhook.task, str(orphan.event_id))]
    assert str(queued.event_id) in broker.task_ids(["benchmark.0"])
    # Queued (with no worker to reserve them): the baseline, and the retry with its ETA.
    assert broker.depths(["benchmark.0", "webhooks"]) == {"benchmark.0": 1, "webhooks": 1}
    assert broker.unacknowledged() == 0 and str(cancelled.event_id) not in {str(r.event_id) for r in requests}


def test_one_recovery_at_a_time(broker_bus):
    broker, _ = broker_bus
    assert broker.claim("kforge:recovery-test", 5)
    assert not broker.claim("kforge:recovery-test", 5)
