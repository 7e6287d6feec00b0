"""Local stand-ins for ports whose real adapters need other processes."""
from shared.domain.contracts import Message


class RecordingBus:
    """The bus port kept in memory: what a handler sends is what a test inspects."""

    def __init__(self):
        self.messages: list[Message] = []

    def dispatch(self, message: Message) -> None:
        self.messages.append(message)


class ScriptedBenchmarkSession:
    """A CPU stand-in for the benchmark's BenchmarkSession, for vector_add-like specs tuned on block_size_x.

    Times follow a smooth curve with its minimum at 256 threads. Some block sizes are cues for what real
    kernels do to a GPU process: 96 hangs, 160 kills the process, 224 poisons the context (a sticky fault),
    288 computes a wrong output, 320 fails to launch, 32 reports an impossibly short time. Its reference repeats
    itself exactly, so every output is checked with the tolerance shared/domain/tolerance.py gives such a reference.
    It runs inside BenchmarkProcess's spawned child, so it must stay importable by name.
    """

    HANG, CRASH, POISON, WRONG, NO_LAUNCH, TOO_FAST = 96, 160, 224, 288, 320, 32

    def __init__(self, device_index: int):
        from shared.adapters.device.probe import DeviceInfo, Peaks

        self.info = DeviceInfo(index=device_index, name="Scripted GPU", arch="sm_90", max_threads=1024,
                               peaks=Peaks(dram_bytes_per_s=3.35e12, fp32_flops_per_s=67e12, l2_bytes=50 * 2**20))
        self.prepared = 0
        self.tolerances = ()

    def prepare(self, setup):
        from shared.domain.tolerance import REFERENCE_RUNS, Observed, derive, set_in_spec

        self.prepared += 1
        repeated = Observed(spread=0.0, spread_rel=0.0, runs=REFERENCE_RUNS, terms=0, largest=0.0)
        self.tolerances = tuple(derive(a.name, a.dtype, set_in_spec(setup.spec, verifying=False), repeated)
                                for a in setup.spec.output_args)
        return None

    def measure(self, order):
        import os
        import time

        from services.benchmark.measurement import Measured
        from shared.adapters.device.process import Failed

        block = order.params.get("block_size_x", 256)
        if block == self.HANG:
            time.sleep(3600)
        if block == self.CRASH:
            os._exit(3)
        if block == self.POISON:
            return Failed("launch", "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
                          poisoned=True)
        if block == self.WRONG:
            return Failed("output", "17 of 4096 elements of c differ from the reference")
        if block == self.NO_LAUNCH:
            return Failed("launch", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested for launch")
        if block == self.TOO_FAST:
            return Measured(samples_ms=[1e-6] * 3, check_ms=1e-6, max_abs_error=0.0, tolerances=self.tolerances)
        ms = scripted_time_ms(block, order.params.get("elements_per_thread", 1))
        abandoned = order.best_ms is not None and ms > 1.25 * order.best_ms
        return Measured(samples_ms=[ms] if abandoned else [ms, ms * 1.001, ms * 0.999], check_ms=ms,
                        max_abs_error=0.0, abandoned=abandoned, tolerances=self.tolerances)


    def compare(self, duel):
        """The two scripted times, each pair sharing a drift, the candidate's with a little noise of its own."""
        from services.benchmark.measurement import Paired

        incumbent, candidate = (scripted_time_ms(o.params.get("block_size_x", 256), o.params.get("elements_per_thread", 1))
                                for o in (duel.incumbent, duel.candidate))
        drift = [1 + 0.01 * (i % 3) for i in range(duel.pairs)]
        return Paired(incumbent_ms=[incumbent * d for d in drift],
                      candidate_ms=[candidate * d * (1 + 0.004 * (-1) ** i) for i, d in enumerate(drift)])


def scripted_time_ms(block: int, elements_per_thread: int = 1) -> float:
    """Fastest at 256 threads; more work per thread helps a little (generated candidates tune it)."""
    import math

    return (1.0 + abs(block - 256) / 256) / (1 + 0.1 * math.log2(elements_per_thread))


class ScriptedVerifierSession:
    """A CPU stand-in for the verifier's GPU session: every candidate passes, except one whose source
    says REJECT_ME, which writes out of bounds. Spawned like the real one, so importable by name."""

    def __init__(self, device_index: int):
        from shared.adapters.device.probe import DeviceInfo

        self.info = DeviceInfo(index=device_index, name="Scripted GPU", arch="sm_90", max_threads=1024, peaks=None)

    def reference(self, request):
        return 0.1

    def candidate(self, request):
        from services.verifier.judge import Verdict

        if "REJECT_ME" in request.spec.source:
            return Verdict("out_of_bounds", "changed 4 guard bytes after the end of c")
        return Verdict(None, "", max_abs_error=0.0, max_rel_error=0.0)


class LocalProcess:
    """A MeasuringProcess (what a search needs of BenchmarkProcess) served in this process by a session, with no
    child spawned, for tests of the search logic alone."""

    def __init__(self, session):
        self.session, self.device, self.replacements, self.orders = session, session.info, 0, []

    def prepare(self, setup):
        return self.session.prepare(setup)

    def measure(self, order):
        self.orders.append(order)
        return self.session.measure(order)
