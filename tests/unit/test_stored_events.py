"""Stored history stays readable: every event type, as earlier kforges wrote it, decodes with this one.

tests/unit/stored_events/ holds samples frozen as the event store keeps them (type, version, payload, envelope),
one file per kforge that wrote some: each holds the events whose shape (their fields, nested ones included)
that kforge changed, written by that commit's own event classes from the values of tests/stored_event_samples.py.
Together they cover every event type, every version an upcaster reads, and every shape those values took in each
kforge since the planner's strategies landed (ec6e781). Builds before it (the first evening's) are not covered:
they wrote StepAccepted, StepDiscarded, TuningCompleted, CandidateGenerated, CandidateVerified and
CandidateRejected with other fields under the same version 1, which this kforge cannot read.

A change that stops a sample decoding would strand the jobs stored with it: give it an upcaster (shared/domain/events.py)
instead of changing the sample. tests/stored_event_samples.py says how to add samples; never rewrite one.
"""
import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest
from sqlalchemy import insert

from shared.adapters.eventstore import EventStore, events_table
from shared.application.jobs import list_jobs
from shared.domain.events import EVENTS, Undecodable

# Read here, not through tests/stored_event_samples.py, which builds today's events: the samples stand alone.
FILES = {path.name: json.loads(path.read_text())
         for path in sorted((Path(__file__).parent / "stored_events").glob("*.json"))}
RECORDS = [(name, r) for name, f in FILES.items() for r in f["events"]]


def test_every_event_type_and_every_version_an_upcaster_reads_has_a_sample():
    stored = {(r["type"], r["version"]) for _, r in RECORDS}
    current = {(name, cls.schema_version) for name, cls in EVENTS.types.items()}
    assert current - stored == set(), "add their samples: python -m tests.stored_event_samples"
    assert set(EVENTS.upcasters) - stored == set(), "an older version read by an upcaster has no sample"


@pytest.mark.parametrize("name, record", RECORDS,
                         ids=[f"{name.removesuffix('.json')}:{r['type']}.v{r['version']}" for name, r in RECORDS])
def test_a_stored_sample_decodes_as_todays_event(name, record):
    envelope = record["envelope"]

    event = EVENTS.decode(record["type"], record["version"], dict(record["payload"]), envelope)

    cls = EVENTS.types[record["type"]]
    assert type(event) is cls and event.version == cls.schema_version  # upcast to today's version
    assert event.event_id == UUID(envelope["event_id"]) and event.stream_id == envelope["stream_id"]
    assert event.occurred_at == datetime.fromisoformat(envelope["occurred_at"])
    # and what this kforge writes of it reads back the same
    assert EVENTS.decode(event.type, event.version, event.payload(), envelope) == event


def test_the_samples_read_back_through_the_store_and_list_as_jobs(sqlite_url):
    """Stored as rows, every sample reads back through the event store and folds into its job; an event this
    kforge cannot read marks only its own job, and `kforge jobs` (list_jobs) goes on past it."""
    store = EventStore(sqlite_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(insert(events_table).values(  # first: the listing must go on past it
                event_id="00000000-0000-0000-0000-00000000f00d", stream_id="job-from-the-future", stream_version=1,
                type="JobRenamedByTheFuture", version=1, occurred_at=datetime(2030, 1, 1, tzinfo=UTC),
                payload={"name": "x"}))
            for _, r in RECORDS:
                envelope = r["envelope"]
                conn.execute(insert(events_table).values(
                    event_id=envelope["event_id"], stream_id=envelope["stream_id"],
                    stream_version=envelope["stream_version"], type=r["type"], version=r["version"],
                    occurred_at=datetime.fromisoformat(envelope["occurred_at"]), payload=r["payload"]))

        log = store.read_log()
        assert [e.type for e in log if isinstance(e, Undecodable)] == ["JobRenamedByTheFuture"]
        for stream in {r["envelope"]["stream_id"] for _, r in RECORDS}:
            assert len(store.read_stream(stream)) == sum(r["envelope"]["stream_id"] == stream for _, r in RECORDS)

        jobs = {view.job_id: view for view in list_jobs(store)}
        assert jobs.pop("from-the-future").unreadable.startswith("event ")
        assert set(jobs) == {r["envelope"]["stream_id"].removeprefix("job-") for _, r in RECORDS}
        assert all(view.unreadable is None for view in jobs.values())
    finally:
        store.close()
