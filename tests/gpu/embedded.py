"""kforge run embedded for whole jobs on the GPU: SQLite under a temporary home, every service in this process
on the in-process bus."""
from contextlib import contextmanager

import kforge.worker  # noqa: F401  (every service's tasks, run in this process by the in-process bus)
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.application.jobs import follow_job, job_events, submit_job


@contextmanager
def embedded_runtime(home, **settings):
    rt = runtime.build(Settings(KFORGE_HOME=str(home), REDIS_URL=None, DATABASE_URL=None, **settings))
    runtime.install(rt)
    try:
        yield rt
    finally:
        runtime.install(None)
        rt.store.close()


def run_job(rt, spec, submitted_by: str, timeout_s: float = 300) -> list:
    """The job's events once it has finished (asserted) and its workers have recorded their last."""
    job_id = submit_job(rt.store, rt.bus, spec, submitted_by=submitted_by)
    view = follow_job(rt.store, job_id, lambda event: None, timeout_s=timeout_s)
    rt.bus.wait_idle()
    events = job_events(rt.store, job_id)
    assert view.finished, f"job {job_id} still {view.status} after {timeout_s} s: {[e.type for e in events][-5:]}"
    return events
