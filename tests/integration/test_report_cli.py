"""The reports through the real `kforge` script and the Python API, on jobs that ran the whole embedded
pipeline with replayed H100 measurements (NVRTC compiles for real; workers record TaskProfiled)."""
import json
import re
import subprocess
import sys

import pytest

from tests.integration.test_cli import KFORGE, ROOT, _out, kforge, no_gpu_only

pytestmark = pytest.mark.skipif(not KFORGE.exists(), reason=f"console script {KFORGE} not installed")


def _tune(home, run: str):
    result = kforge(home, "tune", "examples/vector_add.cu", "--replay", "--run", run, "--out", str(home / "out"))
    assert result.returncode == 0, _out(result)
    return re.search(r"job (\w+) submitted", result.stdout).group(1), result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    home = tmp_path_factory.mktemp("kforge-reports")
    before, tuned = _tune(home, "before")
    after, _ = _tune(home, "after")
    return home, before, after, tuned


def test_tune_prints_the_overview_and_writes_the_files(runs):
    home, before, _, tuned = runs
    assert "Performance overview: vector_add" in tuned.stdout and "baseline 0.2962 ms -> final" in tuned.stdout
    files = sorted(p.name for p in (home / "out" / before).iterdir())
    assert files == ["history.json", "history.svg", "landscape.svg", "overview.txt", "transcript.log",
                     "vector_add_optimised_1.000x.cu"]
    history = json.loads((home / "out" / before / "history.json").read_text())
    assert history["result"]["run"] == "before" and history["result"]["replay"] is True


def test_compare_gates_ci_on_regressions(runs, tmp_path):
    home, before, after, _ = runs
    same = kforge(home, "compare", "before", "after", "--fail-on-regression")
    assert same.returncode == 0, _out(same)
    assert "NO_CHANGE" in same.stdout and "0 regressions" in same.stdout

    # A stored baseline twice as fast as today's runs: today's run is a regression, and CI fails.
    saved = tmp_path / "baseline.json"
    assert kforge(home, "export-run", "before", str(saved)).returncode == 0
    run = json.loads(saved.read_text())
    for entry in run["kernels"].values():
        entry["time_ms"] /= 2
        entry["samples_ms"] = [s / 2 for s in entry["samples_ms"]]
    saved.write_text(json.dumps(run))
    gate = kforge(home, "compare", str(saved), "after", "--fail-on-regression")
    assert gate.returncode == 1, _out(gate)
    assert "REGRESSION" in gate.stdout and "top regressions: vector_add[n=67108864] +100.0%" in gate.stdout
    as_json = json.loads(kforge(home, "compare", str(saved), after, "--json", "-").stdout)
    assert as_json["summary"]["regressions_count"] == 1 and as_json["current"] == after


def test_report_suggest_profile_and_export(runs, tmp_path):
    home, before, _, _ = runs
    report = kforge(home, "report", before[:6])
    assert report.returncode == 0 and "no step made the kernel faster" in report.stdout
    tracker = json.loads(kforge(home, "report", before, "--json", "-").stdout)
    assert tracker["baseline_time"] == pytest.approx(0.2962, abs=1e-4) and tracker["speedup"] == 1.0

    suggestions = kforge(home, "suggest", before, "--json", str(tmp_path / "s.json"))
    assert suggestions.returncode == 0 and isinstance(json.loads((tmp_path / "s.json").read_text()), list)

    profile = json.loads(kforge(home, "profile", before, "--json", "-").stdout)
    stages = {s["stage"]: s for s in profile["stages"]}
    # The in-process workers recorded the baseline and the tuning: both were queued, compiled and measured.
    assert stages["benchmark"]["tasks"] == 2 and stages["queue wait"]["tasks"] == 2
    assert profile["tasks_unprofiled"] == 0 and profile["peak_worker_memory_mb"] > 0
    assert profile["compiles"] == 7 and 0 <= profile["cache_hit_rate"] <= 1
    table = kforge(home, "profile")
    assert "pipeline profile of 2 jobs" in table.stdout and "compile cache hit rate" in table.stdout

    exported = kforge(home, "export", before, "--out", str(tmp_path / "again"))
    assert exported.returncode == 0 and (tmp_path / "again" / before / "history.json").exists()


def test_export_run_makes_its_folder_and_a_missing_run_file_is_not_found(runs, tmp_path):
    home, *_ = runs
    saved = tmp_path / "ci" / "baselines" / "before.json"
    exported = kforge(home, "export-run", "before", str(saved))
    assert exported.returncode == 0, _out(exported)
    assert json.loads(saved.read_text())["kernels"]

    missing = kforge(home, "compare", str(tmp_path / "nowhere.json"), "before")
    assert missing.returncode == 2 and "Traceback" not in _out(missing)
    assert f"{tmp_path / 'nowhere.json'}: no such file" in _out(missing)


def test_slow_lists_and_optimises_in_a_batch(runs):
    home, *_ = runs
    assert "no kernel below 0.8x" in kforge(home, "slow").stdout
    listed = kforge(home, "slow", "--threshold", "1.5")
    assert "vector_add[n=67108864]" in listed.stdout and "1.00x" in listed.stdout
    batch = kforge(home, "slow", "--threshold", "1.5", "--optimise", "--strategy", "tune", "--run", "retry")
    assert batch.returncode == 0, _out(batch)
    assert re.search(r"vector_add\[n=67108864\]: job \w+ submitted \(tune\)", batch.stdout)
    assert "completed" in batch.stdout and "kforge compare <earlier run> retry" in batch.stdout


def test_slow_refuses_a_strategy_the_specs_cannot_take_naming_the_field(runs):
    home, *_ = runs
    batch = kforge(home, "slow", "--threshold", "1.5", "--optimise", "--strategy", "verify", "--run", "bad")
    assert batch.returncode == 2, _out(batch)
    assert "--strategy verify: strategy" in batch.stderr + batch.stdout and "Traceback" not in batch.stderr


@pytest.fixture(scope="module")
def two_kernels(tmp_path_factory):
    """A home where reduce_sum and vector_add were each tuned once, from recordings: `kforge slow --threshold 1.5`
    lists both."""
    home = tmp_path_factory.mktemp("kforge-slow")
    for kernel in ("reduction", "vector_add"):
        tuned = kforge(home, "tune", f"examples/{kernel}.cu", "--replay", "--run", "first", "--no-save")
        assert tuned.returncode == 0, _out(tuned)
    return home


def _batch(home, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """`kforge slow --optimise` of both kernels, and its jobs by kernel."""
    result = kforge(home, "slow", "--threshold", "1.5", "--optimise", *args)
    jobs = dict(re.findall(r"^(\w+)\[.*\]: job (\w+) submitted", result.stdout, re.MULTILINE))
    assert set(jobs) == {"reduce_sum", "vector_add"}, _out(result)
    return result, jobs


def test_slow_follows_its_jobs_against_one_deadline_and_cancels_those_unfinished(two_kernels):
    batch, jobs = _batch(two_kernels, "--strategy", "tune", "--run", "late", "--timeout", "0")
    assert batch.returncode == 3, _out(batch)  # as kforge tune past its --timeout
    said = " ".join(_out(batch).split())
    assert "still unfinished after 0 s:" in said and "Traceback" not in said
    listed = kforge(two_kernels, "jobs", "--json")
    statuses = {j["job_id"]: j["status"] for j in map(json.loads, listed.stdout.splitlines())}
    # A replay is quick: a job may end before the deadline (the first submitted, while the second is), and is then
    # printed as it ended and not listed; or between the deadline and its cancel, and is then said to have ended
    # meanwhile. Either way it is not called cancelled.
    before, at_deadline = said.split("still unfinished after 0 s:")
    for kernel, job in jobs.items():
        if statuses[job] == "cancelled":
            assert f"{job} ({kernel}[" in at_deadline.split("; cancelled, as the in-process workers stop with")[0]
        else:
            assert statuses[job] == "completed", statuses
            assert (f"job {job} completed" in before and job not in at_deadline) or \
                f"{job} ({kernel}[" in at_deadline.split(" ended meanwhile")[0].split("; ")[-1], said
    assert "left to the workers" not in said


@no_gpu_only
def test_slow_prints_each_jobs_end_as_it_comes_and_exits_1_naming_the_failed(two_kernels):
    """one_prompt's rewrite cannot be proven without a device: both jobs fail, each said as it ends."""
    batch, jobs = _batch(two_kernels, "--strategy", "one_prompt", "--run", "rewrites")
    assert batch.returncode == 1, _out(batch)
    said = " ".join(batch.stdout.split())
    for kernel, job_id in jobs.items():
        assert re.search(rf"{kernel}\[[^]]*\]: job {job_id} failed at device: .*no CUDA device", said), said
        assert said.index(f"job {job_id} failed at") < said.index("compare with:")  # before the table, as it ended
    assert "2 of 2 job(s) did not complete: " in said
    assert f"{jobs['reduce_sum']} (reduce_sum[blocks=1024,n=16777216]) failed" in said
    assert f"{jobs['vector_add']} (vector_add[n=67108864]) failed" in said


def test_bad_report_arguments_are_messages_not_tracebacks(runs):
    home, *_ = runs
    for args, expected in ((("compare", "nope", "after"), "neither a run file"),
                           (("profile", "--threshold", "3"), "bottleneck_share 3"),
                           (("slow", "--threshold", "0"), "give a speedup ratio above 0"),
                           (("compare", "before", "after", "--metric", "fastest"), "metric 'fastest'")):
        result = kforge(home, *args)
        assert result.returncode == 2 and expected in _out(result) and "Traceback" not in _out(result), args


def test_make_kernel_tunable_returns_kernel_params_and_tracker(tmp_path):
    script = (
        "import json\n"
        "from kforge import make_kernel_tunable\n"
        "kernel, params, tracker = make_kernel_tunable('examples/vector_add.cu', benchmark={'replay': True},\n"
        "                                              show_overview=False, out_dir=%r)\n"
        "print(json.dumps([kernel.kernel_name, kernel.tune_params, params, tracker.baseline_time,\n"
        "                  tracker.has_improvements(), tracker.get_total_improvement(), tracker.status]))\n"
        % str(tmp_path / "out"))
    env = {"KFORGE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    name, space, params, baseline, improved, improvement, status = json.loads(result.stdout.splitlines()[-1])
    # The replayed H100 sweep found nothing faster than the submitted block size.
    assert (name, params, improved, improvement, status) == ("vector_add", {"block_size_x": 256}, False, 0.0,
                                                             "completed")
    assert space["block_size_x"] and baseline == pytest.approx(0.2962, abs=1e-4)
    assert len(list((tmp_path / "out").iterdir())) == 1


def test_make_kernel_tunable_without_a_spec_infers_one_and_runs_the_job(tmp_path):
    script = (
        "from kforge import KforgeError, make_kernel_tunable\n"
        "source = open('examples/vector_add.cu').read()\n"
        "try:\n"
        "    make_kernel_tunable(source, sizes={'n': 4096}, benchmark={'replay': True})\n"
        "except KforgeError as exc:\n"
        "    print('KforgeError:', exc)\n")
    env = {"KFORGE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "no spec given: kforge inferred this one from the kernel's signature" in result.stdout
    assert "sizes: {n: 4096}" in result.stdout
    # No recording at 4096 elements: the job ran and failed, and says why (it would measure on a GPU).
    assert "KforgeError: job" in result.stdout and "failed at" in result.stdout, result.stdout


def test_make_kernel_tunable_names_the_field_of_a_bad_spec():
    from kforge import KforgeError, make_kernel_tunable

    with pytest.raises(KforgeError, match="sizes"):
        make_kernel_tunable(ROOT / "examples" / "vector_add.cu", sizes={"n": -1})
