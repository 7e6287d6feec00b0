"""The adapters a process uses, built once from settings on first use (never at import time): the event
store, and the bus on Celery's app configured from the same settings (the one other place that configures
it is `kforge.worker`, on import, for the `celery` command).

Celery tasks are entry points that cannot take parameters beyond their message, so they read the
store and bus from here; tests install their own.
"""
from dataclasses import dataclass

from shared.bus import Bus, CeleryBus, InProcessBus, celery_app, configure_celery
from shared.eventstore import EventStore
from shared.settings import Settings


@dataclass
class Runtime:
    settings: Settings
    store: EventStore
    bus: Bus


_current: Runtime | None = None


def build(settings: Settings | None = None) -> Runtime:
    settings = settings or Settings()
    configure_celery(celery_app, settings)
    bus: Bus = InProcessBus(celery_app) if settings.embedded else CeleryBus(celery_app)
    return Runtime(settings=settings, store=EventStore(settings.database_url), bus=bus)


def current() -> Runtime:
    global _current
    if _current is None:
        _current = build()
    return _current


def install(runtime: Runtime | None) -> None:
    global _current
    _current = runtime
