"""The web pages: a job list and a job page with live progress. They are static files; the browser calls
/v1 itself, with the API key the user types in when the server asks for one, so the pages need no key.
create_app mounts the pages' scripts and styles, `WEB`, at /static."""
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

WEB = Path(__file__).parent.parent / "web"

router = APIRouter(include_in_schema=False)


@router.get("/")
def jobs_page() -> FileResponse:
    return FileResponse(WEB / "index.html")


@router.get("/jobs/{job_id}")
def job_page() -> FileResponse:  # the page's script reads the job id from its address
    return FileResponse(WEB / "job.html")
