"""What the Redis broker holds, read straight from Kombu's keys: how deep each queue is (metrics,
backpressure) and which task ids it still carries, queued or delivered but not yet acknowledged
(recovery sends a request again only when no message for it is left anywhere).

Kombu's Redis transport keeps a queue as a list named after it, each element a JSON message whose
`headers.id` is the Celery task id, and every delivered, unacknowledged message in the hash `unacked`
(value: JSON [message, exchange, routing_key]) until the worker acknowledges it.
"""
import json

import redis

from shared.domain.contracts import GENERATOR_QUEUE, PLANNER_QUEUE, WEBHOOKS_QUEUE, benchmark_queue, verifier_queue

UNACKED_KEY = "unacked"


def known_queues(gpus: list[str]) -> list[str]:
    """Every queue kforge sends to, for these GPUs."""
    return [PLANNER_QUEUE, GENERATOR_QUEUE, WEBHOOKS_QUEUE,
            *(q for gpu in gpus for q in (benchmark_queue(gpu), verifier_queue(gpu)))]


class Broker:
    def __init__(self, redis_url: str):
        self.client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)

    def depths(self, queues: list[str]) -> dict[str, int]:
        """Messages waiting in each queue (not counting those a worker holds)."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.llen(queue)
            return dict(zip(queues, pipe.execute()))

    def unacknowledged(self) -> int:
        """Messages delivered to a worker and not yet acknowledged: running, or waiting for their ETA."""
        return self.client.hlen(UNACKED_KEY)

    def task_ids(self, queues: list[str]) -> set[str]:
        """Ids of every task the broker still holds: queued in `queues`, or delivered and unacknowledged."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.lrange(queue, 0, -1)
            pipe.hvals(UNACKED_KEY)
            *queued, unacked = pipe.execute()
        messages = [json.loads(m) for q in queued for m in q] + [json.loads(v)[0] for v in unacked]
        return {m.get("headers", {}).get("id") for m in messages} - {None}

    def claim(self, key: str, ttl_s: float) -> bool:
        """Take a lease on `key` for `ttl_s` seconds unless another process holds it."""
        return bool(self.client.set(key, "1", nx=True, px=max(1, int(ttl_s * 1000))))

    def close(self) -> None:
        self.client.close()
