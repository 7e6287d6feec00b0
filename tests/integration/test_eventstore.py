"""The event store's contract, checked against both databases it supports (SQLite and PostgreSQL).

Every test takes `store_url`, which conftest parametrises over a fresh SQLite file and a fresh
PostgreSQL database, so a guarantee that holds on one backend but not the other shows up as a failure.
"""
import threading
from datetime import UTC, datetime, timedelta, timezone
from uuid import uuid4

import pytest
from sqlalchemy import insert

from shared.adapters.eventstore import (ConcurrencyConflict, EventStore, OpenLimit, TooManyOpen, UnreadableEvent,
                                        events_table)
from shared.domain.events import (BaselineMeasured, BaselineRequested, JobCompleted, JobFailed, JobSubmitted,
                                  KernelCompiled, PlanProposed, Undecodable)
from shared.domain.spec import TuningStep


@pytest.fixture
def store(store_url):
    s = EventStore(store_url)
    yield s
    s.close()


def note(stream_id: str, text: str = "x") -> JobCompleted:
    """A small event with a payload, for tests that do not care which type they store."""
    return JobCompleted(stream_id=stream_id, summary=text)


def all_positions(store: EventStore) -> list[int]:
    return [e.position for e in store.read_all(0, limit=100_000)]


# --- appending ----------------------------------------------------------------------------------------
def test_append_to_new_stream_numbers_versions_and_positions(store):
    events = [note("job-a", f"e{i}") for i in range(3)]

    stored = store.append("job-a", events, expected_version=0)

    assert [e.stream_version for e in stored] == [1, 2, 3]
    positions = [e.position for e in stored]
    assert all(isinstance(p, int) for p in positions)
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert [e.event_id for e in stored] == [e.event_id for e in events]
    assert [e.summary for e in stored] == ["e0", "e1", "e2"]
    assert store.stream_version("job-a") == 3
    # The events passed in are not changed: events are immutable, the store returns copies.
    assert all(e.stream_version is None and e.position is None for e in events)

    more = store.append("job-a", [note("job-a", "e3")], expected_version=3)
    assert more[0].stream_version == 4
    assert more[0].position > positions[-1]


def test_stale_expected_version_conflicts_and_stores_nothing(store):
    store.append("job-a", [note("job-a"), note("job-a")], expected_version=0)
    before = store.read_all()

    for stale in (0, 1, 3):
        with pytest.raises(ConcurrencyConflict, match=r"job-a is at version 2.*expected " + str(stale)):
            store.append("job-a", [note("job-a", "late")], expected_version=stale)

    assert store.read_all() == before
    assert store.stream_version("job-a") == 2


def test_expected_version_none_appends_at_any_version(store):
    first = store.append("job-a", [note("job-a")], expected_version=None)
    assert first[0].stream_version == 1
    store.append("job-a", [note("job-a")], expected_version=1)

    later = store.append("job-a", [note("job-a"), note("job-a")], expected_version=None)

    assert [e.stream_version for e in later] == [3, 4]
    assert store.stream_version("job-a") == 4


def test_appending_the_same_events_again_is_a_no_op(store):
    events = [note("job-a", "one"), note("job-a", "two")]
    stored = store.append("job-a", events, expected_version=0)

    # A redelivered writer repeats its append, with the same expected version or none at all.
    again = store.append("job-a", events, expected_version=0)
    again_any = store.append("job-a", events, expected_version=None)

    assert again == stored
    assert again_any == stored
    assert [e.position for e in again] == [e.position for e in stored]
    assert len(store.read_all()) == 2
    assert store.stream_version("job-a") == 2


def test_partial_overlap_with_stored_events_conflicts(store):
    first, second, third = note("job-a", "1"), note("job-a", "2"), note("job-a", "3")
    store.append("job-a", [first, second], expected_version=0)

    with pytest.raises(ConcurrencyConflict, match="1 of 2 events were already stored"):
        store.append("job-a", [second, third], expected_version=None)

    assert [e.event_id for e in store.read_stream("job-a")] == [first.event_id, second.event_id]


def test_empty_append_and_foreign_stream_id(store):
    assert store.append("job-a", [], expected_version=0) == []
    assert store.read_all() == []

    with pytest.raises(ValueError, match="must carry stream_id=job-a"):
        store.append("job-a", [note("job-a"), note("job-b")], expected_version=0)
    assert store.read_all() == []


# --- reading ------------------------------------------------------------------------------------------
def test_read_stream_in_order_and_up_to_position(store):
    store.append("job-a", [note("job-a", "a1")], expected_version=0)
    store.append("job-b", [note("job-b", "b1")], expected_version=0)
    store.append("job-a", [note("job-a", "a2"), note("job-a", "a3")], expected_version=1)

    stream = store.read_stream("job-a")
    assert [e.summary for e in stream] == ["a1", "a2", "a3"]
    assert [e.stream_version for e in stream] == [1, 2, 3]
    assert all(e.stream_id == "job-a" for e in stream)

    assert [e.summary for e in store.read_stream("job-a", up_to_position=stream[0].position)] == ["a1"]
    assert [e.summary for e in store.read_stream("job-a", up_to_position=stream[1].position)] == ["a1", "a2"]
    assert store.read_stream("job-a", up_to_position=stream[0].position - 1) == []
    assert store.read_stream("job-missing") == []
    assert store.stream_version("job-missing") == 0


def test_read_all_in_global_order_across_streams(store):
    appended = []
    for i in range(3):
        for stream in ("job-a", "job-b", "other"):
            appended += store.append(stream, [note(stream, f"{stream}:{i}")], expected_version=i)

    everything = store.read_all()
    assert [e.event_id for e in everything] == [e.event_id for e in appended]
    assert [e.position for e in everything] == sorted(e.position for e in everything)

    # Paging with after_position and limit walks the same order without gaps or repeats.
    paged, after = [], 0
    while batch := store.read_all(after_position=after, limit=2):
        assert len(batch) <= 2
        paged += batch
        after = batch[-1].position
    assert [e.event_id for e in paged] == [e.event_id for e in everything]

    middle = everything[4].position
    assert [e.position for e in store.read_all(after_position=middle, limit=3)] == \
        [e.position for e in everything[5:8]]
    assert store.read_all(after_position=everything[-1].position) == []


def test_stream_ids_oldest_first_and_prefix_is_literal(store):
    for stream in ("job-b", "job_a", "jobXa", "job-a", "a%b", "abc"):
        store.append(stream, [note(stream)], expected_version=None)
    store.append("job-b", [note("job-b")], expected_version=None)  # a later event does not make it newer

    assert store.stream_ids() == ["job-b", "job_a", "jobXa", "job-a", "a%b", "abc"]
    assert store.stream_ids("job-") == ["job-b", "job-a"]
    # "_" and "%" are LIKE wildcards; a prefix must match them literally, not as patterns.
    assert store.stream_ids("job_") == ["job_a"]
    assert store.stream_ids("a%") == ["a%b"]
    assert store.stream_ids("nothing") == []


def test_events_decode_to_their_classes_with_equal_payloads(store, vector_add_spec):
    job = "job-roundtrip"
    submitted = JobSubmitted(stream_id=job, spec=vector_add_spec, submitted_by="test")
    requested = BaselineRequested(stream_id=job, queue="benchmark.0", params=vector_add_spec.baseline_params())
    compiled = KernelCompiled(stream_id=job, request_id=requested.event_id, arch="sm_90", compile_ms=12.5,
                              cache_key="abc", log="ok")
    measured = BaselineMeasured(stream_id=job, request_id=requested.event_id, device="H100",
                                params={"block_size_x": 256, "scale": 0.5, "mode": "fast"}, grid=(262144, 1, 1),
                                block=(256, 1, 1), samples_ms=[1.25, 1.5, 1.0], median_ms=1.25, replay=True)
    failed = JobFailed(stream_id=job, stage="device", reason="boom")
    planned = PlanProposed(stream_id=job, request_id=requested.event_id, kind="plan",
                           steps=[TuningStep(id="s1", description="d", tune_params={"tile": [1, 2]})])
    originals = [submitted, requested, compiled, measured, failed, planned]

    store.append(job, originals, expected_version=0)
    decoded = store.read_stream(job)

    assert [type(e) for e in decoded] == [type(e) for e in originals]
    for original, back in zip(originals, decoded):
        assert back.event_id == original.event_id
        assert back.payload() == original.payload()
        assert back.occurred_at == original.occurred_at
        assert back.type == original.type and back.version == original.version
    assert decoded[0].spec == vector_add_spec
    assert decoded[0].spec.launch_geometry(decoded[1].params) == vector_add_spec.launch_geometry(requested.params)
    assert decoded[3].grid == (262144, 1, 1) and decoded[3].params == measured.params
    assert isinstance(decoded[3].params["block_size_x"], int) and isinstance(decoded[3].params["scale"], float)
    assert store.read_all() == decoded


def test_occurred_at_keeps_its_instant_in_any_timezone(store, store_url, request):
    occurred = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    store.append("job-a", [JobCompleted(stream_id="job-a", summary="s", occurred_at=occurred)], expected_version=0)

    back = store.read_stream("job-a")[0].occurred_at

    assert back.tzinfo is not None
    assert back == occurred
    assert back.astimezone(UTC) == datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)


# --- concurrency --------------------------------------------------------------------------------------
def test_racing_writers_with_the_same_expected_version_one_wins(store):
    store.append("job-race", [note("job-race", "first")], expected_version=0)

    for round_ in range(3):
        version = store.stream_version("job-race")
        barrier = threading.Barrier(2)
        outcomes: dict[str, object] = {}

        def write(name: str) -> None:
            event = note("job-race", f"{name}-{round_}")
            barrier.wait()
            try:
                outcomes[name] = store.append("job-race", [event], expected_version=version)
            except ConcurrencyConflict as exc:
                outcomes[name] = exc

        threads = [threading.Thread(target=write, args=(name,)) for name in ("left", "right")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)

        wins = [o for o in outcomes.values() if isinstance(o, list)]
        conflicts = [o for o in outcomes.values() if isinstance(o, ConcurrencyConflict)]
        assert len(wins) == 1 and len(conflicts) == 1, outcomes
        assert wins[0][0].stream_version == version + 1
        assert store.stream_version("job-race") == version + 1
        assert store.read_stream("job-race")[-1].event_id == wins[0][0].event_id

    assert len(store.read_all()) == 4


def test_follower_sees_every_position_in_order_while_writers_append(store):
    # Several writers append batches, so their transactions overlap: without the store's append lock a
    # later position could commit before an earlier one and a follower would pass the earlier one by.
    writers, appends, batch_size = 3, 15, 4
    done = threading.Event()
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for i in range(appends):
                stream = f"job-w{w}-{i % 3}"
                store.append(stream, [note(stream, f"{w}:{i}:{k}") for k in range(batch_size)], expected_version=None)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    seen: list[int] = []

    def follow() -> None:
        after = 0
        while True:
            finished = done.is_set()
            batch = store.read_all(after_position=after, limit=5)
            seen.extend(e.position for e in batch)
            if batch:
                after = batch[-1].position
            elif finished:
                return

    follower = threading.Thread(target=follow)
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    follower.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    done.set()
    follower.join(timeout=60)

    assert not errors
    assert not follower.is_alive()
    everything = all_positions(store)
    assert len(everything) == writers * appends * batch_size
    assert seen == everything  # nothing skipped, nothing repeated, in global order
    assert seen == sorted(set(seen))


# --- consumers ----------------------------------------------------------------------------------------
def test_consumer_takes_appends_and_advances_in_one_commit(store):
    inputs = store.append("in", [note("in", "1"), note("in", "2")], expected_version=0)
    assert store.tracked_position("c") == 0

    with store.consuming("c") as consumption:
        event = consumption.next_event()
        assert event.event_id == inputs[0].event_id
        out = consumption.append("out", [note("out", "reaction to 1")], expected_version=0)
        # Inside the transaction the consumer sees its own uncommitted append.
        assert [e.event_id for e in consumption.read_stream("out")] == [out[0].event_id]
        consumption.advance(event.position)

    assert store.tracked_position("c") == inputs[0].position
    assert [e.summary for e in store.read_stream("out")] == ["reaction to 1"]

    with store.consuming("c") as consumption:
        assert consumption.position == inputs[0].position
        event = consumption.next_event()
        assert event.event_id == inputs[1].event_id
        consumption.advance(event.position)
    assert store.tracked_position("c") == inputs[1].position

    # The consumer's own output is in the log after its inputs.
    with store.consuming("c") as consumption:
        assert consumption.next_event().event_id == out[0].event_id

    # Each consumer has its own position.
    assert store.tracked_position("other") == 0
    with store.consuming("other") as consumption:
        assert consumption.next_event().event_id == inputs[0].event_id


def test_exception_in_consuming_rolls_back_append_and_advance(store):
    inputs = store.append("in", [note("in", "1"), note("in", "2")], expected_version=0)
    with store.consuming("c") as consumption:
        consumption.advance(consumption.next_event().position)
    log_before = store.read_all()

    class Crash(Exception):
        pass

    with pytest.raises(Crash):
        with store.consuming("c") as consumption:
            event = consumption.next_event()
            assert event.event_id == inputs[1].event_id
            consumption.append("out", [note("out")], expected_version=0)
            consumption.advance(event.position)
            raise Crash

    assert store.tracked_position("c") == inputs[0].position
    assert store.read_stream("out") == []
    assert store.stream_version("out") == 0
    assert store.read_all() == log_before

    # A first-time consumer that crashes leaves no tracking row behind either.
    with pytest.raises(Crash):
        with store.consuming("fresh") as consumption:
            consumption.advance(consumption.next_event().position)
            raise Crash
    assert store.tracked_position("fresh") == 0

    # After the crash the consumer resumes at the event it did not finish.
    with store.consuming("c") as consumption:
        assert consumption.next_event().event_id == inputs[1].event_id


def test_consuming_with_nothing_new_returns_none(store):
    with store.consuming("c") as consumption:
        assert consumption.position is None
        assert consumption.next_event() is None
    [event] = store.append("in", [note("in")], expected_version=0)
    with store.consuming("c") as consumption:
        consumption.advance(consumption.next_event().position)
    with store.consuming("c") as consumption:
        assert consumption.position == event.position
        assert consumption.next_event() is None


def test_stores_share_one_database(store, store_url):
    """A second EventStore on the same URL (another process, in production) sees the same log."""
    [event] = store.append("job-a", [note("job-a")], expected_version=0)
    other = EventStore(store_url)
    try:
        assert [e.event_id for e in other.read_all()] == [event.event_id]
        with pytest.raises(ConcurrencyConflict):
            other.append("job-a", [note("job-a")], expected_version=0)
        other.append("job-a", [note("job-a")], expected_version=1)
    finally:
        other.close()
    assert store.stream_version("job-a") == 2
    assert store.read_stream("job-a")[0].event_id == event.event_id


def test_consumer_of_some_types_passes_over_the_rest(store):
    noise = store.append("in", [note("in", str(i)) for i in range(5)], expected_version=0)
    [wanted] = store.append("in", [JobFailed(stream_id="in", stage="s", reason="r")], expected_version=5)
    store.append("in", [note("in", "after")], expected_version=6)

    with store.consuming("c") as consumption:
        event = consumption.next_event(types={"JobFailed"})
        assert event.event_id == wanted.event_id
        consumption.advance(event.position)
    assert store.tracked_position("c") == wanted.position > noise[-1].position

    # Nothing wanted is left: the consumer is moved past the rest, so they are not read again.
    with store.consuming("c") as consumption:
        assert consumption.next_event(types={"JobFailed"}) is None
    assert store.tracked_position("c") == store.read_all()[-1].position
    # A rolled-back transaction keeps the old position.
    with pytest.raises(ZeroDivisionError):
        with store.consuming("d") as consumption:
            assert consumption.next_event(types={"Nothing"}) is None
            1 / 0
    assert store.tracked_position("d") == 0


# --- bounds on open streams, and events this build cannot read ------------------------------------------------

def test_an_open_limit_where_counts_only_the_streams_opened_with_that_field(store, vector_add_spec):
    def submit(stream: str, tenant: str, limit: OpenLimit) -> None:
        store.append(stream, [JobSubmitted(stream_id=stream, spec=vector_add_spec, tenant=tenant)], 0, [limit])

    of = lambda tenant: OpenLimit("JobSubmitted", ("JobCompleted",), 2, where=("tenant", tenant))  # noqa: E731
    submit("job-a1", "a", of("a"))
    submit("job-a2", "a", of("a"))
    submit("job-b1", "b", of("b"))
    with pytest.raises(TooManyOpen) as refused:
        submit("job-a3", "a", of("a"))
    assert refused.value.open_streams == 2 and refused.value.limit == of("a")
    store.append("job-a1", [note("job-a1")], None)  # one of a's closes: room for one more of a's
    submit("job-a3", "a", of("a"))
    assert store.stream_ids("job-a") == ["job-a1", "job-a2", "job-a3"]


def test_read_log_puts_an_undecodable_event_in_its_place(store):
    store.append("job-x", [note("job-x")], 0)
    with store.engine.begin() as conn:
        conn.execute(insert(events_table).values(event_id=str(uuid4()), stream_id="job-x", stream_version=2,
                                                 type="FromTheFuture", version=1, occurred_at=datetime.now(UTC),
                                                 payload={}))
    store.append("job-y", [note("job-y")], 0)

    first, bad, last = store.read_log()

    assert isinstance(bad, Undecodable)
    assert (bad.stream_id, bad.stream_version, bad.type) == ("job-x", 2, "FromTheFuture")
    assert first.stream_id == "job-x" and last.stream_id == "job-y"
    with pytest.raises(UnreadableEvent, match=f"event {bad.position} \\(FromTheFuture v1\\)"):
        store.read_stream("job-x")


def test_read_types_leaves_out_an_event_it_cannot_decode(store):
    store.append("job-x", [note("job-x")], 0)
    with store.engine.begin() as conn:
        conn.execute(insert(events_table).values(event_id=str(uuid4()), stream_id="job-x", stream_version=2,
                                                 type=note("job-x").type, version=1, occurred_at=datetime.now(UTC),
                                                 payload={"no such field": 1}))
    store.append("job-y", [note("job-y")], 0)

    assert [e.stream_id for e in store.read_types([note("job-x").type])] == ["job-x", "job-y"]
