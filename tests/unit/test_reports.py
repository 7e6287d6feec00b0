"""Every report is a pure fold over event streams: built here from whole jobs' streams with known numbers."""
import json
from datetime import timedelta

import pytest

from shared.domain.events import EVENTS, BaselineMeasured, JobCancelled, JobSubmitted, TaskProfiled, TuningCompleted
from shared.domain.reports.comparison import ChangeType, RunEntry, Run, compare_runs, run_of
from shared.domain.reports.files import file_stem, job_files, kernel_file_text, transcript_text
from shared.domain.reports.profile import pipeline_profile
from shared.domain.reports.results import kernel_result
from shared.domain.reports.suggestions import Priority, SuggestionType, suggest
from shared.domain.reports.tracker import performance_tracker
from tests.report_streams import H100, T0, JobStream, rewrite_job, spec_with, tune_job


# --- PerformanceTracker -------------------------------------------------------------------------------
def test_a_tune_job_cancelled_mid_search_keeps_the_best_configuration_it_measured(vector_add_spec):
    events = tune_job(vector_add_spec)
    cut = next(i for i, e in enumerate(events) if isinstance(e, TuningCompleted))
    cancelled = [*events[:cut], JobCancelled(stream_id=events[0].stream_id, reason="interrupted (SIGINT)",
                                             cancelled_by="cli")]

    tracker = performance_tracker(cancelled)
    [step] = tracker.steps
    assert step.new_execution_time == pytest.approx(0.8) and step.best_tune_params == {"block_size_x": 512}
    assert "stopped after 3 configurations measured (the job cancelled)" in step.step_description
    assert tracker.speedup == pytest.approx(1.25)
    assert "_optimised_1.250x.cu" in "".join(job_files(cancelled))  # its files hold the best so far too


def test_tracker_of_a_tune_job_has_the_search_as_its_step(vector_add_spec):
    tracker = performance_tracker(tune_job(vector_add_spec))

    assert tracker.baseline_time == pytest.approx(1.0)
    assert tracker.has_improvements()
    [step] = tracker.steps
    assert step.step_id == "tune" and step.old_execution_time == pytest.approx(1.0)
    assert step.new_execution_time == pytest.approx(0.8)
    assert step.improvement_percentage == pytest.approx(20.0)
    assert step.tunable_parameters == {"block_size_x": [128, 256, 512, 1024]}
    assert step.best_tune_params == {"block_size_x": 512}
    assert step.kernel_code == vector_add_spec.source
    assert tracker.get_total_improvement() == pytest.approx(20.0)
    assert tracker.speedup == pytest.approx(1.25)


def test_tracker_of_a_rewriting_job_keeps_accepted_steps_and_lists_the_rest(vector_add_spec):
    events = rewrite_job(vector_add_spec)
    tracker = performance_tracker(events)

    [step] = tracker.steps
    assert step.step_id == "elements_per_thread" and step.step_description == "several elements per thread"
    assert "elements_per_thread" in step.kernel_code
    assert (step.old_execution_time, step.new_execution_time) == (1.0, 0.5)
    assert step.improvement_percentage == pytest.approx(50.0)
    assert step.tunable_parameters == {"block_size_x": [128, 256], "elements_per_thread": [2, 4]}
    assert step.best_tune_params == {"block_size_x": 256, "elements_per_thread": 4}
    accepted = next(e for e in events if e.type == "StepAccepted")
    assert step.timestamp == accepted.occurred_at
    assert [(t.step_id, t.status) for t in tracker.tried] == [("elements_per_thread", "accepted"),
                                                              ("restrict", "discarded")]
    assert tracker.get_total_improvement() == pytest.approx(50.0)
    assert (tracker.llm_calls, tracker.tokens, tracker.cost_usd) == (2, 2000, pytest.approx(0.0156))

    overview = tracker.generate_overview()
    for expected in ("optimisation steps kept: 1 of 2 tried", "baseline 1.0000 ms -> final 0.5000 ms: 50.00% faster, "
                     "2.00x", "1. elements_per_thread: several elements per thread",
                     "1.0000 -> 0.5000 ms (+50.00%, 2.000x [1.960, 2.040])",
                     "tunable parameters: block_size_x [128, 256], elements_per_thread [2, 4]",
                     "best parameters: block_size_x=256, elements_per_thread=4",
                     "not kept: restrict (discarded): slower than the best so far (step elements_per_thread): 0.962x",
                     "2 calls, 2000 tokens, $0.0156"):
        assert expected in overview


def test_tracker_without_improvement_or_baseline(vector_add_spec):
    job = JobStream("j0", vector_add_spec)
    assert performance_tracker(job.events).generate_overview().endswith("no baseline was measured, so there is "
                                                                        "nothing to compare")
    job.baseline([2.0, 2.0, 2.0])
    tracker = performance_tracker(job.complete())
    assert not tracker.has_improvements() and tracker.get_total_improvement() == 0.0
    assert tracker.final_time == 2.0 and tracker.speedup == 1.0
    assert performance_tracker([]) is None


# --- results and runs ---------------------------------------------------------------------------------
def test_result_of_a_rewriting_job_is_the_accepted_candidate(vector_add_spec):
    result = kernel_result(rewrite_job(vector_add_spec))

    assert result.kernel == "vector_add[n=67108864]"
    assert result.best_step == "elements_per_thread" and result.best_candidate == "elements_per_thread"
    assert result.best.median_ms == 0.5 and result.best.params == {"block_size_x": 256, "elements_per_thread": 4}
    assert result.best.samples_ms == [0.5, 0.5, 0.51, 0.49, 0.5]
    assert "elements_per_thread" in result.best_source and result.speedup == 2.0
    # The baseline's rates come from the spec's bytes and the device's recorded peaks.
    bytes_moved = 3 * 4 * 67108864
    assert result.baseline.gbps == pytest.approx(bytes_moved / 1e-3 / 1e9)
    assert result.baseline.pct_of_peak == pytest.approx(100 * result.baseline.gbps / H100.dram_gbps)


def test_speedup_against_the_reference_time_when_the_spec_gives_one(vector_add_spec):
    spec = spec_with(vector_add_spec, strategy={"name": "baseline", "reference_ms": 0.5})
    job = JobStream("ref", spec)
    job.baseline([1.0, 1.0, 1.0])
    result = kernel_result(job.complete())
    assert result.speedup == 1.0 and result.speedup_vs_reference == 0.5


def run(name: str, **times: list[float]) -> Run:
    return Run(name=name, metric="best", kernels={k: RunEntry(kernel=k, job_id=name + k, time_ms=sorted(v)[len(v) // 2],
                                                               samples_ms=v) for k, v in times.items()})


def test_comparison_classifies_each_kernel_and_tests_significance():
    base = run("a", matmul=[10.0, 10.1, 9.9, 10.0, 10.05], add=[1.0, 1.01, 0.99, 1.0, 1.0], gone=[3.0] * 5,
               noisy=[1.0, 2.0, 0.5, 1.5, 1.0], flat=[2.0, 2.01, 1.99, 2.0, 2.0], few=[4.0, 4.0])
    current = run("b", matmul=[12.0, 12.1, 11.9, 12.0, 12.05], add=[0.5, 0.51, 0.49, 0.5, 0.5], new=[1.0] * 5,
                  noisy=[1.2, 0.6, 2.2, 1.1, 1.6], flat=[2.02, 2.03, 2.01, 2.02, 2.02], few=[5.0, 5.0])
    comparison = compare_runs(base, current, threshold_percent=5.0)
    by = {k.kernel: k for k in comparison.kernels}

    assert by["matmul"].change_type is ChangeType.REGRESSION and by["matmul"].change_percent == pytest.approx(20.0)
    assert by["matmul"].p_value < 0.05 and by["matmul"].is_significant
    assert by["add"].change_type is ChangeType.IMPROVEMENT and by["add"].change_ms == pytest.approx(-0.5)
    assert by["new"].change_type is ChangeType.NEW and by["gone"].change_type is ChangeType.REMOVED
    # 10% slower by the medians, but the samples overlap: the rank test says noise.
    assert by["noisy"].change_percent == pytest.approx(20.0) and by["noisy"].p_value > 0.05
    assert by["noisy"].change_type is ChangeType.NO_CHANGE and not by["noisy"].is_significant
    # Significant by the test, but 1% is under the threshold.
    assert by["flat"].p_value < 0.05 and by["flat"].change_type is ChangeType.NO_CHANGE
    # Two samples a side: the threshold alone decides, and says so.
    assert by["few"].p_value is None and by["few"].change_type is ChangeType.REGRESSION
    assert by["few"].test.startswith("threshold only")

    summary = comparison.get_summary()
    assert (summary.total, summary.regressions_count, summary.improvements_count, summary.unchanged_count,
            summary.new_count, summary.removed_count) == (7, 2, 1, 2, 1, 1)
    assert [r.kernel for r in comparison.get_regressions()] == ["few", "matmul"]
    assert [r.kernel for r in comparison.get_regressions(top_n=1)] == ["few"]
    assert [r.kernel for r in comparison.get_improvements(top_n=5)] == ["add"]
    assert json.loads(comparison.model_dump_json())["summary"]["regressions_count"] == 2


def test_runs_compare_like_with_like(vector_add_spec):
    results = [kernel_result(tune_job(vector_add_spec))]
    with pytest.raises(ValueError, match="compare like with like"):
        compare_runs(run_of("a", results, "best"), run_of("b", results, "baseline"))
    with pytest.raises(ValueError, match="metric 'fastest'"):
        run_of("a", results, "fastest")


def test_a_run_of_jobs_compares_their_best_times(vector_add_spec):
    before = run_of("nightly-1", [kernel_result(tune_job(vector_add_spec, "t1", run="nightly-1"))])
    after = run_of("nightly-2", [kernel_result(tune_job(vector_add_spec, "t2", run="nightly-2", scale=1.3))])

    [row] = compare_runs(before, after).kernels
    assert row.kernel == "vector_add[n=67108864]" and row.change_type is ChangeType.REGRESSION
    assert row.baseline_time_ms == pytest.approx(0.8) and row.current_time_ms == pytest.approx(1.04)
    assert Run.model_validate_json(before.model_dump_json()) == before


# --- suggestions ----------------------------------------------------------------------------------------
def test_suggestions_rest_on_what_was_measured(vector_add_spec):
    suggestions = suggest(tune_job(vector_add_spec))
    by = {s.type: s for s in suggestions}

    # 0.8 ms for 805 MB is 1,007 GB/s: 30% of the H100's 3,352 GB/s.
    memory = by[SuggestionType.MEMORY]
    assert memory.priority is Priority.HIGH and "at 30% of DRAM bandwidth" in memory.description
    assert "1,007 GB/s of 3,352 GB/s" in memory.evidence
    assert memory.estimated_time_ms < memory.current_time_ms == pytest.approx(0.8)
    assert memory.potential_speedup == pytest.approx(memory.current_time_ms / memory.estimated_time_ms)
    # 512 is the best block size, but 1024 was tried (and failed): not at the edge of the space.
    assert SuggestionType.LAUNCH_CONFIG not in by
    occupancy = by[SuggestionType.OCCUPANCY]
    assert "1 configurations could not launch" in occupancy.description and "[1024]" in occupancy.evidence
    assert "threads per block <= 512" in occupancy.implementation_hint  # 1024 never launched
    assert suggestions[0] is memory


def test_out_of_resources_at_a_block_size_that_also_ran_names_the_combinations(vector_add_spec):
    spec = spec_with(vector_add_spec, strategy={"name": "tune"}, tune_params={"block_size_x": [256, 512],
                                                                               "unroll": [1, 8]})
    job = JobStream("regs", spec)
    job.baseline([1.0] * 5)
    job.tune("submitted", {256: [0.9] * 5, 512: [0.8] * 5}, failed={512: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
             extra={"unroll": 1}, baseline_ms=1.0)
    [occupancy] = [s for s in suggest(job.complete()) if s.type is SuggestionType.OCCUPANCY]
    assert "the largest block that ran had 512 threads" in occupancy.evidence
    assert "restrictions excluding these combinations: unroll=1 block_size_x=512" in occupancy.implementation_hint


def test_a_best_value_at_the_edge_of_its_range_suggests_widening_it(vector_add_spec):
    spec = spec_with(vector_add_spec, strategy={"name": "tune"}, tune_params={"block_size_x": [64, 128, 256]},
                     sizes={"n": 1 << 26})
    job = JobStream("edge", spec)
    job.baseline([0.5] * 5)
    job.tune("submitted", {64: [0.6] * 5, 128: [0.5] * 5, 256: [0.4] * 5}, baseline_ms=0.5)
    [edge] = [s for s in suggest(job.complete()) if s.type is SuggestionType.LAUNCH_CONFIG]

    assert "the best block_size_x is 256, the largest value tried" in edge.description
    assert edge.estimated_time_ms == pytest.approx(0.4 * 0.4 / 0.5) and edge.priority is Priority.MEDIUM
    assert "extend tune_params.block_size_x above 256" in edge.implementation_hint


def test_a_grid_smaller_than_the_gpu_and_a_fixed_launch(vector_add_spec):
    spec = spec_with(vector_add_spec, sizes={"n": 8192}, tune_params={})  # 32 blocks of 256 threads, 132 SMs
    job = JobStream("small", spec)
    job.baseline([0.01] * 5)
    by = {s.type: s for s in suggest(job.complete())}

    parallel = by[SuggestionType.PARALLELISM]
    assert parallel.priority is Priority.CRITICAL and "32 blocks for 132 SMs" in parallel.description
    assert parallel.estimated_time_ms == pytest.approx(0.01 * 32 / 132)
    fixed = by[SuggestionType.LAUNCH_CONFIG]
    assert fixed.estimated_time_ms is None and fixed.expected_improvement.startswith("no estimate")


def test_no_suggestion_needs_device_facts_it_lacks(vector_add_spec):
    job = JobStream("nofacts", spec_with(vector_add_spec, tune_params={}))
    job.baseline([1.0] * 3, facts=None)
    kinds = {s.type for s in suggest(job.complete())}
    assert kinds == {SuggestionType.LAUNCH_CONFIG}  # only the fixed launch; no roofline, no SM count


# --- pipeline profile --------------------------------------------------------------------------------
def test_profile_of_one_job(vector_add_spec):
    events = rewrite_job(vector_add_spec)
    profile = pipeline_profile([events], bottleneck_share=0.35)
    stages = {s.stage: s for s in profile.stages}

    # baseline: 0.5 s queued, 2 s of work of which 0.8 s compiling; two tunings each 1 s queued, 3 s on the
    # GPU of 4 s; two generations 0.2 s after 0.1 s queued; two verifications 5 s after 0.2 s queued.
    assert stages["queue wait"].seconds == pytest.approx(0.5 + 2 * 1.0 + 2 * 0.1 + 2 * 0.2)
    assert stages["compile"].seconds == pytest.approx(0.8 + 2 * 1.0)
    assert stages["benchmark"].seconds == pytest.approx(1.2 + 2 * 3.0)
    assert stages["generation"].seconds == pytest.approx(0.4) and stages["planning"].seconds == 0
    assert stages["verification"].seconds == pytest.approx(10.0) and stages["verification"].tasks == 2
    assert profile.total_s == pytest.approx(sum(s.seconds for s in profile.stages))
    assert sum(s.percent for s in profile.stages) == pytest.approx(100.0)
    assert profile.bottlenecks == ["verification"]  # 10 of 23.5 s; benchmark is 31%
    # Compile cache: the baseline missed; tuning configs at odd values hit (none: 2 and 4 are even).
    assert (profile.compiles, profile.cache_hits) == (1 + 2 + 1, 0) and profile.cache_hit_rate == 0
    assert (profile.llm_calls, profile.tokens) == (2, 2000) and profile.cost_usd == pytest.approx(0.0156)
    assert profile.peak_worker_memory_mb == 2048.0 and profile.tasks_unprofiled == 0
    assert profile.wall_s == pytest.approx((events[-1].occurred_at - events[0].occurred_at).total_seconds())


def test_profile_across_jobs_adds_them_up_and_counts_unprofiled_requests(vector_add_spec):
    one, two = tune_job(vector_add_spec, "a"), tune_job(vector_add_spec, "b", start=T0 + timedelta(hours=1))
    single = pipeline_profile([one])
    both = pipeline_profile([one, two])
    assert both.jobs == ["a", "b"] and both.total_s == pytest.approx(2 * single.total_s)
    assert both.cache_hit_rate == single.cache_hit_rate == pytest.approx(0 / 5)
    without = pipeline_profile([[e for e in one if not isinstance(e, TaskProfiled)]])
    assert without.tasks_unprofiled == 2 and without.total_s == 0 and without.bottlenecks == []
    with pytest.raises(ValueError, match="bottleneck_share 2"):
        pipeline_profile([one], bottleneck_share=2)


# --- files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel_name, stem", [("vector_add", "vector_add"), ("scale<float>", "scale_float"),
                                              ("ns::k<float, 4>", "ns_k_float_4"), ("k<int *>", "k_int")])
def test_a_template_instance_names_its_kernel_file_without_brackets(kernel_name, stem):
    assert file_stem(kernel_name) == stem


def test_job_files(vector_add_spec):
    files = job_files(rewrite_job(vector_add_spec))

    assert list(files) == ["vector_add_optimised_2.000x.cu", "history.json", "transcript.log", "overview.txt",
                           "history.svg", "landscape.svg"]
    kernel = files["vector_add_optimised_2.000x.cu"]
    assert "#ifndef elements_per_thread\n#define elements_per_thread 4\n#endif" in kernel
    assert "1.0000 -> 0.5000 ms" in kernel and kernel.rstrip().endswith("}")
    history = json.loads(files["history.json"])
    assert history["speedup"] == 2.0 and history["tracker"]["steps"][0]["step_id"] == "elements_per_thread"
    assert history["suggestions"] and history["result"]["best_step"] == "elements_per_thread"
    assert "=== call 1: rewrite elements_per_thread" in files["transcript.log"]
    assert "--- prompt\napply elements_per_thread" in files["transcript.log"]
    assert "<svg" in files["history.svg"]


def test_job_files_need_a_submitted_job():
    with pytest.raises(ValueError, match="no submitted job"):
        job_files([])


def test_kernel_file_compiles_on_its_own_with_the_best_parameters(vector_add_spec):
    from shared.adapters.device.compiler import compile_kernel

    source = kernel_file_text(vector_add_spec.source, {"block_size_x": 512}, "// header\n")
    compiled = compile_kernel(source, vector_add_spec.kernel_name, {}, [], "sm_90")
    assert compiled.cubin
    assert transcript_text([]).startswith("no generator calls")


# --- versioned events ------------------------------------------------------------------------------------
def test_version_1_payloads_read_with_the_new_fields_empty(vector_add_spec):
    envelope = {"event_id": "7f3a9e1e-6b1e-4d8a-9f58-1d2b3c4d5e6f", "stream_id": "job-1", "occurred_at": T0}
    submitted = EVENTS.decode("JobSubmitted", 1, {"spec": vector_add_spec.model_dump(mode="json"),
                                                  "submitted_by": "cli"}, envelope)
    assert isinstance(submitted, JobSubmitted) and submitted.run is None and submitted.version == 3
    assert submitted.tenant == "local"  # recorded before tenants: the local tenant's
    measured = EVENTS.decode("BaselineMeasured", 1, {
        "request_id": "7f3a9e1e-6b1e-4d8a-9f58-1d2b3c4d5e60", "device": "H100", "params": {}, "grid": [1, 1, 1],
        "block": [1, 1, 1], "samples_ms": [1.0], "median_ms": 1.0}, envelope)
    assert isinstance(measured, BaselineMeasured) and measured.facts is None


def test_the_job_summary_agrees_with_the_tracker_when_a_rewrite_was_discarded(vector_add_spec):
    from shared.domain.projections import project_job

    events = rewrite_job(vector_add_spec)
    view, tracker = project_job(events), performance_tracker(events)

    # The discarded rewrite tuned below the baseline too; only the accepted one is the job's best.
    assert view.best_ms == tracker.final_time == 0.5
    assert view.speedup == pytest.approx(2.0)
