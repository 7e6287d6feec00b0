"""The web pages: a job list and a job page with live progress. They are static files; the browser calls
/v1 itself, with the API key the user types in when the server asks for one, so the pages need no key."""
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

WEB = Path(__file__).parent / "web"


def mount_pages(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    def jobs_page() -> FileResponse:
        return FileResponse(WEB / "index.html")

    @app.get("/jobs/{job_id}", include_in_schema=False)
    def job_page() -> FileResponse:  # the page's script reads the job id from its address
        return FileResponse(WEB / "job.html")

    app.mount("/static", StaticFiles(directory=WEB), name="static")
