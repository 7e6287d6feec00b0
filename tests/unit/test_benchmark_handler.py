"""measure_baseline against a real SQLite event store on this GPU-less machine (NVRTC compiles for real)."""
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.benchmark.handlers import measure_baseline
from services.benchmark.resources import BenchmarkResources
from services.planner.policy import react
from shared.adapters.eventstore import EventStore
from shared.domain.contracts import PlannerCatchUp
from shared.domain.events import BaselineFailed, BaselineRequested, JobSubmitted, KernelCompiled
from shared.domain.projections import job_stream, project_job
from shared.domain.spec import KernelSpec
from tests.conftest import HAS_GPU
from services.benchmark.compile_cache import CompileCache
from tests.fakes import RecordingBus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the baseline is measured, not refused")


@pytest.fixture
def bus():
    return RecordingBus()


def _spec(**changes) -> KernelSpec:
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml")
    return KernelSpec.model_validate({**spec.model_dump(), **changes})


def _job_with_request(store: EventStore, spec: KernelSpec, job_id: str = "abc123def456"):
    """A job stream as the planner leaves it: JobSubmitted, then the BaselineRequested it reacts with."""
    stream = job_stream(job_id)
    (submitted,) = store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)
    reaction = react(submitted, project_job([submitted], job_id), gpus=["0"])
    assert [type(e) for e in reaction.events] == [BaselineRequested]
    (request,) = store.append(stream, reaction.events, expected_version=1)
    return job_id, request


@no_gpu_only
def test_no_device_compiles_then_fails_at_device_stage(store, bus):
    job_id, request = _job_with_request(store, _spec())

    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))

    history = store.read_stream(job_stream(job_id))
    assert [e.type for e in history] == ["JobSubmitted", "BaselineRequested", "KernelCompiled", "BaselineFailed"]
    compiled, failed = history[2], history[3]
    assert isinstance(compiled, KernelCompiled) and isinstance(failed, BaselineFailed)
    assert compiled.request_id == request.event_id == failed.request_id
    assert compiled.arch == "sm_90"  # no device to ask: the default arch
    assert compiled.compile_ms > 0 and len(compiled.cache_key) == 64
    assert failed.stage == "device"
    assert failed.reason.startswith("no CUDA device")
    assert [e.stream_version for e in history] == [1, 2, 3, 4]
    assert history[2].position < history[3].position

    assert any(m.task == PlannerCatchUp.task for m in bus.messages)
    view = project_job(history, job_id)
    assert view.failed_stage == "device" and view.failure == failed.reason


@no_gpu_only
def test_default_arch_is_used_without_a_device_and_spec_arch_wins(store, bus):
    job_a, request_a = _job_with_request(store, _spec(), job_id="aaaaaaaaaaaa")
    measure_baseline(store, bus, job_a, request_a.event_id, BenchmarkResources(0, "sm_80"))
    job_b, request_b = _job_with_request(store, _spec(benchmark={"arch": "sm_86"}), job_id="bbbbbbbbbbbb")
    measure_baseline(store, bus, job_b, request_b.event_id, BenchmarkResources(0, "sm_80"))

    (compiled_a,) = [e for e in store.read_stream(job_stream(job_a)) if isinstance(e, KernelCompiled)]
    (compiled_b,) = [e for e in store.read_stream(job_stream(job_b)) if isinstance(e, KernelCompiled)]
    assert compiled_a.arch == "sm_80"
    assert compiled_b.arch == "sm_86"
    assert compiled_a.cache_key != compiled_b.cache_key


def test_redelivery_appends_nothing_new(store, bus):
    job_id, request = _job_with_request(store, _spec())
    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))
    first = store.read_stream(job_stream(job_id))
    all_first = store.read_all()

    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))

    again = store.read_stream(job_stream(job_id))
    assert [(e.event_id, e.type, e.position) for e in again] == [(e.event_id, e.type, e.position) for e in first]
    assert len(store.read_all()) == len(all_first)
    assert sum(isinstance(e, BaselineFailed | KernelCompiled) for e in again) >= 1
    # the planner is nudged on every delivery, so a lost first nudge is made good by the redelivery
    assert [m.task for m in bus.messages] == [PlannerCatchUp.task, PlannerCatchUp.task]


BROKEN = (
    'extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {\n'
    "    int i = blockIdx.x * block_size_x + threadIdx.x;\n"
    "    if (i < n) c[i] = a[i] + b[i]\n"  # line 3: missing semicolon
    "}\n"
)


def test_compile_error_fails_at_compile_stage_with_nvrtc_log(store, bus):
    job_id, request = _job_with_request(store, _spec(source=BROKEN))

    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))

    history = store.read_stream(job_stream(job_id))
    # a compile error is reported even without a device, and nothing claims the kernel compiled
    assert [e.type for e in history] == ["JobSubmitted", "BaselineRequested", "BaselineFailed"]
    failed = history[-1]
    assert failed.stage == "compile"
    assert failed.request_id == request.event_id
    assert "NVRTC could not compile vector_add" in failed.reason
    assert 'vector_add.cu(4): error: expected a ";"' in failed.log
    assert any(m.task == PlannerCatchUp.task for m in bus.messages)

    # redelivered: still one answer
    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))
    assert len(store.read_stream(job_stream(job_id))) == 3


def test_planner_turns_the_answer_into_job_failed(store, bus):
    """The failure the handler records is what the planner reacts to, carrying stage and reason."""
    job_id, request = _job_with_request(store, _spec(source=BROKEN))
    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))
    history = store.read_stream(job_stream(job_id))

    reaction = react(history[-1], project_job(history, job_id), gpus=["0"])

    (job_failed,) = reaction.events
    assert job_failed.type == "JobFailed"
    assert job_failed.stage == "compile" and job_failed.reason == history[-1].reason


def test_a_second_job_with_the_same_kernel_is_served_from_the_compile_cache(store, bus, tmp_path):
    cache = CompileCache(tmp_path / "cubins")
    compiled = []
    for job in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        job_id, request = _job_with_request(store, _spec(), job_id=job)
        measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90", cache))
        compiled += [e for e in store.read_stream(job_stream(job_id)) if isinstance(e, KernelCompiled)]
    assert [c.cache_hit for c in compiled] == [False, True]
    assert compiled[0].cache_key == compiled[1].cache_key
    assert (cache.misses, cache.hits) == (1, 1)


@no_gpu_only
def test_an_unrelated_event_landing_meanwhile_costs_no_second_measurement(store, bus, monkeypatch):
    """A TaskProfiled, a cancel or any other event may land while the GPU measures: the answer goes after it,
    instead of the task failing and measuring again."""
    from services.benchmark import handlers
    from shared.domain.events import StepSkipped

    job_id, request = _job_with_request(store, _spec())
    measured = []

    def measure_while_the_stream_moves(stream, *args):
        measured.append(stream)
        store.append(stream, [StepSkipped(stream_id=stream, step_id="elsewhere", reason="unrelated")], None)
        return original(stream, *args)

    original = handlers._measure_baseline
    monkeypatch.setattr(handlers, "_measure_baseline", measure_while_the_stream_moves)
    measure_baseline(store, bus, job_id, request.event_id, BenchmarkResources(0, "sm_90"))

    history = store.read_stream(job_stream(job_id))
    assert len(measured) == 1
    assert [e.type for e in history] == ["JobSubmitted", "BaselineRequested", "StepSkipped", "KernelCompiled",
                                         "BaselineFailed"]
