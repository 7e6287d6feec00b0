"""The compile children's working directories (shared/adapters/device/compiler.py) are removed on every exit that
runs Python, and a process killed before it could leaves a folder that the next process to start a child removes.
Each process here runs with TMPDIR in the test's own directory, and makes its directory as a Sandbox does."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shared.adapters.device.compiler import remove_stale_workdirs

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys
from shared.adapters.device import compiler
how = sys.argv[1]
if how == "interrupted":  # SIGTERM as kforge tune takes it: KeyboardInterrupt
    from kforge.cli import _interrupt_on_signals
    _interrupt_on_signals()
print(compiler._WORKDIRS.new(), flush=True)
sys.stdin.readline()  # until the test has seen the directory, or signals or kills it meanwhile
if how == "exception":
    raise RuntimeError("a failing command")
if how == "exit_now":  # kforge tune's quick exit, after an interrupt or its --timeout
    from kforge.cli import _exit_now
    _exit_now(130)
"""
ENDS = {"returns": 0, "exception": 1, "exit_now": 130, "interrupted": -signal.SIGINT}  # an uncaught interrupt


def start(tmp_path: Path, how: str) -> tuple[subprocess.Popen, Path]:
    """A process that makes a working directory, then waits for a line before it ends as `how` says; the
    directory's folder."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, how], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    workdir = Path(child.stdout.readline().strip())
    assert workdir.is_dir() and workdir.parent.parent == tmp_path, child.stderr.read()
    assert workdir.parent.name.startswith(f"kforge-compile-{child.pid}-")
    return child, workdir.parent


def folders(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("kforge-compile-*"))


@pytest.mark.parametrize("how", list(ENDS))
def test_every_exit_that_runs_python_removes_the_folder(tmp_path, how):
    child, folder = start(tmp_path, how)
    if how == "interrupted":
        child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate("go\n", timeout=60)
    assert child.returncode == ENDS[how], stderr
    assert not folder.exists() and folders(tmp_path) == []


def test_a_killed_process_leaves_its_folder_and_the_next_start_removes_it(tmp_path):
    killed, stale = start(tmp_path, "returns")
    killed.kill()
    killed.communicate(timeout=60)
    assert stale.is_dir()  # SIGKILL: no Python ran
    alive, kept = start(tmp_path, "returns")
    try:
        assert folders(tmp_path) == [kept]  # its start removed the killed process's
        (tmp_path / "kforge-compile-notapid").mkdir()  # not named by this scheme: left alone
        assert remove_stale_workdirs(str(tmp_path)) == [] and kept.is_dir()  # a live process's is never stale
    finally:
        alive.kill()
        alive.communicate(timeout=60)
    assert remove_stale_workdirs(str(tmp_path)) == [kept]
    assert [f.name for f in folders(tmp_path)] == ["kforge-compile-notapid"]
