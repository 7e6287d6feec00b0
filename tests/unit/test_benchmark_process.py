"""The BenchmarkProcess owning the GPU is replaced when a kernel hangs, crashes it or poisons its context, and
the next configuration runs on the replacement. Real spawned processes; a CPU stand-in plays the GPU."""
import pytest

from services.benchmark.measurement import Measured, Order, Setup
from services.benchmark.process import BenchmarkProcess
from shared.adapters.device.nvrtc import CompiledKernel
from shared.adapters.device.process import Failed, NoDevice, WarmProcess
from tests.conftest import HAS_GPU
from tests.fakes import ScriptedBenchmarkSession

KERNEL = CompiledKernel(cubin=b"", lowered_name="k", arch="sm_90", log="", compile_ms=1.0, cache_key="0" * 64)


def order(block: int) -> Order:
    return Order(params={"block_size_x": block}, kernel=KERNEL, grid=(1, 1, 1), block=(block, 1, 1), best_ms=None)


@pytest.fixture
def process(sweep_spec):
    process = BenchmarkProcess(0, session_factory=ScriptedBenchmarkSession)
    assert process.prepare(Setup(spec=sweep_spec, seed=0, reference=KERNEL,
                                 reference_geometry=((1, 1, 1), (256, 1, 1)),
                                 reference_params={"block_size_x": 256})) is None
    yield process
    process.close()


def test_a_hang_is_killed_after_the_timeout_and_the_next_config_runs(process):
    hung = process.measure(order(ScriptedBenchmarkSession.HANG))  # the spec's benchmark.timeout_s is 3
    assert isinstance(hung, Failed) and hung.stage == "timeout" and "benchmark.timeout_s" in hung.reason
    assert isinstance(process.measure(order(256)), Measured)
    assert process.replacements == 1


def test_a_crashed_process_is_reported_and_replaced(process):
    crashed = process.measure(order(ScriptedBenchmarkSession.CRASH))
    assert isinstance(crashed, Failed) and crashed.stage == "crashed" and "exit code 3" in crashed.reason
    assert isinstance(process.measure(order(512)), Measured)
    assert process.replacements == 1


def test_a_poisoned_context_costs_its_process_and_the_space_is_prepared_again(process):
    poisoned = process.measure(order(ScriptedBenchmarkSession.POISON))
    assert isinstance(poisoned, Failed) and poisoned.poisoned and "ILLEGAL_ADDRESS" in poisoned.reason
    after = [process.measure(order(b)) for b in (128, 256)]
    assert all(isinstance(m, Measured) for m in after)
    assert process.replacements == 1


def test_plain_failures_keep_the_process(process):
    assert process.measure(order(ScriptedBenchmarkSession.NO_LAUNCH)).stage == "launch"
    assert process.measure(order(ScriptedBenchmarkSession.WRONG)).stage == "output"
    assert process.replacements == 0


@pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the real session starts")
def test_without_a_gpu_the_real_session_says_why():
    with pytest.raises(NoDevice, match="no CUDA device"):
        BenchmarkProcess(0)


def test_a_warm_process_remembers_that_there_is_no_device():
    """Both GPU services keep their process in a WarmProcess: a worker without a GPU probes once, not per task."""
    probes = []

    def start():
        probes.append(1)
        raise NoDevice("no CUDA device: none on this machine")

    warm = WarmProcess(start)
    for _ in range(3):
        with pytest.raises(NoDevice, match="none on this machine"):
            warm.get()
    warm.close()  # nothing started: nothing to close, and the memory stays
    with pytest.raises(NoDevice):
        warm.get()
    assert len(probes) == 1
