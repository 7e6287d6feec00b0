"""Jobs: submit one (202: the work is asynchronous), list the caller's, read one and its events, cancel one."""
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import JSONResponse

from services.gateway.deps import CallerDep, ReadsDep, RuntimeDep, VisibleJob
from services.gateway.problems import invalid_fields, too_many
from services.gateway.schemas import CancelRequest, EventPublic, FieldErrorPublic, JobAccepted, JobPublic, Problem
from shared.adapters.array_files import named_file_errors
from shared.application.jobs import (Admission, AdmissionRefused, JobFinished, QueueFull, cancel_job, job_events,
                                     submit_job)
from shared.domain.spec import KernelSpec

router = APIRouter(prefix="/jobs")


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, operation_id="submit_job",
             responses={429: {"model": Problem, "description": "too many unfinished jobs: retry after a while"}})
def submit(spec: KernelSpec, caller: CallerDep, rt: RuntimeDep, run: Annotated[str | None, Query(
        max_length=100, pattern=r"^[\w.:-]+$", description="a run name: jobs under one are compared as a set")]
        = None) -> JobAccepted | JSONResponse:
    admission = Admission.of(rt.settings)
    if caller.keyed:
        admission = replace(admission, max_open_jobs_of_tenant=rt.settings.max_open_jobs_per_key)
    if named := named_file_errors(spec):  # the workers would read whatever path a stranger named
        return invalid_fields([FieldErrorPublic(field=e.field, message=e.message) for e in named])
    try:
        job_id = submit_job(rt.store, rt.bus, spec, submitted_by="http", run=run, admission=admission,
                            tenant=caller.tenant, owner=rt.owner)
    except AdmissionRefused as exc:
        return invalid_fields([FieldErrorPublic(field=e.field, message=e.message) for e in exc.errors])
    except QueueFull as exc:
        return too_many(str(exc))
    return JobAccepted(job_id=job_id, status_url=f"/v1/jobs/{job_id}", events_url=f"/v1/jobs/{job_id}/events",
                       stream_url=f"/v1/jobs/{job_id}/stream")


@router.get("", response_model=list[JobPublic], operation_id="list_jobs")
def jobs(caller: CallerDep, reads: ReadsDep) -> list[JobPublic]:
    """The caller's jobs (every tenant's for an admin key), oldest first."""
    return [JobPublic.of(v) for v in reads.jobs(caller)]


@router.get("/{job_id}", response_model=JobPublic, operation_id="get_job", responses={404: {"model": Problem}})
def job(job: VisibleJob) -> JobPublic:
    return JobPublic.of(job)


@router.get("/{job_id}/events", response_model=list[EventPublic], operation_id="get_job_events",
            responses={404: {"model": Problem}, 500: {"model": Problem, "description": "an event that cannot be read"}})
def events(job: VisibleJob, rt: RuntimeDep) -> list[EventPublic]:
    return [EventPublic.of(e) for e in job_events(rt.store, job.job_id)]


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic,
             operation_id="cancel_job", responses={404: {"model": Problem},
                                                   409: {"model": Problem, "description": "the job has ended"}})
def cancel(job: VisibleJob, rt: RuntimeDep, body: CancelRequest | None = None) -> JobPublic:
    """Cancel an unfinished job: nothing new starts for it, and a running search stops at its next batch."""
    try:
        view = cancel_job(rt.store, rt.bus, job.job_id, reason=(body or CancelRequest()).reason, cancelled_by="http")
    except KeyError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job.job_id}") from None
    except JobFinished as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return JobPublic.of(view)
