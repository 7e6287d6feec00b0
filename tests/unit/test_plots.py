"""The plots and the search folds behind them, on whole jobs' event streams with known numbers: which panels,
heatmap and lines each plot draws, read back from the SVG (its text stays text, its groups carry ids)."""
import re

import pytest

from shared.domain.reports.plots import history_svg, landscape_svg
from shared.domain.reports.search_space import Outcome, SearchedSpace, best_so_far, searched_spaces
from shared.domain.spec import CandidateSpec, TuningStep
from tests.report_streams import EPT_SOURCE, GRID_SPACE, JobStream, grid_tune_job, rewrite_job, spec_with, tune_job


def _panels(svg: str) -> list[str]:
    return re.findall(r'<g id="panel-(\w+)">', svg)


def _texts(svg: str) -> dict[str, float]:
    """Each text drawn, with its baseline's y."""
    return {text: float(y) for y, text in re.findall(r'<text [^>]*\by="([\d.]+)"[^>]*>([^<]*)</text>', svg)}


# --- the folds ---------------------------------------------------------------------------------------------
def test_best_so_far_is_the_running_minimum_and_a_failure_keeps_it():
    assert best_so_far([]) == []
    assert best_so_far([None, 1.2, None, 1.0, 1.1, 0.8, 0.9]) == [None, 1.2, 1.2, 1.0, 1.0, 0.8, 0.8]


def test_a_searched_space_holds_every_outcome_in_order_with_tune_params_axes(vector_add_spec):
    [space] = searched_spaces(grid_tune_job(vector_add_spec))

    assert space.candidate_id == "submitted" and space.axes == GRID_SPACE
    assert len(space.outcomes) == 24 and len(space.measured) == 22
    assert space.best_ms == pytest.approx(0.686)
    assert sum(o.abandoned for o in space.outcomes) == 1
    running = best_so_far([o.time_ms for o in space.outcomes])
    assert running[:5] == pytest.approx([1.568, 1.0976, 0.98, 0.88, 0.7546])
    assert running.index(space.best_ms) == 12 and running[-1] == space.best_ms  # found by the 13th, then kept
    assert all(later <= earlier for earlier, later in zip(running, running[1:]))


def test_the_heatmap_pairs_the_parameters_that_explain_the_most_and_counts_failed_pairs(vector_add_spec):
    [space] = searched_spaces(grid_tune_job(vector_add_spec))

    shares = {name: space.explained_share(name) for name in GRID_SPACE}
    assert shares["block_size_x"] > shares["elements_per_thread"] > 0.3 > 0.01 > shares["unroll"]
    assert space.heatmap_pair() == ("block_size_x", "elements_per_thread")
    assert space.failed_only(["block_size_x", "elements_per_thread"]) == {(512, 4)}
    best = space.best_by(["block_size_x", "elements_per_thread"])
    assert len(best) == 11 and best[(256, 2)] == pytest.approx(0.686) and best[(64, 1)] == pytest.approx(1.568)


def test_the_heatmap_pair_is_in_tune_params_order_falls_back_to_the_first_two_and_needs_two_varying():
    def space(axes, *outcomes):
        return SearchedSpace("submitted", axes, [Outcome(params, time) for params, time in outcomes])

    # c decides the time, a changes it a little, b not at all
    last_decides = space({"a": [1, 2], "b": [1, 2], "c": [1, 2]},
                         ({"a": 1, "b": 1, "c": 1}, 1.0), ({"a": 2, "b": 2, "c": 1}, 1.2),
                         ({"a": 1, "b": 2, "c": 2}, 3.0), ({"a": 2, "b": 1, "c": 2}, 3.2))
    assert last_decides.explained_share("c") > last_decides.explained_share("a") > 0
    assert last_decides.explained_share("b") == 0
    assert last_decides.heatmap_pair() == ("a", "c")
    all_equal = space({"a": [1, 2], "b": [1, 2], "c": [1, 2]}, ({"a": 1, "b": 1, "c": 1}, 1.0),
                      ({"a": 2, "b": 2, "c": 2}, 1.0))
    assert all_equal.heatmap_pair() == ("a", "b")
    assert space({"a": [1, 2], "fixed": [7]}, ({"a": 1, "fixed": 7}, 1.0)).heatmap_pair() is None


def test_each_candidate_has_its_own_space_and_a_value_outside_tune_params_joins_its_axis(vector_add_spec):
    spaces = searched_spaces(rewrite_job(vector_add_spec))

    assert [s.candidate_id for s in spaces] == ["elements_per_thread", "restrict"]
    assert spaces[0].axes == {"block_size_x": [128, 256], "elements_per_thread": [2, 4]}
    assert searched_spaces([]) == []
    job = JobStream("odd", spec_with(vector_add_spec, strategy={"name": "tune"}, tune_params={"block_size_x": [64]}))
    job.tune("submitted", {64: [1.0], 96: [0.9]})
    assert searched_spaces(job.events)[0].axes == {"block_size_x": [64, 96]}


# --- the plots ---------------------------------------------------------------------------------------------
def test_landscape_has_a_panel_per_tune_parameter_and_a_heatmap_of_two(vector_add_spec):
    svg = landscape_svg(grid_tune_job(vector_add_spec))

    assert _panels(svg) == ["block_size_x", "elements_per_thread", "unroll"]
    assert svg.count('<g id="heatmap">') == 1
    texts = _texts(svg)
    for label in ("block_size_x", "elements_per_thread", "unroll", "best per value", "abandoned early",
                  "median time (ms)", "best median time (ms)", "failed"):
        assert label in texts
    assert "22 configurations measured, 2 failed" in svg
    assert "hatched: every configuration failed (1); blank: not evaluated (0)" in svg
    assert "which explain 60% and 38% of its variance" in svg


def test_landscape_of_one_parameter_has_its_panel_and_no_heatmap(vector_add_spec):
    svg = landscape_svg(tune_job(vector_add_spec))

    assert _panels(svg) == ["block_size_x"] and 'id="heatmap"' not in svg
    assert "3 configurations measured, 1 failed" in svg


def test_landscape_of_a_rewriting_job_draws_the_fastest_candidates_space(vector_add_spec):
    svg = landscape_svg(rewrite_job(vector_add_spec))

    assert "candidate elements_per_thread: time against each tune parameter" in svg
    assert "the fastest of 2 candidates tuned" in svg
    assert _panels(svg) == ["block_size_x", "elements_per_thread"] and 'id="heatmap"' in svg


def test_history_of_a_search_shows_it_converging_against_the_baseline(vector_add_spec):
    svg = history_svg(grid_tune_job(vector_add_spec))

    assert 'id="convergence"' in svg and 'id="steps"' not in svg
    texts = _texts(svg)
    assert "best so far: 0.6860 ms from configuration 13, 1.46x the baseline" in texts
    assert {"baseline 1.0000 ms", "failed (2)", "a configuration", "abandoned early",
            "configurations evaluated, in order"} <= set(texts)


def test_history_of_a_rewriting_job_has_a_readable_bar_per_step(vector_add_spec):
    spec = spec_with(vector_add_spec, strategy={"name": "explicit"}, tune_params={"block_size_x": [128, 256]})
    job = JobStream("steps", spec)
    job.baseline([1.0, 1.0, 1.0])
    names = [f"a_step_with_a_long_descriptive_name_{i}" for i in range(8)]
    for i, name in enumerate(names):
        candidate = CandidateSpec(source=EPT_SOURCE, tune_params={"block_size_x": [256], "elements_per_thread": [4]},
                                  params={"elements_per_thread": 4})
        job.rewrite(TuningStep(id=name, description=name), candidate)
        job.tune(name, {4: [0.9 + i / 100] * 3}, spec=spec.for_candidate(candidate), param="elements_per_thread",
                 extra={"block_size_x": 256})
        job.discard(name, "no faster", new_ms=0.9 + i / 100)

    svg = history_svg(job.events)

    assert 'id="steps"' in svg and 'id="convergence"' not in svg
    texts = _texts(svg)
    rows = sorted(texts[name] for name in ["baseline", *names])  # every step named in full, one row each
    assert all(lower - upper >= 9 for upper, lower in zip(rows, rows[1:])), rows  # 9pt text: no two overlap
    assert "0.9700 ms (1.03x)" in texts


def test_history_of_the_rewriting_fixture_marks_kept_and_discarded_steps(vector_add_spec):
    texts = _texts(history_svg(rewrite_job(vector_add_spec)))

    assert {"elements_per_thread", "restrict", "0.5000 ms (2.00x)", "0.5200 ms (1.92x)", "1.0000 ms"} <= set(texts)


def test_plots_of_a_job_with_nothing_measured_say_so(vector_add_spec):
    events = JobStream("new", spec_with(vector_add_spec, strategy={"name": "tune"})).events

    assert "no configuration evaluated yet" in landscape_svg(events)
    assert "vector_add: no configuration searched yet" in history_svg(events)
    with pytest.raises(ValueError, match="no submitted job"):
        history_svg([])


def test_the_same_events_draw_the_same_file(vector_add_spec):
    events = grid_tune_job(vector_add_spec)

    assert landscape_svg(events) == landscape_svg(events) and history_svg(events) == history_svg(events)
