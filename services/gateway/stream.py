"""A job's events as Server-Sent Events, for live progress: every stored event, then `end` once the job
has finished. Each event's SSE id is its stream version, so a client that reconnects with Last-Event-ID
resumes where it stopped; a comment every few seconds keeps proxies from closing a quiet connection.

Streams share one poller per gateway process: it catches the JobIndex up from the store's global
position, and the index hands each new event to the queues of the streams following its job. A thousand
open streams thus cost one store query per poll, not a thousand; and how many may be open, per API key
and in all, is bounded."""
import asyncio
import json
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from shared.application.jobs import JobFollower, JobIndex
from shared.domain.events import Event, Undecodable
from shared.domain.projections import job_id_of

POLL_S = 0.25
KEEPALIVE_S = 15.0
MAX_QUEUED = 10_000  # events waiting for one slow client; past it the stream closes and the client resumes
log = logging.getLogger(__name__)


class StreamsFull(RuntimeError):
    """As many streams as allowed are open: for this key, or on this gateway process."""


@dataclass(eq=False)
class Subscription:
    """One open stream's place in the hub: its job's new events arrive in `queue`, None when it overflowed."""

    job_id: str
    key: str | None
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    overflowed: bool = False

    def deliver(self, event: Event | Undecodable) -> None:  # on the subscription's loop
        if self.overflowed:
            return
        if self.queue.qsize() >= MAX_QUEUED:
            self.overflowed = True
            self.queue.put_nowait(None)
        else:
            self.queue.put_nowait(event)


class StreamHub:
    def __init__(self, index: JobIndex, limits: Callable[[], tuple[int, int]]):
        self.index, self.limits = index, limits  # limits(): (streams in all, streams per key)
        self._lock = threading.Lock()  # the index calls fan_out from whichever thread caught it up
        self._by_job: dict[str, set[Subscription]] = {}
        self._per_key: Counter[str] = Counter()
        self._open = 0
        self._poller: asyncio.Task | None = None
        index.on_events(self._fan_out)

    def open(self, job_id: str, key: str | None) -> Subscription:
        """Follow a job's new events (StreamsFull past the bounds); `key` counts towards its own bound."""
        total, per_key = self.limits()
        with self._lock:
            if self._open >= total:
                raise StreamsFull(f"{self._open} live streams are open on this server, as many as it holds "
                                  "(KFORGE_SSE_MAX_STREAMS): retry after a while, or poll the job instead")
            if key is not None and self._per_key[key] >= per_key:
                raise StreamsFull(f"{self._per_key[key]} live streams are open with this API key, as many as one "
                                  "key may hold (KFORGE_SSE_MAX_STREAMS_PER_KEY): close one first")
            subscription = Subscription(job_id, key, asyncio.get_running_loop())
            self._by_job.setdefault(job_id, set()).add(subscription)
            self._open += 1
            if key is not None:
                self._per_key[key] += 1
        # A poller of an earlier event loop (a test client's, since closed) is of no use to this one.
        if self._poller is None or self._poller.done() or self._poller.get_loop() is not subscription.loop:
            self._poller = asyncio.create_task(self._poll())
        return subscription

    def close(self, subscription: Subscription) -> None:
        with self._lock:
            followers = self._by_job.get(subscription.job_id, set())
            if subscription not in followers:
                return
            followers.discard(subscription)
            if not followers:
                del self._by_job[subscription.job_id]
            self._open -= 1
            if subscription.key is not None:
                self._per_key[subscription.key] -= 1

    @property
    def open_streams(self) -> int:
        return self._open

    async def _poll(self) -> None:
        """Catch the index up while any stream is open; it ends with the last one (a list request catches up
        by itself), and the next stream to open starts it again."""
        while self._open:
            try:
                await run_in_threadpool(self.index.catch_up)
            except Exception:  # a store that is down for a moment: the streams wait, and the next poll retries
                log.exception("the live streams' poller could not read the event store")
            await asyncio.sleep(POLL_S)

    def _fan_out(self, batch: list[Event | Undecodable]) -> None:
        with self._lock:
            for event in batch:
                for subscription in self._by_job.get(job_id_of(event.stream_id), ()):
                    subscription.loop.call_soon_threadsafe(subscription.deliver, event)


async def job_event_stream(hub: StreamHub, subscription: Subscription, follower: JobFollower, history: list[Event],
                           resume_after: int, public: Callable[[Event], dict],
                           final: Callable[[], dict]) -> AsyncIterator[str]:
    """The job's `history` (what `follower` read after subscribing, so nothing falls between) and then its new
    events, from version `resume_after` on; `public` renders an event and `final` reads the finished job, as
    the JSON API does. The follower is the one follow_job uses: an event delivered twice, in the history and
    live, is taken and sent once, and the job's end is known from the view it folds."""
    try:
        for event in history:
            if event.stream_version > resume_after:
                yield _event(event, public)
        while not follower.view.finished:
            try:
                delivered = await asyncio.wait_for(subscription.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if delivered is None:
                return  # the client fell too far behind: it reconnects with Last-Event-ID
            for event in follower.take([delivered]):
                if event.stream_version > resume_after:
                    yield _event(event, public)
        yield _sse(json.dumps(await run_in_threadpool(final)), event="end")
    finally:
        hub.close(subscription)


def _event(event: Event | Undecodable, public: Callable[[Event], dict]) -> str:
    if isinstance(event, Undecodable):
        return _sse(json.dumps({"position": event.position, "type": event.type, "detail": event.describe()}),
                    event="unreadable", id=str(event.stream_version))
    return _sse(json.dumps(public(event)), event=event.type, id=str(event.stream_version))


def _sse(data: str, event: str, id: str | None = None) -> str:
    return (f"id: {id}\n" if id else "") + f"event: {event}\ndata: {data}\n\n"
