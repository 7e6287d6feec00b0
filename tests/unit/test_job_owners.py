"""Who runs an embedded job: a process's lock on its record lives exactly as long as it does, so a later process
cancels the unfinished jobs of one that was killed, and leaves those of a live one alone."""
import os
import signal
import subprocess
import sys

from shared.adapters.job_owners import JobOwner, dead_owners, owners_directory
from shared.application.jobs import cancel_orphaned_jobs, get_job, job_events
from shared.domain.events import JobCancelled, JobCompleted, JobSubmitted
from shared.domain.projections import job_stream

CLAIMS_AND_WAITS = """
import sys, time
from pathlib import Path
from shared.adapters.job_owners import JobOwner
owner = JobOwner(Path(sys.argv[1]), sys.argv[2])
for job_id in sys.argv[3:]:
    owner.claim(job_id)
print("claimed", flush=True)
time.sleep(120)
"""


def killed_owner(home, database_url, *job_ids) -> int:
    """The pid of a process that claimed `job_ids` and was then killed (SIGKILL: it had no last word)."""
    child = subprocess.Popen([sys.executable, "-c", CLAIMS_AND_WAITS, str(home), database_url, *job_ids],
                             stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    assert child.stdout.readline() == "claimed\n"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    child.stdout.close()
    return child.pid


def submitted(store, job_id, spec) -> None:
    stream = job_stream(job_id)
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)


def test_a_killed_owners_unfinished_jobs_are_cancelled_once_and_its_record_removed(store, sqlite_url, tmp_path,
                                                                                  vector_add_spec):
    for job_id in ("running", "ended"):
        submitted(store, job_id, vector_add_spec)
    store.append(job_stream("ended"), [JobCompleted(stream_id=job_stream("ended"), summary="done")],
                 expected_version=1)
    pid = killed_owner(tmp_path, sqlite_url, "running", "ended", "never-recorded")

    assert cancel_orphaned_jobs(store, tmp_path, sqlite_url) == ["running"]

    view = get_job(store, "running")
    assert view.status == "cancelled"
    assert view.failure.startswith(f"`-c {tmp_path} {sqlite_url} running ended never-recorded` (pid {pid}), which "
                                   "ran this job in its own process, was killed or ended before the job did")
    [cancelled] = [e for e in job_events(store, "running") if isinstance(e, JobCancelled)]
    assert cancelled.cancelled_by == "kforge"
    assert get_job(store, "ended").status == "completed" and get_job(store, "never-recorded") is None
    assert list(owners_directory(tmp_path, sqlite_url).glob("*.lock")) == []  # the record went with its jobs
    assert cancel_orphaned_jobs(store, tmp_path, sqlite_url) == []  # and nothing is cancelled twice


def test_a_live_owner_and_another_stores_records_are_left_alone(store, sqlite_url, tmp_path, vector_add_spec):
    submitted(store, "mine", vector_add_spec)
    live = JobOwner(tmp_path, sqlite_url)
    live.claim("mine")
    other_store = f"sqlite:///{tmp_path / 'other.db'}"
    killed_owner(tmp_path, other_store, "theirs")

    assert dead_owners(tmp_path, sqlite_url) == []  # this process holds its lock
    assert cancel_orphaned_jobs(store, tmp_path, sqlite_url) == []
    assert get_job(store, "mine").status == "submitted"
    [theirs] = dead_owners(tmp_path, other_store)  # found only by a process of that store
    assert theirs.job_ids == ["theirs"]
    theirs.release()


def test_a_record_cut_short_by_the_kill_is_read_as_far_as_it_goes(store, sqlite_url, tmp_path, vector_add_spec):
    submitted(store, "whole", vector_add_spec)
    killed_owner(tmp_path, sqlite_url, "whole")
    [record] = owners_directory(tmp_path, sqlite_url).glob("*.lock")
    with open(record, "a") as file:
        file.write('{"job": "cut sh')  # the kill came in the middle of a line

    assert cancel_orphaned_jobs(store, tmp_path, sqlite_url) == ["whole"]
