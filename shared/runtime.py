"""The adapters a process uses, built once from settings on first use (never at import time): the event
store, and the bus on Celery's app configured from the same settings (the one other place that configures
it is `kforge.worker`, on import, for the `celery` command). Embedded, building it also ends the jobs that a
killed process of the same KFORGE_HOME left unfinished (shared/job_owners.py).

Celery tasks are entry points that cannot take parameters beyond their message, so they read the
store and bus from here; tests install their own.
"""
from dataclasses import dataclass

from shared.bus import Bus, CeleryBus, InProcessBus, celery_app, configure_celery
from shared.eventstore import EventStore
from shared.job_owners import JobOwner
from shared.jobs import cancel_orphaned_jobs
from shared.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    store: EventStore
    bus: Bus
    owner: JobOwner | None = None  # embedded: this process, which runs the jobs it submits (submit_job's owner)


_current: Runtime | None = None


def build(settings: Settings | None = None) -> Runtime:
    settings = settings or Settings()
    configure_celery(celery_app, settings)
    store = EventStore(settings.database_url)
    if not settings.embedded:
        return Runtime(settings=settings, store=store, bus=CeleryBus(celery_app))
    # Jobs that an earlier process of this home ran in-process, and left unfinished when it was killed, end here.
    cancel_orphaned_jobs(store, settings.home, settings.database_url)
    return Runtime(settings=settings, store=store, bus=InProcessBus(celery_app),
                   owner=JobOwner(settings.home, settings.database_url))


def current() -> Runtime:
    global _current
    if _current is None:
        _current = build()
    return _current


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime
