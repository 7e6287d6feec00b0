"""The progress of a job's searches, folded from its events, and how `kforge tune` prints it."""
import io
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from rich.console import Console
from rich.spinner import Spinner

from kforge.cli import _Follower
from kforge.progress import configurations_to_search, fold
from kforge.render import progress_display, progress_lines
from kforge.specfile import load_spec
from shared.domain.events import (BaselineMeasured, CandidateGenerated, ConfigFailed, ConfigMeasured, JobSubmitted,
                                  TaskProfiled, TuningCompleted, TuningRequested)
from shared.domain.spec import CandidateSpec
from tests.conftest import EXAMPLES

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STREAM = "job-1"
LONG_PARAMS = {"block_size_x": 1024, "block_size_y": 1, "tile_size_x": 8, "tile_size_y": 8, "unroll": 4,
               "vector_width": 4}


@pytest.fixture(scope="module")
def matmul():
    return load_spec(EXAMPLES / "matmul.cu", EXAMPLES / "matmul.yaml")


def respec(spec, **fields):
    return spec.model_validate({**spec.model_dump(), **fields})


def requested(candidate: str = "submitted", at: datetime = T0, shard: int = 0, shards: int = 1) -> TuningRequested:
    return TuningRequested(stream_id=STREAM, queue="benchmark.0", candidate_id=candidate, shard=shard, shards=shards,
                           occurred_at=at)


def measured(request: TuningRequested, ms: float, abandoned: bool = False, replay: bool = False,
             params: dict | None = None, at: datetime = T0) -> ConfigMeasured:
    return ConfigMeasured(stream_id=STREAM, request_id=request.event_id, params=params or {"block_size_x": int(ms)},
                          grid=(1, 1, 1), block=(1, 1, 1), samples_ms=[ms], median_ms=ms, min_ms=ms, mean_ms=ms,
                          stddev_ms=0.0, ci95_ms=None, abandoned=abandoned, replay=replay, occurred_at=at)


def failed(request: TuningRequested, stage: str) -> ConfigFailed:
    return ConfigFailed(stream_id=STREAM, request_id=request.event_id, params={"block_size_x": 1}, stage=stage,
                        reason="no", occurred_at=T0)


def completed(candidate: str = "submitted") -> TuningCompleted:
    return TuningCompleted(stream_id=STREAM, candidate_id=candidate, best_params=None, best_time_ms=None,
                           configs_evaluated=0, configs_failed=0, speedup=None)


# --- the space's size ---------------------------------------------------------------------------------------
def test_the_total_is_the_space_after_its_restrictions(matmul, vector_add_spec):
    assert configurations_to_search(matmul) == 214  # 288 combinations, 74 ruled out by the restrictions
    assert configurations_to_search(vector_add_spec) == len(vector_add_spec.tune_params["block_size_x"])


def test_the_total_leaves_out_blocks_over_1024_threads(vector_add_spec):
    spec = respec(vector_add_spec, tune_params={"block_size_x": [256, 512, 1024], "block_size_y": [1, 2]})
    assert configurations_to_search(spec) == 5  # 1024x2 exceeds a block's 1024 threads


def test_a_configuration_where_a_restriction_cannot_be_evaluated_is_not_counted(vector_add_spec):
    spec = respec(vector_add_spec, tune_params={"block_size_x": [32, 64, 128]},
                  restrictions=["1024 // (block_size_x - 64) != 0"])  # divides by zero at 64
    assert configurations_to_search(spec) == 2


def test_a_budget_caps_the_total_except_for_brute_force(matmul):
    benchmark = matmul.benchmark.model_dump()
    capped = respec(matmul, benchmark={**benchmark, "search": {"strategy": "random_sample", "max_fevals": 20}})
    whole = respec(matmul, benchmark={**benchmark, "search": {"strategy": "brute_force", "max_fevals": 20}})
    assert (configurations_to_search(capped), configurations_to_search(whole)) == (20, 214)


# --- the fold -----------------------------------------------------------------------------------------------
def test_the_fold_counts_done_keeps_the_fastest_timed_and_groups_rejections_by_stage(matmul):
    request = requested()
    events = [JobSubmitted(stream_id=STREAM, spec=matmul), request, measured(request, 9.0), measured(request, 4.0),
              measured(request, 1.0, abandoned=True), failed(request, "compile"), failed(request, "launch"),
              failed(request, "compile"), measured(requested(), 0.5)]  # an outcome of a request never seen: not counted
    space = fold(events).current
    assert (space.candidate_id, space.total, space.done) == ("submitted", 214, 6)
    assert space.best.median_ms == 4.0  # an abandoned configuration was timed once only: never the best
    assert space.rejected == {"compile": 2, "launch": 1}


def test_the_eta_is_what_is_left_at_the_rate_so_far(matmul):
    request = requested(at=T0)
    progress = fold([JobSubmitted(stream_id=STREAM, spec=matmul), request,
                     *(measured(request, 5.0, at=T0 + timedelta(seconds=s / 2)) for s in range(1, 11))])
    space = progress.current
    assert space.eta_s() == pytest.approx(5 / 10 * 204)  # 10 configurations in 5 s; 204 left
    assert fold([JobSubmitted(stream_id=STREAM, spec=matmul), request]).current.eta_s() is None  # no rate yet
    assert fold([JobSubmitted(stream_id=STREAM, spec=matmul), request, measured(request, 5.0)]).current.eta_s() is None
    progress.add(completed())  # a strategy may stop before the whole space: finished all the same
    assert space.finished and space.eta_s() == 0.0


def test_shards_share_their_space_and_each_candidate_has_its_own(matmul):
    shards = [requested(shard=i, shards=2) for i in range(2)]
    generated = CandidateGenerated(stream_id=STREAM, request_id=uuid4(), step_id="block_size", candidate_id="c1",
                                   candidate=CandidateSpec(source=matmul.source, tune_params={"tile_size_x": [1, 2]}),
                                   provider="rules")
    candidate = requested("c1")
    progress = fold([JobSubmitted(stream_id=STREAM, spec=matmul), *shards, measured(shards[0], 3.0),
                     measured(shards[1], 2.0), completed(), generated, candidate, measured(candidate, 7.0)])
    assert list(progress.spaces) == ["submitted", "c1"]
    submitted = progress.spaces["submitted"]
    assert (submitted.done, submitted.best.median_ms, submitted.finished) == (2, 2.0, True)
    assert (progress.current.candidate_id, progress.current.total, progress.current.done) == ("c1", 2, 1)


# --- printed ------------------------------------------------------------------------------------------------
def busy_space(matmul, replay=False):
    """48 configurations of 214 in 48 s, the first 40 measured, then 8 rejected at 7 stages."""
    request = requested()
    events = [JobSubmitted(stream_id=STREAM, spec=matmul), request,
              *(measured(request, 2.0 + i, replay=replay, params=LONG_PARAMS, at=T0 + timedelta(seconds=48))
                for i in range(40)),
              *(failed(request, stage) for stage in ("compile", "launch", "output", "roofline", "timeout", "crashed",
                                                      "geometry", "compile"))]
    return fold(events).current


def test_progress_lines_fit_80_columns_with_the_counts_first(matmul):
    lines = progress_lines(busy_space(matmul, replay=True))
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].startswith("[REPLAY] tuning 48/214, ETA 2:46, 8 rejected (compile 2, launch 1")
    assert lines[1].startswith("best 2.0000 ms: block_size_x=1024 block_size_y=1") and lines[1].endswith("…")
    assert progress_lines(busy_space(matmul), width=40)[0] == "tuning 48/214, ETA 2:46, 8 rejected (co…"


def test_the_live_display_keeps_within_the_terminal(matmul):
    out = io.StringIO()
    Console(file=out, width=60).print(progress_display(busy_space(matmul), Spinner("dots")))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(len(line) <= 60 for line in lines), lines
    assert "48/214  ETA 2:46" in lines[0] and lines[1].startswith("best 2.0000 ms") and "8 rejected" in lines[2]
    out = io.StringIO()
    Console(file=out, width=60).print(progress_display(None, Spinner("dots")))  # before any search
    assert out.getvalue().split()[1:] == ["working…"]  # after the spinner's frame


def follow(matmul, verbose: bool) -> list[str]:
    """What `kforge tune` prints, piped (not a terminal) with COLUMNS=200, for a tune of matmul with long lines
    and 48 outcomes."""
    out = io.StringIO()
    request = requested()
    events = [JobSubmitted(stream_id=STREAM, spec=matmul), request,
              BaselineMeasured(stream_id=STREAM, request_id=uuid4(), device="NVIDIA H100 80GB HBM3 (recorded "
                               "2026-11-22), a long name", params={}, grid=(1, 1, 1), block=(1, 1, 1),
                               samples_ms=[3.0], median_ms=3.0, replay=True),
              *(measured(request, 2.0 + i, params=LONG_PARAMS) for i in range(40)),
              *(failed(request, "compile") for _ in range(8)),
              TaskProfiled(stream_id=STREAM, request_id=request.event_id, task="benchmark.tune_shard", worker="w",
                           started_at=T0, wall_s=1.0, peak_rss_mb=1.0),
              completed()]
    follower = _Follower(Console(file=out, width=200), verbose)
    with follower:
        for version, event in enumerate(events, 1):
            follower.show(event.model_copy(update={"stream_version": version}))
    return out.getvalue().splitlines()


def test_piped_the_progress_is_a_line_per_event_of_note_within_80_columns(matmul):
    lines = follow(matmul, verbose=False)
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    kinds = [line.split()[1] for line in lines if line.split()[0].isdigit()]
    assert kinds == ["JobSubmitted", "TuningRequested", "BaselineMeasured", "TuningCompleted"]
    assert "[REPLAY] 3.0000 ms median of 1 on NVIDIA H100" in lines[2]  # the mark survives the cut
    assert lines[-2].startswith("  tuning 48/214, done, 8 rejected (compile 8)")
    assert lines[-1].startswith("  best 2.0000 ms: block_size_x=1024")


def test_verbose_prints_every_configuration_too(matmul):
    lines = follow(matmul, verbose=True)
    assert sum("ConfigMeasured" in line for line in lines) == 40
    assert sum("ConfigFailed" in line for line in lines) == 8 and any("TaskProfiled" in line for line in lines)


def test_piped_the_progress_of_a_search_under_way_is_printed_every_so_often(matmul, monkeypatch):
    from kforge import cli

    monkeypatch.setattr(cli, "PROGRESS_EVERY_S", 0.0)  # after every event
    lines = follow(matmul, verbose=False)
    counts = [line.split(",")[0].strip() for line in lines if line.startswith("  tuning ")]
    assert counts[:3] == ["tuning 1/214", "tuning 2/214", "tuning 3/214"]
    assert counts[-1] == "tuning 48/214" and lines[-2].startswith("  tuning 48/214, done")  # the search's end
