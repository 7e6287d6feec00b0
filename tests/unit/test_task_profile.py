"""Workers' task records: one per request however often it is delivered, none for an attempt that raised."""
import multiprocessing
import time
from uuid import uuid4

import pytest

from shared.application.task_profile import peak_rss_mb, profiled
from shared.domain.events import TaskProfiled


def test_a_task_is_recorded_once_with_when_and_how_long(store):
    request = uuid4()
    for _ in range(2):  # a redelivered task records nothing twice
        with profiled(store, "j1", request, "benchmark.tune_shard"):
            time.sleep(0.05)
    [record] = store.read_stream("job-j1")
    assert isinstance(record, TaskProfiled) and record.request_id == request
    assert record.task == "benchmark.tune_shard" and record.wall_s >= 0.05
    assert record.started_at <= record.occurred_at and record.peak_rss_mb > 0 and ":" in record.worker


def test_an_attempt_that_raised_is_not_recorded(store):
    with pytest.raises(RuntimeError):
        with profiled(store, "j2", uuid4(), "verifier.verify_candidate"):
            raise RuntimeError("conflict: retried by Celery")
    assert store.read_stream("job-j2") == []


def _hold_memory(ready) -> None:
    block = bytearray(200 * 2**20)  # touched, so resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    ready.set()
    time.sleep(5)


def test_peak_memory_counts_live_children():
    alone = peak_rss_mb()
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Event()
    child = spawn.Process(target=_hold_memory, args=(ready,))
    child.start()
    try:
        assert ready.wait(30)
        assert peak_rss_mb() >= alone + 200
    finally:
        child.terminate()
        child.join()
