"""The real `kforge` console script, run as a subprocess in embedded mode (SQLite under KFORGE_HOME)."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import HAS_GPU

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KFORGE = Path(sys.executable).parent / "kforge"
EVENT_TYPES = ["JobSubmitted", "BaselineRequested", "KernelCompiled", "BaselineFailed", "JobFailed"]
# The worker's record of its task lands once the task has answered: before or after JobFailed.
PROFILED = "TaskProfiled"

pytestmark = pytest.mark.skipif(not KFORGE.exists(), reason=f"console script {KFORGE} not installed")
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the job measures a baseline instead of failing")


def kforge(home: Path, *args: str, timeout: float = 120, columns: int = 200) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "KFORGE_GPUS")}
    env.update(KFORGE_HOME=str(home), COLUMNS=str(columns), NO_COLOR="1")
    return subprocess.run([str(KFORGE), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _out(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One `kforge tune` of vector_add, shared by the tests that read the job back."""
    home = tmp_path_factory.mktemp("kforge-home")
    result = kforge(home, "tune", "examples/vector_add.cu", "--spec", "examples/vector_add.yaml")
    match = re.search(r"job (\w+) submitted", result.stdout)
    assert match, _out(result)
    return home, match.group(1), result


@no_gpu_only
def test_tune_fails_at_device_stage_without_a_gpu(tuned):
    home, job_id, result = tuned
    out = _out(result)
    assert result.returncode == 1, out
    assert "embedded" in out
    assert "no CUDA device" in out
    assert "failed at device" in out
    assert "Traceback" not in out
    # progress lines, one per event, in order
    progress = [line.split()[1] for line in result.stdout.splitlines() if re.match(r"^\s+\d+ \w+", line)]
    assert [t for t in progress if t != PROFILED] == EVENT_TYPES
    assert (home / "kforge.db").exists()


@no_gpu_only
def test_jobs_lists_the_job(tuned):
    home, job_id, _ = tuned
    result = kforge(home, "jobs")
    assert result.returncode == 0, _out(result)
    (row,) = [line for line in result.stdout.splitlines() if job_id in line]
    assert "vector_add" in row and "tune" in row and "failed" in row


@no_gpu_only
def test_events_by_prefix_lists_the_six_events_in_order(tuned):
    home, job_id, _ = tuned
    result = kforge(home, "events", job_id[:5])
    assert result.returncode == 0, _out(result)
    kinds = [*EVENT_TYPES, PROFILED]
    rows = [line for line in result.stdout.splitlines() if any(t in line for t in kinds)]
    assert sorted(next(t for t in kinds if t in row) for row in rows) == sorted(kinds)
    numbers = [int(re.search(r"\d+", row).group()) for row in rows]
    assert numbers == [1, 2, 3, 4, 5, 6]
    failed = [row for row in rows if "BaselineFailed" in row or "JobFailed" in row]
    assert len(failed) == 2 and all("no CUDA device" in row for row in failed)


@no_gpu_only
def test_events_json_prints_one_object_per_event(tuned):
    home, job_id, _ = tuned
    result = kforge(home, "events", job_id, "--json")
    assert result.returncode == 0, _out(result)
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 6
    events = [json.loads(line) for line in lines]
    [profiled] = [e for e in events if e["type"] == PROFILED]
    assert profiled["task"] == "benchmark.measure_baseline" and profiled["request_id"] == events[1]["event_id"]
    events = [e for e in events if e["type"] != PROFILED]
    assert [e["type"] for e in events] == EVENT_TYPES
    positions = [e["position"] for e in events]
    assert all(a < b for a, b in zip(positions, positions[1:]))
    assert {e["stream_id"] for e in events} == {f"job-{job_id}"}
    assert events[0]["spec"]["kernel_name"] == "vector_add"
    assert events[3]["stage"] == "device" and events[3]["reason"].startswith("no CUDA device")
    assert events[2]["request_id"] == events[1]["event_id"]


@no_gpu_only
def test_show_by_prefix_shows_the_failure(tuned):
    home, job_id, _ = tuned
    result = kforge(home, "show", job_id[:6])
    assert result.returncode == 0, _out(result)
    assert job_id in result.stdout
    assert "device: no CUDA device" in result.stdout


@no_gpu_only
def test_jobs_fit_80_columns_with_the_full_job_id(tuned):
    home, job_id, _ = tuned
    result = kforge(home, "jobs", columns=80)
    assert result.returncode == 0, _out(result)
    assert all(len(line) <= 80 for line in result.stdout.splitlines()), result.stdout
    (row,) = [line for line in result.stdout.splitlines() if job_id in line]
    assert "vector_add" in row and "failed" in row


@no_gpu_only
def test_jobs_and_show_as_json_carry_the_full_job_id(tuned):
    home, job_id, _ = tuned
    listed = kforge(home, "jobs", "--json")
    assert listed.returncode == 0, _out(listed)
    (job,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (job["job_id"], job["kernel_name"], job["status"], job["failed_stage"]) == (
        job_id, "vector_add", "failed", "device")
    shown = kforge(home, "show", job_id[:4], "--json")
    assert shown.returncode == 0, _out(shown)
    assert json.loads(shown.stdout) == job


def test_tune_json_prints_one_object_and_the_progress_on_stderr(tmp_path):
    result = kforge(tmp_path, "tune", "examples/vector_add.cu", "--replay", "--no-save", "--json")
    assert result.returncode == 0, _out(result)
    job = json.loads(result.stdout)
    assert job["status"] == "completed" and len(job["job_id"]) == 12
    assert job["baseline_ms"] == pytest.approx(0.2962, abs=1e-4) and job["best_params"] == {"block_size_x": 256}
    assert job["speedup"] is not None and job["failure"] is None
    assert f"job {job['job_id']} submitted" in result.stderr and "JobCompleted" in result.stderr


def test_show_unknown_job_exits_2_with_a_hint(tmp_path):
    result = kforge(tmp_path, "show", "nosuchjob")
    out = _out(result)
    assert result.returncode == 2, out
    assert "no job starts with 'nosuchjob'" in out
    assert "kforge jobs" in out
    assert "Traceback" not in out


BAD_SPEC = """\
kernel_name: vector_add
sizes: {n: 1024}
args:
  - {name: c, dtype: float, shape: [n], role: out}
  - {name: a, dtype: float32, shape: [n]}
  - {name: b, dtype: float32, shape: [n]}
  - {name: n, dtype: int32, value: n}
params: {block_size_x: 256}
tune_param: {block_size_x: [32, 64]}
"""


def test_invalid_spec_exits_2_naming_each_field_and_its_fix(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC)

    result = kforge(tmp_path, "tune", "examples/vector_add.cu", "--spec", str(spec))

    out = _out(result)
    assert result.returncode == 2, out
    assert "invalid submission" in out and str(spec) in out
    (dtype_line,) = [line for line in out.splitlines() if "args[0].dtype" in line]
    assert "'float' is not a dtype" in dtype_line and "float32" in dtype_line
    (field_line,) = [line for line in out.splitlines() if line.strip().startswith("tune_param:")]
    assert "unknown field" in field_line and "did you mean 'tune_params'?" in field_line
    assert "Traceback" not in out
    assert "submitted" not in out  # nothing was submitted


SWAPPED_SPEC = """kernel_name: vector_add
sizes: {n: 1024}
args:  # vector_add takes (c, a, b, n): n is listed first
  - {name: n, dtype: int32, value: n}
  - {name: c, dtype: float32, shape: [n], role: out}
  - {name: a, dtype: float32, shape: [n]}
  - {name: b, dtype: float32, shape: [n]}
strategy: {name: baseline}
"""


def test_a_spec_whose_args_disagree_with_the_kernel_exits_2_naming_each(tmp_path):
    spec = tmp_path / "swapped.yaml"
    spec.write_text(SWAPPED_SPEC)

    result = kforge(tmp_path, "tune", "examples/vector_add.cu", "--spec", str(spec), "--replay")

    out = _out(result)
    assert result.returncode == 2, out
    assert f"invalid submission ({spec})" in out
    lines = [line.strip() for line in out.splitlines()]
    assert [line.partition(":")[0] for line in lines[1:]] == ["args[0]", "args[3]"], out
    assert "give n a shape if the kernel takes an array there" in lines[1]
    assert "give b a value instead of a shape" in lines[2]
    assert "submitted" not in out and "Traceback" not in out


def test_invalid_yaml_reports_the_line(tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text("kernel_name: vector_add\nargs: [\n")

    result = kforge(tmp_path, "tune", "examples/vector_add.cu", "--spec", str(spec))

    out = _out(result)
    assert result.returncode == 2, out
    assert "not valid YAML at line" in out
    assert "Traceback" not in out


def test_without_a_spec_tune_prints_the_inferred_one_and_submits_it(tmp_path):
    kernel = tmp_path / "lonely.cu"
    kernel.write_text((EXAMPLES / "vector_add.cu").read_text())

    result = kforge(tmp_path, "tune", str(kernel), "--replay", "--size", "n=4096", "--no-save")

    out = _out(result)
    assert f"no spec beside {kernel}: inferred from the kernel's signature" in out
    assert "  - {name: c, dtype: float32, shape: [n], role: out}" in out.splitlines()
    assert "sizes: {n: 4096}" in out.splitlines()
    # admitted (compiled and its PTX signature checked against the inferred args), then run as replay
    assert re.search(r"job \w+ submitted", out) and "JobSubmitted       vector_add, strategy tune" in out, out
    assert "Traceback" not in out


def test_without_a_spec_several_kernels_need_kernel(tmp_path):
    kernel = tmp_path / "two.cu"
    kernel.write_text("__global__ void a(float *x, int n) {}\n__global__ void b(float *y, int m) {}\n")

    result = kforge(tmp_path, "tune", str(kernel))

    out = _out(result)
    assert result.returncode == 2, out
    assert "--kernel: the source defines 2 kernels (a, b): name the one to tune" in out
    assert "submitted" not in out and "Traceback" not in out


def test_spec_writes_the_inferred_spec_beside_the_kernel_and_keeps_an_existing_one(tmp_path):
    kernel = tmp_path / "k.cu"
    kernel.write_text((EXAMPLES / "vector_add.cu").read_text())

    written = kforge(tmp_path, "spec", str(kernel), "--size", "n=4096")
    again = kforge(tmp_path, "spec", str(kernel))

    assert written.returncode == 0, _out(written)
    text = (tmp_path / "k.yaml").read_text()
    assert text.startswith("# inferred by kforge from the signature of vector_add") and "sizes: {n: 4096}" in text
    assert again.returncode == 2 and "exists; pass --force to overwrite it" in _out(again)
    assert (tmp_path / "k.yaml").read_text() == text
    forced = kforge(tmp_path, "spec", str(kernel), "--force")
    assert forced.returncode == 0 and "sizes: {n: 1048576}" in (tmp_path / "k.yaml").read_text()


def test_worker_without_redis_exits_2(tmp_path):
    result = kforge(tmp_path, "worker")
    out = _out(result)
    assert result.returncode == 2, out
    assert "REDIS_URL is not set" in out
    assert "Traceback" not in out


@no_gpu_only
def test_a_tune_past_its_timeout_is_cancelled_and_leaves_the_files_of_its_best_so_far(tmp_path):
    """matmul's replayed search compiles for a minute without a GPU, so it is unfinished at 3 s whatever the
    machine's speed (an explicit job of vector_add could fail at its unprovable verification first)."""
    out = tmp_path / "out"
    result = kforge(tmp_path, "tune", "examples/matmul.cu", "--replay", "--timeout", "3", "--out", str(out))

    assert result.returncode == 3, _out(result)
    assert "cancelled, as its in-process workers stop with this command" in _out(result)
    assert "files of the best so far in" in _out(result) and "Traceback" not in _out(result)
    [job_dir] = out.iterdir()
    assert {"history.json", "overview.txt", "transcript.log"} <= {p.name for p in job_dir.iterdir()}


def _tune_matmul_searching(home: Path, *args: str) -> tuple[subprocess.Popen, list[str]]:
    """`kforge tune` of matmul in replay (a minute of compiles without a GPU), started in a session of its own,
    and the lines it printed up to its third configuration."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "KFORGE_GPUS")}
    env.update(KFORGE_HOME=str(home), COLUMNS="200", NO_COLOR="1")
    process = subprocess.Popen([str(KFORGE), "tune", "examples/matmul.cu", "--replay", "--verbose", *args],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    printed = []
    while sum("ConfigMeasured" in line for line in printed) < 3 and (line := process.stdout.readline()):
        printed.append(line)
    return process, printed


def _tune_matmul_then_interrupt(home: Path, signals: int) -> tuple[subprocess.CompletedProcess, float]:
    """_tune_matmul_searching interrupted as Ctrl-C does it (SIGINT to the terminal's foreground process group),
    `signals` times back to back; returns what it printed, and the seconds from the first signal to its exit."""
    process, printed = _tune_matmul_searching(home, "--out", str(home / "out"))
    sent = time.monotonic()
    for _ in range(signals):
        os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    exited = time.monotonic() - sent
    return subprocess.CompletedProcess(process.args, process.returncode, "".join(printed) + stdout, stderr), exited


@pytest.mark.parametrize("signals", [1, 2], ids=["ctrl-c", "ctrl-c twice"])
def test_ctrl_c_cancels_the_tune_within_2_s_and_keeps_its_best_so_far(tmp_path, signals):
    result, exited = _tune_matmul_then_interrupt(tmp_path, signals)

    out = _out(result)
    assert "ConfigMeasured" in out, out  # it was searching when interrupted
    job_id = re.search(r"job (\w+) submitted", out).group(1)
    assert result.returncode == 130, out
    assert exited < 2, f"exited {exited:.2f} s after the first SIGINT"
    assert "Traceback" not in out
    shown = kforge(tmp_path, "show", job_id, "--json")  # a second Ctrl-C may leave the cancel to the next command
    assert json.loads(shown.stdout)["status"] == "cancelled", _out(shown)
    if signals == 1:
        assert f"interrupted (SIGINT): job {job_id} cancelled" in out
        written = {p.name for p in (tmp_path / "out" / job_id).iterdir()}
        [kernel] = [name for name in written if name.endswith(".cu")]
        assert kernel.startswith("matmul_optimised_") and {"history.json", "overview.txt"} <= written
        assert json.loads((tmp_path / "out" / job_id / "history.json").read_text())["result"]["best"] is not None


@no_gpu_only
def test_a_tune_whose_job_is_cancelled_by_another_command_says_so_and_exits_1(tmp_path):
    process, printed = _tune_matmul_searching(tmp_path, "--no-save")
    job_id = re.search(r"job (\w+) submitted", "".join(printed)).group(1)
    cancelled = kforge(tmp_path, "cancel", job_id)
    out = "".join(printed) + "".join(process.communicate(timeout=60))

    assert cancelled.returncode == 0, _out(cancelled)
    assert process.returncode == 1, out
    said = " ".join(out.split())
    assert "cancelled:" in said and "still cancelled" not in said and "Traceback" not in said


def test_a_piped_tune_prints_its_progress_not_a_line_per_configuration_within_80_columns(tmp_path):
    result = kforge(tmp_path, "tune", "examples/vector_add.cu", "--replay", "--no-save", columns=80)

    assert result.returncode == 0, _out(result)
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "ConfigMeasured" not in result.stdout and "TuningCompleted" in result.stdout
    assert any(line.startswith("  [REPLAY] tuning 6/6, done") for line in lines), result.stdout
