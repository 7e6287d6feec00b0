"""kforge writes a job's files, whose contents shared.domain.reports.files folds from the events."""
import pytest

from kforge.job_files import write_job_files
from shared.domain.reports.files import job_files
from tests.report_streams import rewrite_job


def test_write_job_files_writes_every_file_with_its_contents(vector_add_spec, tmp_path):
    events = rewrite_job(vector_add_spec)
    written = write_job_files(events, tmp_path / "out")

    contents = job_files(events)
    assert written == [tmp_path / "out" / name for name in contents]
    for path in written:  # matplotlib gives each drawing fresh element ids: the plots are compared by kind
        text = path.read_text()
        assert text.startswith("<?xml") if path.suffix == ".svg" else text == contents[path.name]


def test_write_job_files_writes_nothing_without_a_submitted_job(tmp_path):
    with pytest.raises(ValueError, match="no submitted job"):
        write_job_files([], tmp_path / "out")
    assert not (tmp_path / "out").exists()
