"""Where a process makes its adapters from its settings (by default read from the environment), on first use
and never at import time: Celery's app configured from them (`celery`, the one place that configures it), the
event store, and the bus on that app (`build`, `current`). Embedded, building the runtime also ends the jobs
that a killed process of the same KFORGE_HOME left unfinished (shared/adapters/job_owners.py).

Celery tasks are entry points that cannot take parameters beyond their message, so they read the
store and bus from here; tests install their own. `kforge.worker`, the module `celery -A` loads, takes its
configured app from `celery()` too, before any task builds a runtime.
"""
from dataclasses import dataclass

from celery import Celery

from shared.adapters.bus import Bus, CeleryBus, InProcessBus, celery_app, configure_celery
from shared.adapters.eventstore import EventStore
from shared.adapters.job_owners import JobOwner
from shared.adapters.settings import Settings
from shared.application.jobs import cancel_orphaned_jobs


@dataclass
class Runtime:
    settings: Settings
    store: EventStore
    bus: Bus
    owner: JobOwner | None = None  # embedded: this process, which runs the jobs it submits (submit_job's owner)


_current: Runtime | None = None


def celery(settings: Settings | None = None) -> Celery:
    """kforge's one Celery app (shared.adapters.bus.celery_app, where the tasks register), configured from `settings`,
    by default the environment's. Nothing else configures it; it opens no connection."""
    return configure_celery(celery_app, settings or Settings())


def build(settings: Settings | None = None) -> Runtime:
    settings = settings or Settings()
    app = celery(settings)
    store = EventStore(settings.database_url)
    if not settings.embedded:
        return Runtime(settings=settings, store=store, bus=CeleryBus(app))
    # Jobs that an earlier process of this home ran in-process, and left unfinished when it was killed, end here.
    cancel_orphaned_jobs(store, settings.home, settings.database_url)
    return Runtime(settings=settings, store=store, bus=InProcessBus(app),
                   owner=JobOwner(settings.home, settings.database_url))


def current() -> Runtime:
    global _current
    if _current is None:
        _current = build()
    return _current


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime
