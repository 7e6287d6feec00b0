"""Writes the files a job leaves behind (what they contain: `shared.domain.reports.files`) into a directory."""
from collections.abc import Sequence
from pathlib import Path

from shared.domain.events import Event
from shared.domain.reports.files import job_files


def write_job_files(events: Sequence[Event], directory: Path, plots: bool = True) -> list[Path]:
    """Write the job's files into `directory` (created if need be), the plots only when `plots`; returns their
    paths."""
    files = job_files(events, plots)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written
