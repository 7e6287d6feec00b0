"""A job's events as Server-Sent Events, for live progress: every stored event, then `end` once the job
has finished. Each event's SSE id is its stream version, so a client that reconnects with Last-Event-ID
resumes where it stopped; a comment every few seconds keeps proxies from closing a quiet connection."""
import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool

from shared.events import Event
from shared.eventstore import EventStore
from shared.projections import JobView, evolve, job_stream

POLL_S = 0.25
KEEPALIVE_S = 15.0


async def job_event_stream(store: EventStore, job_id: str, resume_after: int,
                           public: Callable[[Event], dict], final: Callable[[], dict]) -> AsyncIterator[str]:
    """Events after version `resume_after`; `public` renders an event and `final` reads the finished job, as
    the JSON API does. The job's state is folded as events arrive, so each poll reads only what is new."""
    stream, seen, quiet_since = job_stream(job_id), 0, time.monotonic()
    view = JobView(job_id=job_id)
    while True:
        # Reads run off the event loop, so other requests go on meanwhile.
        for event in await run_in_threadpool(store.read_stream, stream, None, seen):
            view, seen = evolve(event, view), event.stream_version
            if seen > resume_after:
                yield _sse(json.dumps(public(event)), event=event.type, id=str(seen))
                quiet_since = time.monotonic()
        if view.finished:
            yield _sse(json.dumps(await run_in_threadpool(final)), event="end")
            return
        if time.monotonic() - quiet_since > KEEPALIVE_S:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(POLL_S)


def _sse(data: str, event: str, id: str | None = None) -> str:
    return (f"id: {id}\n" if id else "") + f"event: {event}\ndata: {data}\n\n"
