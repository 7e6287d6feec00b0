"""Events: their serialised shape, immutability, derived ids and decoding (unknown, newer, older versions)."""
from datetime import UTC, datetime
from typing import ClassVar
from uuid import UUID, uuid4

import pytest
from pydantic import ValidationError

from shared.adapters.eventstore import EventStore
from shared.domain.events import (EVENTS, BaselineMeasured, BaselineRequested, Event, EventFromNewerVersion,
                                  EventRegistry, JobCompleted, JobSubmitted, Tolerance, UnknownEventType, derived_id)
from shared.domain.spec import KernelSpec


def envelope(stream_id: str = "job-1", **extra) -> dict:
    return {"event_id": str(uuid4()), "stream_id": stream_id, "stream_version": 1, "position": 7,
            "occurred_at": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), **extra}


# --- shape ------------------------------------------------------------------------------------------
def test_type_and_version_are_in_model_dump():
    event = JobCompleted(stream_id="job-1", summary="done")

    dumped = event.model_dump()
    assert dumped["type"] == "JobCompleted"
    assert dumped["version"] == 1
    assert dumped["summary"] == "done"
    assert event.model_dump(mode="json")["type"] == "JobCompleted"

    class Later(Event):
        schema_version: ClassVar[int] = 3
        note: str

    assert Later(stream_id="s", note="n").model_dump()["version"] == 3
    assert Later(stream_id="s", note="n").model_dump()["type"] == "Later"


def test_payload_is_the_fields_without_envelope_type_and_version(vector_add_spec):
    event = JobSubmitted(stream_id="job-1", spec=vector_add_spec, submitted_by="api")

    payload = event.payload()

    assert set(payload) == {"spec", "submitted_by", "run", "tenant"}
    assert payload["submitted_by"] == "api"
    assert payload["spec"]["kernel_name"] == "vector_add"
    assert payload["spec"]["sizes"] == vector_add_spec.sizes


def test_envelope_defaults():
    a, b = JobCompleted(stream_id="job-1", summary="s"), JobCompleted(stream_id="job-1", summary="s")
    assert isinstance(a.event_id, UUID) and a.event_id != b.event_id
    assert a.occurred_at.tzinfo is not None
    assert a.stream_version is None and a.position is None


def test_events_are_frozen_and_strict():
    event = JobCompleted(stream_id="job-1", summary="done")

    with pytest.raises(ValidationError, match="frozen"):
        event.summary = "changed"
    with pytest.raises(ValidationError, match="frozen"):
        event.position = 5
    assert event.summary == "done" and event.position is None

    with pytest.raises(ValidationError, match="extra"):
        JobCompleted(stream_id="job-1", summary="s", unexpected=1)
    with pytest.raises(ValidationError, match="summary"):
        JobCompleted(stream_id="job-1")


def test_derived_id_is_deterministic():
    source = uuid4()

    first = derived_id(source, "BaselineRequested")
    assert first == derived_id(source, "BaselineRequested")
    assert isinstance(first, UUID) and first.version == 5
    # A message carries ids as text: the string form derives the same id as the UUID.
    assert derived_id(str(source), "BaselineRequested") == first

    assert derived_id(source, "JobCompleted") != first
    assert derived_id(uuid4(), "BaselineRequested") != first
    assert derived_id("a", "b/c") == derived_id("a/b", "c")  # parts are joined with "/"
    assert derived_id("a", "b") != derived_id("ab")


# --- decoding ---------------------------------------------------------------------------------------
def test_decode_known_event():
    env = envelope()
    event = EVENTS.decode("JobCompleted", 1, {"summary": "done"}, env)

    assert isinstance(event, JobCompleted)
    assert event.summary == "done"
    assert str(event.event_id) == env["event_id"]
    assert event.stream_version == 1 and event.position == 7


def test_decode_round_trips_every_field(vector_add_spec):
    original = BaselineMeasured(stream_id="job-1", request_id=uuid4(), device="H100", params={"block_size_x": 128},
                                grid=(4, 1, 1), block=(128, 1, 1), samples_ms=[0.5, 0.25], median_ms=0.5)
    env = {k: getattr(original, k) for k in ("event_id", "stream_id", "stream_version", "position", "occurred_at")}

    assert EVENTS.decode(original.type, original.version, original.payload(), env) == original

    submitted = JobSubmitted(stream_id="job-1", spec=vector_add_spec)
    env = {k: getattr(submitted, k) for k in ("event_id", "stream_id", "stream_version", "position", "occurred_at")}
    assert EVENTS.decode("JobSubmitted", 1, submitted.payload(), env) == submitted


def test_decode_unknown_type_explains_what_to_do():
    env = envelope()

    with pytest.raises(UnknownEventType) as info:
        EVENTS.decode("KernelTeleported", 1, {}, env)

    message = str(info.value)
    assert "'KernelTeleported'" in message
    assert env["event_id"] in message
    assert "upgrade" in message


def test_decode_newer_version_is_refused():
    with pytest.raises(EventFromNewerVersion) as info:
        EVENTS.decode("JobCompleted", 2, {"summary": "s", "new_field": 1}, envelope())

    message = str(info.value)
    assert "JobCompleted" in message
    assert "version 2" in message and "up to version 1" in message
    assert "upgrade" in message


class Renamed(Event):
    """A test-local event at schema version 2: version 1 called the field `name` and had no `count`."""

    schema_version: ClassVar[int] = 2
    title: str
    count: int


RenamedV2 = Renamed  # the current class, for the test below that defines an older one of the same name


def _v1_to_v2(payload: dict) -> dict:
    payload = dict(payload)
    return {"title": payload.pop("name"), "count": 0, **payload}


def test_older_version_is_upcast():
    calls = []

    def upcast(payload):
        calls.append(payload)
        return _v1_to_v2(payload)

    registry = EventRegistry([Renamed], upcasters={("Renamed", 1): upcast})

    old = registry.decode("Renamed", 1, {"name": "hello"}, envelope())
    assert isinstance(old, Renamed)
    assert (old.title, old.count) == ("hello", 0)
    assert old.version == 2
    assert calls == [{"name": "hello"}]

    current = registry.decode("Renamed", 2, {"title": "now", "count": 3}, envelope())
    assert (current.title, current.count) == ("now", 3)
    assert len(calls) == 1  # a current payload is not upcast


def test_upcasting_steps_through_every_version():
    class Thrice(Event):
        schema_version: ClassVar[int] = 3
        value: int

    registry = EventRegistry([Thrice], upcasters={
        ("Thrice", 1): lambda p: {"value": int(p["text"])},
        ("Thrice", 2): lambda p: {"value": p["value"] * 10},
    })

    assert registry.decode("Thrice", 1, {"text": "4"}, envelope()).value == 40
    assert registry.decode("Thrice", 2, {"value": 4}, envelope()).value == 40
    assert registry.decode("Thrice", 3, {"value": 4}, envelope()).value == 4


def test_missing_upcaster_is_an_error():
    registry = EventRegistry([Renamed])

    with pytest.raises(EventFromNewerVersion, match="no upcaster for Renamed from version 1"):
        registry.decode("Renamed", 1, {"name": "x"}, envelope())


def test_a_registry_only_knows_its_own_types():
    registry = EventRegistry([Renamed])
    with pytest.raises(UnknownEventType):
        registry.decode("JobCompleted", 1, {"summary": "s"}, envelope())
    with pytest.raises(UnknownEventType):
        EVENTS.decode("Renamed", 2, {"title": "t", "count": 1}, envelope())


def test_event_stored_by_an_older_build_is_upcast_on_read(sqlite_url):
    """A v1 event written by an older kforge reads back through the store as the current v2 class."""

    class Renamed(Event):  # the older build's version of the class: same type name, version 1
        schema_version: ClassVar[int] = 1
        name: str

    old_store = EventStore(sqlite_url, registry=EventRegistry([Renamed]))
    [stored] = old_store.append("thing-1", [Renamed(stream_id="thing-1", name="legacy")], expected_version=0)
    old_store.close()

    new_store = EventStore(sqlite_url, registry=EventRegistry([RenamedV2], upcasters={("Renamed", 1): _v1_to_v2}))
    try:
        [event] = new_store.read_stream("thing-1")
    finally:
        new_store.close()
    assert type(event) is RenamedV2
    assert (event.title, event.count, event.version) == ("legacy", 0, 2)
    assert event.event_id == stored.event_id and event.position == stored.position


def test_default_registry_knows_the_planner_events():
    for cls in (JobSubmitted, BaselineRequested, BaselineMeasured, JobCompleted):
        assert EVENTS.types[cls.__name__] is cls


def test_a_stored_submission_admitted_under_older_rules_still_decodes(vector_add_spec):
    """Submission rules tighten over time (empty tune-parameter lists refused, compiler options and includes
    allowlisted): a job stored before such a change must stay readable."""
    submitted = JobSubmitted(stream_id="job-old", spec=vector_add_spec)
    payload = submitted.payload()
    payload["spec"] = {**payload["spec"], "compiler_options": ["-O3"], "tune_params": {"block_size_x": []},
                       "source": '#include "/etc/passwd"\n' + payload["spec"]["source"]}
    with pytest.raises(ValidationError):
        KernelSpec.model_validate(payload["spec"])  # a new submission of it is refused

    decoded = EVENTS.decode("JobSubmitted", submitted.version, payload, envelope())

    assert decoded.spec.compiler_options == ["-O3"] and decoded.spec.tune_params == {"block_size_x": []}


def test_a_stored_event_must_still_have_its_shape(vector_add_spec):
    payload = JobSubmitted(stream_id="job-old", spec=vector_add_spec).payload()
    payload["spec"] = {**payload["spec"], "benchmark": {"iterations": "many"}}
    with pytest.raises(ValidationError):
        EVENTS.decode("JobSubmitted", 3, payload, envelope())


def test_verdicts_and_baselines_recorded_before_tolerances_read_with_none():
    """CandidateVerified v1 (trials without tolerances), CandidateRejected v1 and BaselineMeasured v2, as an
    older kforge stored them."""
    request = str(uuid4())
    trial = {"label": "spec sizes #1", "sizes": {"n": 4}, "seed": 1, "max_abs_error": 0.0, "max_rel_error": 0.0}
    verified = EVENTS.decode("CandidateVerified", 1, {
        "request_id": request, "candidate_id": "c1", "device": "H100", "trials": [trial], "skipped": [],
        "max_abs_error": 0.0, "max_rel_error": 0.0}, envelope())
    rejected = EVENTS.decode("CandidateRejected", 1, {
        "request_id": request, "candidate_id": "c1", "check": "mismatch", "reason": "differs", "trial": None,
        "log": ""}, envelope())
    measured = EVENTS.decode("BaselineMeasured", 2, {
        "request_id": request, "device": "H100", "params": {}, "grid": [1, 1, 1], "block": [1, 1, 1],
        "samples_ms": [0.5], "median_ms": 0.5, "replay": False, "facts": None}, envelope())
    assert verified.version == 2 and verified.trials[0].tolerances == []
    assert rejected.version == 2 and rejected.tolerances == []
    assert measured.version == 3 and measured.tolerances == []


def test_a_tolerance_round_trips_with_its_reason():
    tolerance = Tolerance(output="total", atol=2.0, rtol=9.8e-4, spread=0.31, spread_rel=1.3e-4,
                          reason="the reference differs from itself by up to 0.31 over 3 runs: atol eps x 16777216 "
                                 "terms x max|x| 1, rtol 2 eps x sqrt(16777216 terms)")
    measured = BaselineMeasured(stream_id="job-1", request_id=uuid4(), device="H100", params={}, grid=(1, 1, 1),
                                block=(1, 1, 1), samples_ms=[0.5], median_ms=0.5, tolerances=[tolerance])
    env = {k: getattr(measured, k) for k in ("event_id", "stream_id", "stream_version", "position", "occurred_at")}
    assert EVENTS.decode(measured.type, measured.version, measured.payload(), env) == measured
