"""Which live process runs each job of an embedded kforge home, so that a killed one leaves no job unfinished.

Embedded, a job's workers are threads of the process that submitted it (`kforge tune`, a Python program, an
embedded `kforge serve`). Ctrl-C and SIGTERM cancel its job, but a process killed outright (SIGKILL, the OOM
killer) has no last word, and its job would stay unfinished for ever. So such a process holds an exclusive
lock on a file of its own under KFORGE_HOME/owners/<store> for as long as it lives, and writes each job's id
into it before recording the job; the kernel drops the lock when the process ends, however it ends. A later
process that opens the home with the same event store takes every lock it can (`dead_owners`): each one it
gets belonged to a process that is gone, whose unfinished jobs are then cancelled (shared/application/jobs.py
`cancel_orphaned_jobs`). Records are kept per store (a hash of its URL, which may hold a password): a home
used with two stores must not look for one's jobs in the other.

A lock rather than a recorded process id: ids are reused, and a lock cannot outlive its process. Services mode
records no owner: its workers are other processes, and the broker hands a dead worker's task to another.
"""
import fcntl
import hashlib
import json
import os
import shlex
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from uuid import uuid4

COMMAND_CHARS = 300  # of the owner's command line kept, to say in a cancellation what ran the job


class JobOwner:
    """This process, as the owner of the jobs it runs in an embedded home. Thread-safe: an embedded gateway
    submits from several threads."""

    def __init__(self, home: Path, database_url: str):
        self.directory = owners_directory(home, database_url)
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def claim(self, job_id: str) -> None:
        """Before `job_id` is recorded: a process killed in between leaves the id of a job that does not exist,
        which the sweep passes over, never a job without its owner."""
        with self._lock:
            if self._file is None:
                self._file = self._locked_file()
            self._file.write(json.dumps({"job": job_id}) + "\n")
            self._file.flush()

    def _locked_file(self) -> IO[str]:
        """A file that takes its final name only once locked: a sweep that found it unlocked would take its
        process for dead. Kept open, so locked, until the process ends."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{os.getpid()}-{uuid4().hex[:8]}"
        file = open(self.directory / f".{name}.tmp", "w")
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(json.dumps({"pid": os.getpid(), "command": _command()}) + "\n")
        file.flush()
        os.rename(self.directory / f".{name}.tmp", self.directory / f"{name}.lock")
        return file


@dataclass
class DeadOwner:
    """The record of a process that has ended, locked by the caller until `release`."""

    pid: int
    command: str
    job_ids: list[str]
    path: Path
    file: IO[str]

    def release(self) -> None:
        """Remove the record: its jobs have been dealt with."""
        self.path.unlink(missing_ok=True)
        self.file.close()


def owners_directory(home: Path, database_url: str) -> Path:
    return home / "owners" / hashlib.sha256(database_url.encode()).hexdigest()[:16]


def dead_owners(home: Path, database_url: str) -> list[DeadOwner]:
    """The records of the processes that ran jobs of this store from `home` and have ended, each locked by
    this process."""
    found = []
    for path in sorted(owners_directory(home, database_url).glob("*.lock")):
        try:
            file = open(path)
        except FileNotFoundError:
            continue  # another process released it meanwhile
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            continue  # its process lives
        records = _records(file.read())
        header = records[0] if records else {}
        found.append(DeadOwner(pid=header.get("pid", 0), command=header.get("command", "kforge"),
                               job_ids=[r["job"] for r in records if "job" in r], path=path, file=file))
    return found


def _records(text: str) -> list[dict]:
    """The file's lines as written; a line cut short by the kill that ended its writer is passed over."""
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _command() -> str:
    """How this process was started, as one would type it again: `kforge tune vector_add.cu --replay`."""
    words = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else sys.executable, *sys.argv[1:]]
    command = shlex.join(words)
    return command if len(command) <= COMMAND_CHARS else command[:COMMAND_CHARS] + " …"
