"""A job's events as Server-Sent Events, live (services/gateway/stream.py holds the hub that feeds them)."""
from typing import Annotated

from fastapi import APIRouter, Header, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from services.gateway.deps import CallerDep, ReadsDep, RuntimeDep, VisibleJob
from services.gateway.problems import too_many
from services.gateway.schemas import EventPublic, JobPublic, Problem
from services.gateway.stream import StreamsFull, job_event_stream
from shared.application.jobs import JobFollower

router = APIRouter(prefix="/jobs")


@router.get("/{job_id}/stream", operation_id="stream_job_events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "each event as `event: <type>`, `id: <stream version>`, `data: <JSON as "
                                            "in /events>`; then `event: end` with the finished job"},
                       404: {"model": Problem},
                       429: {"model": Problem, "description": "as many live streams are open as allowed"}})
async def stream(job: VisibleJob, caller: CallerDep, reads: ReadsDep, rt: RuntimeDep,
                 last_event_id: Annotated[int, Header(ge=0, description="resume after this stream version, as an "
                                                                        "SSE client does")] = 0) -> Response:
    try:
        subscription = reads.hub.open(job.job_id, key=caller.tenant if caller.keyed else None)
    except StreamsFull as exc:
        return too_many(str(exc))
    follower = JobFollower(job.job_id)
    try:  # read after subscribing: what is stored meanwhile comes live, and nothing falls between
        history = await run_in_threadpool(follower.read, rt.store)
    except BaseException:
        reads.hub.close(subscription)
        raise

    def final() -> dict:
        return JobPublic.of(reads.job(caller, job.job_id)).model_dump(mode="json")

    events = job_event_stream(reads.hub, subscription, follower, history, last_event_id,
                              public=lambda e: EventPublic.of(e).model_dump(mode="json"), final=final)
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
