"""Adapters: each module here is kforge's side of something outside it, behind a small interface: the event
store (SQLite, PostgreSQL), the bus and broker (Celery, Redis), settings from the environment, the GPU and its
compiler (device), the arrays a kernel is fed (generated, or read from files), the records of which process owns
a job, and webhook addresses. shared.application.runtime builds them from settings."""
