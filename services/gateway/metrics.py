"""What GET /metrics serves (routes/metrics.py): Prometheus text computed at scrape time from the event store
and the broker.

Nothing is counted in the gateway's memory: the store is the truth, and the gateway may run as several
replicas or restart, so a collector folds the relevant events on each scrape (as the read models do)
and asks Redis for its queue depths. It reads only small event types (no measurements), by type.
"""
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from shared.adapters.broker import Broker, known_queues
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.requests import ANSWERS
from shared.application.runtime import Runtime
from shared.domain.contracts import gpu_of
from shared.domain.events import JOB_ENDS, BaselineRequested, JobSubmitted, ShardTuned, TaskProfiled, TuningRequested
from shared.domain.projections import TERMINAL, by_stream, project_job

STATUSES = ("submitted", "benchmarking", "tuning", *TERMINAL)
# The only events that change a job's status (shared/domain/projections.py): folding just these gives JobView.status.
STATUS_EVENTS = [t.__name__ for t in (JobSubmitted, BaselineRequested, TuningRequested, *JOB_ENDS)]
REQUESTS = [t.__name__ for t in ANSWERS]  # every event a worker task answers: where its queue wait starts
# Seconds, from a cached compile or a planner step (10 ms) to a long tuning sweep (an hour).
BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class KforgeCollector:
    """The metrics of one scrape, read from `runtime`'s store and broker (routes/metrics.py serves them)."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        rt = self.runtime
        yield from _jobs(rt.store)
        yield from _tasks_and_gpus(rt.store)
        if rt.settings.redis_url:  # embedded mode has no broker: its queues live in this process
            yield from _broker(rt.settings)


def _jobs(store: EventStore) -> Iterator[Metric]:
    streams = by_stream(store.read_types(STATUS_EVENTS, stream_prefix="job-"))
    counts = Counter(project_job(events).status for events in streams.values())
    by_status = GaugeMetricFamily("kforge_jobs", "Jobs by current status", labels=["status"])
    for s in STATUSES:
        by_status.add_metric([s], counts[s])
    yield by_status
    yield CounterMetricFamily("kforge_jobs_submitted", "Jobs submitted", value=len(streams))


def _tasks_and_gpus(store: EventStore) -> Iterator[Metric]:
    requests = {e.event_id: e for e in store.read_types(REQUESTS)}
    wall, wait = defaultdict(list), defaultdict(list)
    for e in store.read_types([TaskProfiled.__name__]):
        wall[e.task].append(e.wall_s)
        if (request := requests.get(e.request_id)) is not None:
            # Clamped: worker and gateway clocks may disagree by a little.
            wait[e.task].append(max((e.started_at - request.occurred_at).total_seconds(), 0.0))
    yield _histogram("kforge_task_duration_seconds", "Wall time of worker tasks", wall)
    yield _histogram("kforge_task_queue_wait_seconds", "From a task's request to its start on a worker", wait)

    # Labelled by the GPU id (from the request's queue benchmark.<gpu>) too: identical GPUs share a name.
    busy, elapsed = Counter(), Counter()
    for e in store.read_types([ShardTuned.__name__]):
        request = requests.get(e.request_id)
        key = (e.device, gpu_of(request.queue) if request is not None else "")
        busy[key] += e.gpu_busy_s
        elapsed[key] += e.wall_s
    labels = ["device", "gpu"]
    busy_total = CounterMetricFamily("kforge_gpu_busy_seconds", "GPU time spent checking and timing", labels=labels)
    wall_total = CounterMetricFamily("kforge_gpu_wall_seconds", "Wall time of tuning shards", labels=labels)
    ratio = GaugeMetricFamily("kforge_gpu_utilisation_ratio", "GPU busy seconds / shard wall seconds",
                              labels=labels)
    for key in elapsed:
        busy_total.add_metric(list(key), busy[key])
        wall_total.add_metric(list(key), elapsed[key])
        if elapsed[key] > 0:  # a shard that found no device took no time
            ratio.add_metric(list(key), busy[key] / elapsed[key])
    yield from (busy_total, wall_total, ratio)


def _histogram(name: str, doc: str, observations: dict[str, list[float]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["task"])
    for task, values in sorted(observations.items()):
        buckets = [(floatToGoString(le), sum(v <= le for v in values)) for le in BUCKETS_S]
        family.add_metric([task], [*buckets, ("+Inf", len(values))], sum_value=sum(values))
    return family


def _broker(settings: Settings) -> Iterable[Metric]:
    up = GaugeMetricFamily("kforge_broker_up", "Whether the gateway reached the Redis broker on this scrape")
    broker = Broker(settings.redis_url)
    try:
        depths, unacked = broker.depths(known_queues(settings.gpus)), broker.unacknowledged()
    except (redis.RedisError, OSError):
        # The scrape still succeeds: a broker that is down is what an alert should see, not a failed scrape.
        up.add_metric([], 0)
        return [up]
    finally:
        broker.close()
    up.add_metric([], 1)
    depth = GaugeMetricFamily("kforge_queue_depth", "Messages waiting in a queue", labels=["queue"])
    for queue, n in depths.items():
        depth.add_metric([queue], n)
    return [up, depth, GaugeMetricFamily("kforge_messages_unacknowledged",
                                         "Messages delivered to a worker and not yet acknowledged", value=unacked)]
