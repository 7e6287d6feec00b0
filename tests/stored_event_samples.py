"""Samples of every event type as the event store keeps them, for tests/unit/test_stored_events.py.

tests/unit/stored_events/ holds what kforges wrote, frozen: one JSON file per kforge that wrote samples (named by
its commit's date and hash), each a list of records as the store's columns hold them: type, version, payload and
the envelope (event_id, stream_id, stream_version, position, occurred_at). The test decodes every record with
today's kforge. A sample is never rewritten: a change that stops one decoding would strand stored jobs.

The files of kforges up to 2ad3764 were made once from `samples()`: in a checkout of each commit from ec6e781 on
that changed shared/domain/events.py or shared/domain/spec.py, each sample was validated by that commit's event class (the fields
it did not have yet left out) and its `payload()` stored, keeping only the shapes no earlier commit had written.

When an event type is added, its schema_version raised or a field added to what an event carries (a spec's
fields change JobSubmitted's shape without changing its version), add the samples this kforge writes:

    .venv/bin/python -m tests.stored_event_samples

writes tests/unit/stored_events/<date>-<commit>.json (<commit>+ with uncommitted changes in shared/) with a
record of each event whose shape (`shape`: type, version and the payload's fields) no file there holds yet, and
leaves the files there as they are. Its payloads are `samples()` below: add a new type's event there first.
"""
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import NAMESPACE_URL, uuid5

from shared.domain.events import (EVENTS, BaselineFailed, BaselineMeasured, BaselineRequested, CandidateGenerated,
                                  CandidateRejected, CandidateVerified, ComparisonRequested, ConfigFailed,
                                  ConfigMeasured, DeviceFacts, Event, GenerationFailed, GenerationRequested,
                                  GeneratorCalled, JobCancelled, JobCompleted, JobFailed, JobSubmitted, KernelCompiled,
                                  KernelsCompared, PlanProposed, SanitizerCheck, SanitizerChecked, ShardTuned,
                                  StepAccepted, StepBrokenDown, StepDiscarded, StepSkipped, StepValidated, TaskFailed,
                                  TaskProfiled, Tolerance, TrialPassed, TuningCompleted, TuningRequested,
                                  VerificationIncomplete, VerificationRequested, WebhookAbandoned, WebhookAttempted,
                                  WebhookDelivered, WebhookRequested)
from shared.domain.spec import CandidateSpec, KernelSpec, TuningStep

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "unit" / "stored_events"
STREAM = "job-5a3f0c2d9e1b"
STARTED = datetime(2026, 11, 24, 9, 30, tzinfo=UTC)


def _id(name: str):
    return uuid5(NAMESPACE_URL, f"kforge-sample:{name}")


def spec() -> KernelSpec:
    """The vector_add example, tuned, with a webhook and rewriting steps: most of a spec's parts set."""
    source = (ROOT / "examples" / "vector_add.cu").read_text()
    return KernelSpec.model_validate({
        "kernel_name": "vector_add", "source": source, "sizes": {"n": 1 << 20}, "problem_size": ["n"],
        "args": [{"name": "c", "dtype": "float32", "shape": ["n"], "role": "out"},
                 {"name": "a", "dtype": "float32", "shape": ["n"], "range": [-2.0, 2.0]},
                 {"name": "b", "dtype": "float32", "shape": ["n"], "specials": ["nan", "zero"]},
                 {"name": "n", "dtype": "int32", "value": "n"}],
        "params": {"block_size_x": 256}, "tune_params": {"block_size_x": [64, 128, 256, 512]},
        "restrictions": ["block_size_x >= 64"], "benchmark": {"iterations": 20, "seed": 1},
        "strategy": {"name": "explicit", "steps": [
            {"id": "block_size", "prompt_template": "Tune the block size of {kernel_string}",
             "tune_params": {"block_size_x": [64, 128, 256, 512]}, "skip_evaluation": True},
            step().model_dump()]},
        "webhook_url": "https://hooks.example.com/kforge"})


def step() -> TuningStep:
    return TuningStep(id="elements_per_thread", description="each thread computes several elements",
                      prompt_template="Rewrite {kernel_string} so each thread computes ept elements.",
                      tune_params={"ept": [1, 2, 4]}, depends_on=["block_size"])


def candidate() -> CandidateSpec:
    source = (ROOT / "examples" / "vector_add.cu").read_text()
    return CandidateSpec(source=source, params={"block_size_x": 128}, tune_params={"block_size_x": [128, 256]},
                         restrictions=["block_size_x >= 128"], grid_div_x=["block_size_x"])


def tolerance() -> Tolerance:
    return Tolerance(output="c", atol=1e-4, rtol=1e-4, reason="float32's default: the reference repeats itself")


def samples() -> list[Event]:
    """One event of every type, as a tuned and rewritten vector_add job records them."""
    job_spec = spec()
    baseline, tuning, generation, verification, comparison, webhook = (
        _id(name) for name in ("baseline", "tuning", "generation", "verification", "comparison", "webhook"))
    at = dict(stream_id=STREAM)
    trial = TrialPassed(label="spec sizes #1", sizes={"n": 1 << 20}, seed=11, max_abs_error=0.0, max_rel_error=0.0,
                        tolerances=[tolerance()])
    measured = dict(params={"block_size_x": 256}, grid=(4096, 1, 1), block=(256, 1, 1))
    return [
        JobSubmitted(**at, spec=job_spec, submitted_by="api", run="nightly", tenant="3f2a9c"),
        BaselineRequested(**at, queue="benchmark.0", params={"block_size_x": 256}),
        KernelCompiled(**at, request_id=baseline, arch="sm_90", compile_ms=41.5, cache_key="0" * 64, cache_hit=False,
                       log="ptxas info: 10 registers"),
        BaselineMeasured(**at, request_id=baseline, device="NVIDIA H100 80GB HBM3", **measured,
                         samples_ms=[0.0121, 0.0119, 0.0120], median_ms=0.0120, replay=False,
                         facts=DeviceFacts(sm_count=132, dram_gbps=3350.0, fp32_tflops=67.0, l2_mb=50.0),
                         tolerances=[tolerance()]),
        BaselineFailed(**at, request_id=baseline, stage="compile", reason="NVRTC could not compile vector_add",
                       log="vector_add.cu(4): error: expected a \";\""),
        TuningRequested(**at, queue="benchmark.0", candidate_id="submitted", shard=0, shards=2),
        ConfigMeasured(**at, request_id=tuning, **measured, samples_ms=[0.0118, 0.0117], median_ms=0.01175,
                       min_ms=0.0117, mean_ms=0.01175, stddev_ms=0.00007, ci95_ms=0.0006, abandoned=False,
                       max_abs_error=0.0, gbps=1071.0, tflops=0.089, pct_of_peak=32.0, compile_ms=40.2,
                       cache_hit=True, replay=False),
        ConfigFailed(**at, request_id=tuning, params={"block_size_x": 2048}, stage="launch",
                     reason="CUDA_ERROR_INVALID_VALUE", log="", replay=False),
        ShardTuned(**at, request_id=tuning, device="NVIDIA H100 80GB HBM3", strategy="brute_force", configs=4,
                   measured=3, failed=1, best_params={"block_size_x": 256}, best_ms=0.01175, wall_s=2.5,
                   compile_s=1.1, gpu_busy_s=0.9, first_result_s=0.4, cache_hits=2, host_replacements=0,
                   replay=False, error=None),
        TuningCompleted(**at, candidate_id="submitted", best_params={"block_size_x": 256}, best_time_ms=0.01175,
                        configs_evaluated=7, configs_failed=1, speedup=1.02),
        GenerationRequested(**at, queue="generator", kind="rewrite", step=step(), candidate_id="c1",
                            focus="SLOW"),
        GeneratorCalled(**at, request_id=generation, kind="rewrite", step_id="elements_per_thread",
                        provider="anthropic", model="claude-sonnet-4-6", system="You rewrite CUDA kernels.",
                        prompt="Rewrite the kernel.", response="```cuda\n...\n```", input_tokens=1200,
                        output_tokens=800, latency_ms=5400.0, cost_usd=0.0156, attempts=["429: retried after 2 s"],
                        error=None),
        PlanProposed(**at, request_id=generation, kind="plan", steps=[step()]),
        StepValidated(**at, request_id=generation, step_id="elements_per_thread", valid=True,
                      reason="a tunable change of the code"),
        StepBrokenDown(**at, request_id=generation, step_id="elements_per_thread", substeps=[step()]),
        CandidateGenerated(**at, request_id=generation, step_id="elements_per_thread", candidate_id="c1",
                           candidate=candidate(), provider="rules", renames={"BLOCK_SIZE_X": "block_size_x"}),
        GenerationFailed(**at, request_id=generation, kind="rewrite", step_id="elements_per_thread",
                         reason="the anthropic answer is unusable: no ```cuda block"),
        StepSkipped(**at, step_id="unroll", reason="depends on vectorize, which was not accepted"),
        StepAccepted(**at, step_id="elements_per_thread", candidate_id="c1", old_time_ms=0.012, new_time_ms=0.010,
                     best_params={"block_size_x": 128, "ept": 2}, speedup=1.2, speedup_ci=(1.15, 1.25)),
        StepDiscarded(**at, step_id="vectorize", candidate_id="c2", stage="compare",
                      reason="within noise: 1.009x [0.998, 1.021] does not clear 1.02", new_time_ms=0.0119),
        VerificationRequested(**at, queue="verifier.0", candidate_id="c1", candidate=candidate()),
        CandidateVerified(**at, request_id=verification, candidate_id="c1", device="NVIDIA H100 80GB HBM3",
                          trials=[trial], skipped=["n=1048573: the submitted kernel itself failed (launch: x)"],
                          max_abs_error=0.0, max_rel_error=0.0),
        CandidateRejected(**at, request_id=verification, candidate_id="c1", check="mismatch",
                          reason="17 of 1048576 elements of c differ", trial="spec sizes #1 (sizes {'n': 1048576}, "
                          "seed 11)", log="", tolerances=[tolerance()]),
        SanitizerChecked(**at, request_id=verification, candidate_id="c1", tool_path="/usr/local/cuda/bin/"
                         "compute-sanitizer", sizes={"n": 4095},
                         checks=[SanitizerCheck(tool="memcheck", verdict="passed", first_error="", seconds=1.5)],
                         note=""),
        VerificationIncomplete(**at, request_id=verification, candidate_id="c1", passed=["compile", "signature"],
                               reason="no CUDA device: on a GPU machine the candidate is run on every trial"),
        ComparisonRequested(**at, queue="benchmark.0", candidate_id="c1", incumbent=candidate(),
                            candidate=candidate(), incumbent_ms=0.012, candidate_ms=0.010),
        KernelsCompared(**at, request_id=comparison, candidate_id="c1", device="NVIDIA H100 80GB HBM3",
                        incumbent_samples_ms=[0.012, 0.0121], candidate_samples_ms=[0.010, 0.0101],
                        incumbent_ms=0.01205, candidate_ms=0.01005, speedup=1.2, speedup_ci=(1.18, 1.22), note="",
                        replay=False, error=None),
        TaskProfiled(**at, request_id=tuning, task="benchmark.tune", worker="gpu-host:4242",
                     started_at=STARTED + timedelta(seconds=3), wall_s=2.6, peak_rss_mb=812.5),
        TaskFailed(**at, request_id=verification, task="verifier.verify_candidate", error_type="RuntimeError",
                   error="the GPU process died", attempts=3),
        JobCompleted(**at, summary="best 0.010 ms, 1.20x the baseline"),
        JobFailed(**at, stage="baseline: compile", reason="NVRTC could not compile vector_add"),
        JobCancelled(**at, reason="stopped by its submitter", cancelled_by="http"),
        WebhookRequested(**at, queue="webhooks", url="https://hooks.example.com/kforge", kind="job.completed"),
        WebhookAttempted(**at, request_id=webhook, attempt=1, url="https://hooks.example.com/kforge",
                         status_code=503, error="HTTP 503: busy", duration_ms=120.0, retry_in_s=5.0),
        WebhookDelivered(**at, request_id=webhook, attempts=2, status_code=204),
        WebhookAbandoned(**at, request_id=webhook, attempts=5, reason="5 attempts failed, the last: HTTP 503: busy"),
    ]


def record(writer: str, event: Event, position: int) -> dict:
    """The event as the store's row holds it (shared/adapters/eventstore.py's columns)."""
    return {"type": event.type, "version": event.version, "payload": event.payload(),
            "envelope": {"event_id": str(_id(f"{writer}/{event.type}/{position}")), "stream_id": f"job-{writer}",
                         "stream_version": position, "position": position,
                         "occurred_at": (STARTED + timedelta(seconds=position)).isoformat()}}


def shape(record: dict) -> tuple[str, int, frozenset[str]]:
    """What tells two stored samples apart: type, version and the payload's key paths (a field added to a spec
    changes the shape of the events that carry one without changing their version)."""

    def paths(value, prefix: str = "") -> set[str]:
        if isinstance(value, dict):
            return {p for k, v in value.items() for p in {f"{prefix}/{k}", *paths(v, f"{prefix}/{k}")}}
        if isinstance(value, list):
            return {p for v in value for p in paths(v, f"{prefix}[]")}
        return set()

    return record["type"], record["version"], frozenset(paths(record["payload"]))


def stored_files() -> dict[str, dict]:
    """Every samples file by its name: {"written_by": ..., "events": [records]}."""
    return {path.name: json.loads(path.read_text()) for path in sorted(SAMPLES.glob("*.json"))}


def main() -> None:
    have = {shape(r) for f in stored_files().values() for r in f["events"]}
    events = samples()
    missing_types = set(EVENTS.types) - {e.type for e in events}
    if missing_types:
        sys.exit(f"samples() has no event of {sorted(missing_types)}: add one")
    if all(shape(record("", e, 0)) in have for e in events):
        print("every event's shape has its sample already")
        return
    commit, date = subprocess.run(["git", "log", "-1", "--format=%h %as"], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout.split()
    dirty = subprocess.run(["git", "status", "--porcelain", "shared"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    writer = f"{commit}+" if dirty else commit  # + : with the uncommitted changes of shared/ it is run with
    new = [r for r in (record(writer, e, i) for i, e in enumerate(events, start=1)) if shape(r) not in have]
    path = SAMPLES / f"{date}-{writer}.json"
    if path.exists():
        sys.exit(f"{path} exists: samples are never rewritten")
    SAMPLES.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"written_by": f"kforge {writer} ({date})", "events": new}, indent=1) + "\n")
    print(f"wrote {len(new)} sample(s) to {path}")


if __name__ == "__main__":
    main()
