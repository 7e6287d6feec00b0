"""Every job ends: a worker task that raises what its handler did not expect is retried a bounded number of
times, answers its request with TaskFailed, and the planner ends the job. The fault is injected into each kind
of task (the handler, or the planner's decision, raises); everything else is real: the in-process bus, SQLite,
NVRTC, Celery workers over Redis with PostgreSQL."""
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery

import kforge.worker  # noqa: F401  (registers every service's tasks)
from kforge.specfile import load_spec
from services.benchmark import handlers as benchmark_handlers
from services.generator import handlers as generator_handlers
from services.planner import handlers as planner_handlers
from services.verifier import handlers as verifier_handlers
from services.webhooks import handlers as webhooks_handlers
from shared.adapters.bus import CeleryBus, configure_celery
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.application.jobs import Admission, cancel_orphaned_jobs, follow_job, get_job, job_events, submit_job
from shared.application.requests import outstanding_requests
from shared.domain.events import BaselineRequested, TaskFailed

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KFORGE = str(Path(sys.executable).parent / "kforge")
FAULT = "injected: No module named 'kforge_fault'"


def _spec(**fields):
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_dump(mode="json")
    spec = {**spec, "strategy": {"name": "baseline"}, "benchmark": {**spec["benchmark"], "replay": True}}
    return load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml").model_validate({**spec, **fields})


# kind -> (the task that fails, the handler made to raise, the spec of a job that reaches it)
KINDS = {
    "planner": ("planner.catch_up", (planner_handlers, "react"), {}),
    "benchmark": ("benchmark.measure_baseline", (benchmark_handlers, "measure_baseline"), {}),
    "verifier": ("verifier.verify_candidate", (verifier_handlers, "verify_candidate"),
                 {"strategy": {"name": "verify", "candidate": {"source": (EXAMPLES / "vector_add.cu").read_text()}}}),
    "generator": ("generator.generate", (generator_handlers, "generate"),
                  {"strategy": {"name": "one_prompt"}, "generator": {"provider": "rules"}}),
    "webhooks": ("webhooks.deliver", (webhooks_handlers, "deliver"), {"webhook_url": "http://127.0.0.1:9/hook"}),
}


@pytest.fixture
def embedded(tmp_path):
    rt = runtime.build(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, KFORGE_TASK_RETRIES="2",
                                KFORGE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8"))
    runtime.install(rt)
    yield rt
    runtime.install(None)
    rt.store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_that_raises_is_retried_then_its_failure_ends_the_job(kind, embedded, monkeypatch, caplog):
    task, (module, name), fields = KINDS[kind]
    real, calls = getattr(module, name), []

    def faulty(*args, **kwargs):
        event = args[0] if kind == "planner" else None
        if kind != "planner" or isinstance(event, BaselineRequested):
            calls.append(1)
            raise ImportError(FAULT)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, faulty)
    rt = embedded
    job_id = submit_job(rt.store, rt.bus, _spec(**fields), admission=Admission.of(rt.settings))
    view = follow_job(rt.store, job_id, lambda e: None, timeout_s=60, stalled=rt.bus.stalled)
    rt.bus.wait_idle()
    events = job_events(rt.store, job_id)

    [failed] = [e for e in events if isinstance(e, TaskFailed)]
    assert (failed.task, failed.error_type, failed.error, failed.attempts) == (task, "ImportError", FAULT, 3)
    assert len(calls) == 3  # the first attempt and KFORGE_TASK_RETRIES=2 retries, no more
    assert not outstanding_requests(events)  # TaskFailed answers the request: recovery sends nothing again
    errors = [r for r in caplog.records if r.name == "shared.application.worker_task" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info and task in errors[0].getMessage()
    if kind == "webhooks":
        # The webhook announces the job's end: the job has ended already, completed, and stays so.
        [request] = [e for e in events if e.type == "WebhookRequested"]
        assert view.status == "completed" and failed.request_id == request.event_id
    else:
        assert view.status == "failed" and view.failed_stage == task
        assert view.failure.startswith(f"the {kind} task failed after 3 attempt(s): ImportError: {FAULT}; report "
                                       f"it with the job id {job_id}")
        assert [e.type for e in events if e.type != "TaskProfiled"][-2:] == ["TaskFailed", "JobFailed"]


# A benchmark.0 worker process whose handler raises: the fault is injected before the worker starts.
FAULTY_WORKER = f"""
import sys
from services.benchmark import handlers
def measure_baseline(*args, **kwargs):
    raise ImportError({FAULT!r})
handlers.measure_baseline = measure_baseline
from kforge.cli import app
sys.argv = ["kforge", "worker", "-Q", "benchmark.0"]
app()
"""


@pytest.mark.redis
@pytest.mark.postgres
def test_a_celery_worker_whose_task_raises_ends_the_job(redis_url, postgres_url, tmp_path):
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": postgres_url, "KFORGE_HOME": str(tmp_path),
           "KFORGE_GPUS": "0", "KFORGE_TASK_RETRIES": "1"}
    settings = Settings(REDIS_URL=redis_url, DATABASE_URL=postgres_url, KFORGE_HOME=tmp_path)
    app = configure_celery(Celery("kforge-test-client"), settings)
    log = open(tmp_path / "workers.log", "w")
    workers = [subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
               for command in ([KFORGE, "worker", "-Q", "planner"], [sys.executable, "-c", FAULTY_WORKER])]
    store = EventStore(postgres_url)
    try:
        deadline = time.monotonic() + 60
        while len(app.control.ping(timeout=0.5)) < 2:
            assert time.monotonic() < deadline, (tmp_path / "workers.log").read_text()[-3000:]
        job_id = submit_job(store, CeleryBus(app), _spec())
        view = follow_job(store, job_id, lambda e: None, timeout_s=60)
        events = job_events(store, job_id)
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
        log.close()
        store.close()

    worker_log = (tmp_path / "workers.log").read_text()
    assert view.status == "failed" and view.failed_stage == "benchmark.measure_baseline", worker_log
    [failed] = [e for e in events if isinstance(e, TaskFailed)]
    assert (failed.error_type, failed.error, failed.attempts) == ("ImportError", FAULT, 2)
    assert "Traceback" in worker_log and "ERROR" in worker_log and "answering its request with TaskFailed" in worker_log
    assert not outstanding_requests(events)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_kforge_tune_cancels_its_job_promptly(sig, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "KFORGE_GPUS")}
    env.update(KFORGE_HOME=str(tmp_path), COLUMNS="200", NO_COLOR="1")
    tune = subprocess.Popen([KFORGE, "tune", "examples/vector_add.cu", "--replay", "--strategy", "explicit"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = tune.stdout.readline()
    assert " submitted" in first, first + tune.communicate(timeout=60)[0]
    job_id = first.split()[1]
    time.sleep(0.5)  # the job is under way: compiling, or asking the generator
    tune.send_signal(sig)
    sent = time.monotonic()
    rest = tune.communicate(timeout=30)[0]
    took = time.monotonic() - sent

    assert tune.returncode == 130, rest
    assert took < 5, f"{took:.1f} s to stop"
    assert f"interrupted ({sig.name}): job {job_id} cancelled" in rest and "Traceback" not in rest
    store = EventStore(f"sqlite:///{tmp_path / 'kforge.db'}")
    try:
        view = get_job(store, job_id)
    finally:
        store.close()
    assert view.status == "cancelled" and view.failure == f"kforge tune was interrupted ({sig.name})"


def test_a_killed_kforge_tune_leaves_its_job_to_the_next_kforge_which_cancels_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "KFORGE_GPUS")}
    env.update(KFORGE_HOME=str(tmp_path), COLUMNS="200", NO_COLOR="1")
    command = ["tune", "examples/vector_add.cu", "--replay", "--strategy", "explicit"]
    tune = subprocess.Popen([KFORGE, *command], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    first = tune.stdout.readline()
    assert " submitted" in first, first + tune.communicate(timeout=60)[0]
    job_id = first.split()[1]
    url = f"sqlite:///{tmp_path / 'kforge.db'}"
    store = EventStore(url)
    try:
        assert cancel_orphaned_jobs(store, tmp_path, url) == []  # its process lives: left to it
        tune.kill()  # SIGKILL: no handler runs, nothing is cancelled on the way out
        tune.communicate(timeout=30)
        assert not get_job(store, job_id).finished

        listed = subprocess.run([KFORGE, "jobs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        view = get_job(store, job_id)
        cancels = [e for e in job_events(store, job_id) if e.type == "JobCancelled"]
    finally:
        store.close()

    assert listed.returncode == 0 and "Traceback" not in listed.stdout + listed.stderr, listed.stderr
    assert re.search(rf"{job_id}\s.*cancelled", listed.stdout), listed.stdout
    assert view.status == "cancelled" and len(cancels) == 1 and cancels[0].cancelled_by == "kforge"
    assert view.failure == (f"`kforge {' '.join(command)}` (pid {tune.pid}), which ran this job in its own process, "
                            "was killed or ended before the job did; submit the job again to rerun it (for kforge "
                            "tune: run that command again)")


@pytest.mark.redis
@pytest.mark.postgres
def test_kforge_tune_following_a_job_no_worker_takes_stops_and_leaves_it_to_the_workers(redis_url, postgres_url,
                                                                                        tmp_path):
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": postgres_url, "KFORGE_HOME": str(tmp_path),
           "KFORGE_STALL_TIMEOUT_S": "2", "COLUMNS": "200", "NO_COLOR": "1"}
    started = time.monotonic()
    tune = subprocess.run([KFORGE, "tune", "examples/vector_add.cu", "--replay"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    out = " ".join((tune.stdout + tune.stderr).split())  # as one line, however the terminal wrapped it
    job_id = re.search(r"job (\w+) submitted, services", out).group(1)

    assert tune.returncode == 3 and took < 20, out
    assert f"job {job_id} is still submitted, but it recorded no event for 2 s" in out and "Traceback" not in out
    assert "left to the workers" in out and f"kforge cancel {job_id}" in out
    store = EventStore(postgres_url)
    try:
        assert get_job(store, job_id).status == "submitted"  # not cancelled: a worker that starts later takes it
    finally:
        store.close()


@pytest.mark.redis
@pytest.mark.postgres
def test_the_python_api_following_a_job_no_worker_takes_stops_and_says_so(redis_url, postgres_url, tmp_path):
    from kforge.api import KforgeError, optimise

    rt = runtime.build(Settings(REDIS_URL=redis_url, DATABASE_URL=postgres_url, KFORGE_HOME=tmp_path,
                                KFORGE_STALL_TIMEOUT_S="1"))
    runtime.install(rt)
    try:
        with pytest.raises(KforgeError, match="recorded no event for 1 s; it is left to the workers"):
            optimise(_spec(), timeout_s=60)
        [job] = rt.store.stream_ids("job-")
        assert get_job(rt.store, job.removeprefix("job-")).status == "submitted"
    finally:
        runtime.install(None)
        rt.store.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death injected
def test_the_python_api_stops_following_a_job_whose_in_process_worker_died(embedded, monkeypatch):
    from kforge.api import KforgeError, optimise

    def dies(*args, **kwargs):
        raise SystemExit("a worker thread ended")  # past every handler: the queue's thread stops

    monkeypatch.setattr(benchmark_handlers, "measure_baseline", dies)
    started = time.monotonic()
    with pytest.raises(KforgeError, match="in-process worker kforge-inprocess-benchmark.0 stopped") as raised:
        optimise(_spec(), timeout_s=60)
    assert time.monotonic() - started < 10
    [job] = [j for j in embedded.store.stream_ids("job-")]
    view = get_job(embedded.store, job.removeprefix("job-"))
    assert view.status == "cancelled" and "stopped following" in view.failure, raised.value
