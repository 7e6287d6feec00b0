"""GET /metrics: Prometheus text computed at scrape time (services/gateway/metrics.py); it needs no key."""
from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from services.gateway.deps import RuntimeDep
from services.gateway.metrics import KforgeCollector

router = APIRouter(include_in_schema=False)


@router.get("/metrics")
def metrics(rt: RuntimeDep) -> Response:  # sync: the store and Redis calls block, so FastAPI runs it in a thread
    # A registry of its own, per scrape: the global one holds process metrics of whichever library registered
    # there, and Flower, the workers and tests may share a process with the gateway.
    registry = CollectorRegistry()
    registry.register(KforgeCollector(rt))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
