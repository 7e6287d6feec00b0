"""The process owning the GPU is replaced when a kernel hangs, crashes it or poisons its context, and the
next configuration runs on the replacement. Real spawned processes; a CPU stand-in plays the GPU."""
import pytest

from shared.device.nvrtc import CompiledKernel
from services.benchmark.gpu_host import GpuHost
from services.benchmark.measurement import Measured, Order, Setup
from shared.device.process import Failed, NoDevice
from tests.conftest import HAS_GPU
from tests.fakes import ScriptedSession

KERNEL = CompiledKernel(cubin=b"", lowered_name="k", arch="sm_90", log="", compile_ms=1.0, cache_key="0" * 64)


def order(block: int) -> Order:
    return Order(params={"block_size_x": block}, kernel=KERNEL, grid=(1, 1, 1), block=(block, 1, 1), best_ms=None)


@pytest.fixture
def host(sweep_spec):
    host = GpuHost(0, session_factory=ScriptedSession)
    assert host.prepare(Setup(spec=sweep_spec, seed=0, reference=KERNEL, reference_geometry=((1, 1, 1), (256, 1, 1)),
                              reference_params={"block_size_x": 256})) is None
    yield host
    host.close()


def test_a_hang_is_killed_after_the_timeout_and_the_next_config_runs(host):
    hung = host.measure(order(ScriptedSession.HANG))  # the spec's benchmark.timeout_s is 3
    assert isinstance(hung, Failed) and hung.stage == "timeout" and "benchmark.timeout_s" in hung.reason
    assert isinstance(host.measure(order(256)), Measured)
    assert host.replacements == 1


def test_a_crashed_process_is_reported_and_replaced(host):
    crashed = host.measure(order(ScriptedSession.CRASH))
    assert isinstance(crashed, Failed) and crashed.stage == "crashed" and "exit code 3" in crashed.reason
    assert isinstance(host.measure(order(512)), Measured)
    assert host.replacements == 1


def test_a_poisoned_context_costs_its_process_and_the_space_is_prepared_again(host):
    poisoned = host.measure(order(ScriptedSession.POISON))
    assert isinstance(poisoned, Failed) and poisoned.poisoned and "ILLEGAL_ADDRESS" in poisoned.reason
    after = [host.measure(order(b)) for b in (128, 256)]
    assert all(isinstance(m, Measured) for m in after)
    assert host.replacements == 1


def test_plain_failures_keep_the_process(host):
    assert host.measure(order(ScriptedSession.NO_LAUNCH)).stage == "launch"
    assert host.measure(order(ScriptedSession.WRONG)).stage == "output"
    assert host.replacements == 0


@pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the real session starts")
def test_without_a_gpu_the_real_session_says_why():
    with pytest.raises(NoDevice, match="no CUDA device"):
        GpuHost(0)
