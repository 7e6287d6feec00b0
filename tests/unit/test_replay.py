"""Replay of measurements recorded on the GPU machine: served only when asked, always labelled."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.benchmark.handlers import measure_baseline
from services.benchmark.resources import BenchmarkResources
from services.benchmark.measurement import Measured, Order
from services.benchmark.replay import Recording, ReplayBook, ReplayProcess, measurement_key
from shared.adapters.device.probe import DeviceInfo
from shared.adapters.device.process import Failed
from services.planner.policy import react
from shared.adapters.eventstore import EventStore
from shared.domain.events import BaselineFailed, BaselineMeasured, JobSubmitted
from shared.domain.projections import job_stream, project_job
from tests.conftest import EXAMPLES, HAS_GPU
from tests.fakes import RecordingBus


def example(name: str):
    return load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml")


def replaying(spec):
    return spec.model_copy(update={"benchmark": spec.benchmark.model_copy(update={"replay": True})})


def run_baseline(store, spec, book, job_id="r0000000000a"):
    stream = job_stream(job_id)
    (submitted,) = store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)
    (request,) = store.append(stream, react(submitted, project_job([submitted]), ["0"]).events, expected_version=1)
    measure_baseline(store, RecordingBus(), job_id, request.event_id, BenchmarkResources(0, "sm_90", replay_book=book))
    return store.read_stream(stream)[2:]


def test_the_key_covers_what_runs_on_the_device():
    spec = example("vector_add")
    params = spec.baseline_params()
    key = measurement_key(spec, params, "sm_90")
    assert key == measurement_key(example("vector_add"), dict(reversed(params.items())), "sm_90")
    assert key != measurement_key(spec, {**params, "block_size_x": 128}, "sm_90")
    assert key != measurement_key(spec.model_copy(update={"sizes": {"n": 1024}}), params, "sm_90")
    assert key != measurement_key(spec, params, "sm_80")
    # How many times it is timed does not change what runs:
    assert key == measurement_key(replaying(spec), params, "sm_90")


def test_the_committed_book_has_each_example_at_its_spec_sizes():
    book = ReplayBook()
    for name in ("vector_add", "matmul", "reduction"):
        spec = example(name)
        recording = book.find(spec, spec.baseline_params())
        assert recording is not None, name
        assert "H100" in recording.device and all(t > 0 for t in recording.samples_ms)


def test_a_replayed_baseline_is_labelled_and_compiled_for_real(sqlite_url, tmp_path):
    spec = replaying(example("vector_add"))
    book = ReplayBook(tmp_path / "book.json")
    book.add(spec, Recording(kernel_name="vector_add", device="NVIDIA H100 80GB HBM3", recorded_on="2026-11-22",
                             arch="sm_90", params=spec.baseline_params(), samples_ms=[0.31, 0.30, 0.32]))
    book.save()
    # The kernel is compiled for real (NVRTC needs no GPU); only the measurement is replayed.
    compiled, measured = run_baseline(EventStore(sqlite_url), spec, ReplayBook(tmp_path / "book.json"))
    assert compiled.type == "KernelCompiled" and compiled.compile_ms > 0 or compiled.cache_hit
    assert isinstance(measured, BaselineMeasured) and measured.replay
    assert measured.median_ms == 0.31 and "recorded 2026-11-22" in measured.device


def test_replay_without_a_recording_fails_and_says_what_is_recorded(sqlite_url):
    spec = replaying(example("vector_add")).model_copy(update={"sizes": {"n": 12345}})
    _, failed = run_baseline(EventStore(sqlite_url), spec, ReplayBook())
    assert isinstance(failed, BaselineFailed) and failed.stage == "replay"
    assert "vector_add" in failed.reason and "matmul" in failed.reason


@pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the job measures live and offers no replay")
def test_the_cli_offers_replay_without_a_gpu_and_labels_it(tmp_path):
    kforge = Path(sys.executable).parent / "kforge"
    env = {**os.environ, "KFORGE_HOME": str(tmp_path), "COLUMNS": "250", "NO_COLOR": "1"}
    env.pop("REDIS_URL", None), env.pop("DATABASE_URL", None)
    args = [str(kforge), "tune", str(EXAMPLES / "vector_add.cu"), "--spec", str(EXAMPLES / "vector_add.yaml")]
    live = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert live.returncode == 1 and "no CUDA device" in live.stdout and "--replay" in live.stdout
    replayed = subprocess.run([*args, "--replay"], capture_output=True, text=True, env=env, timeout=120)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "[REPLAY]" in replayed.stdout and "replayed measurements" in replayed.stdout
    assert "tuned" in replayed.stdout and "[REPLAY] tuning 6/6, done" in replayed.stdout
    jobs = subprocess.run([str(kforge), "jobs"], capture_output=True, text=True, env=env, timeout=60).stdout
    assert "[REPLAY]" in jobs


def replayed(recorded: Measured, best_ms: float | None) -> Measured | Failed:
    """What a ReplayProcess answers for one configuration recorded as `recorded`, when this run's best is `best_ms`."""
    spec = replaying(example("vector_add"))
    book = ReplayBook(Path("/nonexistent"))
    params = {"block_size_x": 128}
    book.add(spec, Recording.of(spec, DeviceInfo(index=0, name="H100", arch="sm_90"), "2026-11-23", params, recorded))
    return ReplayProcess(book, spec).measure(Order(params=params, kernel=None, grid=(1, 1, 1), block=(128, 1, 1),
                                                best_ms=best_ms))


def test_replay_decides_abandonment_against_this_runs_best_not_the_recordings():
    full = Measured(samples_ms=[10.0, 10.1, 10.05, 10.02, 10.0, 10.1, 10.0], check_ms=10.3, max_abs_error=0.0)
    # Recorded in full; this run's best makes it clearly slower, so it is abandoned as the GPU would have.
    slower = replayed(full, best_ms=5.0)
    assert isinstance(slower, Measured) and slower.abandoned and slower.samples_ms == [10.0, 10.1]
    # The checked launch runs cold and is never judged, however slow: the first two timed launches decide.
    assert replayed(full, best_ms=2.0).samples_ms == [10.0, 10.1]
    # Not abandoned here: every recorded launch the sampling policy would take, and no flag.
    kept = replayed(full, best_ms=9.0)
    assert isinstance(kept, Measured) and not kept.abandoned and kept.samples_ms[0] == 10.0


def test_a_configuration_abandoned_in_the_recording_but_not_here_is_refused_and_named():
    cut_short = Measured(samples_ms=[10.07, 10.1], check_ms=10.2, max_abs_error=0.0, abandoned=True)
    # The recording's run had a best near 8 ms; this run's best is 24 ms, so the 10.07 ms configuration would be
    # timed in full: its time was never recorded, and no flag from the other run may hide it as abandoned.
    refused = replayed(cut_short, best_ms=24.15)
    assert isinstance(refused, Failed) and refused.stage == "replay"
    assert "{'block_size_x': 128}" in refused.reason and "record it again" in refused.reason
    # Where it is abandoned here too, the recorded launches suffice.
    assert replayed(cut_short, best_ms=7.0).abandoned
    # A recording cut short after one launch (as kforge abandoned before 2026-11-26) has too few for this policy.
    once = replayed(Measured(samples_ms=[10.07], check_ms=10.2, max_abs_error=0.0, abandoned=True), best_ms=7.0)
    assert isinstance(once, Failed) and "record it again" in once.reason
