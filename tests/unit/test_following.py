"""One way to follow a job (JobFollower, for follow_job and the gateway's live stream) and one way to name a
job by a prefix of its id (resolve_job_id, for the CLI, the Python API and the gateway's comparisons)."""
import time
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from shared.application.jobs import JobFollower, UnknownJob, find_job_ids, follow_jobs, resolve_job_id
from shared.domain.events import JobCompleted, JobFailed, JobSubmitted, TaskProfiled
from shared.domain.projections import job_stream


def _submit(store, job_id: str, spec) -> None:
    stream = job_stream(job_id)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)


def test_a_follower_folds_each_event_once_whether_read_or_delivered_live(store, vector_add_spec):
    _submit(store, "abc000000001", vector_add_spec)
    follower = JobFollower("abc000000001")
    history = follower.read(store)
    assert [e.type for e in history] == ["JobSubmitted"] and follower.view.status == "submitted"
    stream = job_stream("abc000000001")
    [done] = store.append(stream, [JobCompleted(stream_id=stream, summary="done")], expected_version=None)
    # Delivered live and read again, as the live stream's poller and its first read may both hand it on.
    assert follower.take([history[0], done]) == [done]
    assert follower.take([done]) == [] and follower.read(store) == []
    assert follower.view.finished and follower.view.version == 2 and follower.view.event_types == (
        "JobSubmitted", "JobCompleted")


def test_a_follower_skips_a_repeat_within_one_batch(store, vector_add_spec):
    _submit(store, "abc000000001", vector_add_spec)
    stream = job_stream("abc000000001")
    [profiled] = store.append(stream, [TaskProfiled(stream_id=stream, request_id=uuid4(), task="t", worker="w",
                                                    started_at=datetime.now(UTC), wall_s=0.0, peak_rss_mb=0.0)],
                              expected_version=None)
    follower = JobFollower("abc000000001")
    [submitted] = follower.take(store.read_stream(stream)[:1])
    assert follower.take([submitted, profiled, profiled]) == [profiled] and follower.view.version == 2


def test_a_unique_prefix_names_its_job_and_others_are_refused_saying_why(store, vector_add_spec):
    for job_id in ("abc000000001", "abd000000002", "xyz000000003"):
        _submit(store, job_id, vector_add_spec)
    assert resolve_job_id(store, "x") == "xyz000000003"
    assert resolve_job_id(store, "abc000000001") == "abc000000001"  # a whole id is its own prefix
    with pytest.raises(UnknownJob, match="2 jobs start with 'ab': give more of the id") as several:
        resolve_job_id(store, "ab")
    assert several.value.matches == 2
    with pytest.raises(UnknownJob, match="no job starts with 'q'"):
        resolve_job_id(store, "q")
    with pytest.raises(UnknownJob, match="no job starts with ''"):
        resolve_job_id(store, "")  # not every job at once
    with pytest.raises(UnknownJob, match="no job starts with '%'"):
        resolve_job_id(store, "%")  # the prefix is literal, not a pattern


def test_a_prefix_among_a_callers_jobs_says_nothing_of_anyone_elses(store, vector_add_spec):
    for job_id in ("abc000000001", "abd000000002"):
        _submit(store, job_id, vector_add_spec)
    mine = {"abd000000002"}
    assert resolve_job_id(store, "ab", among=mine) == "abd000000002"  # the other's job does not make it ambiguous
    with pytest.raises(UnknownJob, match="no job starts with 'abc'"):
        resolve_job_id(store, "abc", among=mine)
    assert find_job_ids(store) == ["abc000000001", "abd000000002"]
    assert find_job_ids(store, among=mine) == ["abd000000002"]


# --- several jobs at once (kforge slow --optimise) ----------------------------------------------------------------
def _record(store, job_id: str, event_type, **fields) -> None:
    stream = job_stream(job_id)
    store.append(stream, [event_type(stream_id=stream, **fields)], expected_version=None)


def _polls(store, script: dict[int, tuple]):
    """A `stalled` that records, at its nth call (one per poll, before the jobs are read), what `script` gives."""
    calls = []

    def stalled():
        calls.append(len(calls))
        for job_id, event_type, fields in script.get(len(calls), ()):
            _record(store, job_id, event_type, **fields)
        return None
    return stalled, calls


def test_several_jobs_are_followed_together_each_end_said_as_it_comes(store, vector_add_spec):
    for job_id in ("a00000000001", "b00000000002"):
        _submit(store, job_id, vector_add_spec)
    stalled, _ = _polls(store, {2: [("b00000000002", JobCompleted, {"summary": "done"})],
                                4: [("a00000000001", JobFailed, {"stage": "device", "reason": "no CUDA device"})]})
    ended = []
    followed = follow_jobs(store, ["a00000000001", "b00000000002"], lambda view: ended.append(view.job_id),
                           timeout_s=60, poll_s=0.001, stalled=stalled)
    assert ended == ["b00000000002", "a00000000001"]  # in the order they ended, each once
    assert [v.status for v in followed.views] == ["failed", "completed"]  # in the order given
    assert followed.unfinished == [] and followed.stalled is None


def test_one_deadline_bounds_them_all(store, vector_add_spec):
    job_ids = [f"c0000000000{i}" for i in range(4)]
    for job_id in job_ids:
        _submit(store, job_id, vector_add_spec)
    started = time.monotonic()
    followed = follow_jobs(store, job_ids, lambda view: None, timeout_s=0.2, poll_s=0.01)
    assert 0.2 <= time.monotonic() - started < 0.6  # not 4 x 0.2 s
    assert [v.job_id for v in followed.unfinished] == job_ids and followed.stalled is None


def test_following_stops_by_follow_jobs_rule_when_nothing_moves_them_on(store, vector_add_spec):
    for job_id in ("d00000000001", "d00000000002"):
        _submit(store, job_id, vector_add_spec)
    # No work left (Bus.stalled): stopped at once, after reading what the work did before it stopped.
    stalled, _ = _polls(store, {1: [("d00000000001", JobCompleted, {"summary": "done"})]})
    ended = []
    followed = follow_jobs(store, ["d00000000001", "d00000000002"], lambda view: ended.append(view.job_id),
                           timeout_s=60, poll_s=0.001, stalled=lambda: stalled() or "nothing left to run")
    assert ended == ["d00000000001"] and [v.job_id for v in followed.unfinished] == ["d00000000002"]
    assert followed.stalled == "nothing left to run"
    # One job's events keep them all followed (the other waits its turn, recording nothing); none for stall_s
    # stops them.
    _submit(store, "d00000000003", vector_add_spec)
    profiled = {"request_id": uuid4(), "task": "t", "worker": "w", "started_at": datetime.now(UTC), "wall_s": 0.0,
                "peak_rss_mb": 0.0}
    script = {n: [("d00000000002", TaskProfiled, profiled)] for n in range(1, 80)}
    stalled, calls = _polls(store, script)
    followed = follow_jobs(store, ["d00000000002", "d00000000003"], lambda view: None, timeout_s=60, poll_s=0.005,
                           stalled=stalled, stall_s=0.25)
    assert len(calls) > 80 and followed.stalled == "none of them recorded an event for 0 s"
    assert [v.job_id for v in followed.unfinished] == ["d00000000002", "d00000000003"]
