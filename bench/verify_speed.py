"""On a GPU machine: how long verifying one vector_add candidate at 64M floats takes, every trial included
(the spec's size with two seeds, n-1 and a prime below it), through the verifier's own entry point.

    python bench/verify_speed.py [--n 67108864]

The GPU process is started first (a worker keeps it warm; it compiles kforge's own kernels as it starts).
The first candidate of a job makes the trials: inputs generated on the device, the reference run; the job's
next candidate finds them in the cache. Every figure includes compiling the two kernels and checking their
signatures (the first one also starts this process's compile sandbox).
"""
import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TODAY_S = 50.0  # the same verification before issue 18 (host inputs, downloads and comparisons), H100
TARGET_S = 2.0


def main() -> int:
    from kforge.specfile import load_spec
    from services.verifier import handlers
    from services.verifier.session import VerifierSession
    from services.verifier.trials import plan_trials
    from shared.adapters.device.process import GpuProcess
    from shared.domain.events import CandidateVerified, VerificationRequested

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 26)
    n = parser.parse_args().n
    base = load_spec(ROOT / "examples" / "vector_add.cu", ROOT / "examples" / "vector_add.yaml")

    started = time.perf_counter()
    process = GpuProcess(0, VerifierSession)
    print(f"GPU process started in {time.perf_counter() - started:.2f} s ({process.device.name})")
    times = []
    try:
        # Two candidates of one job (the example at other block sizes), then a candidate of another job
        # (another seed: its trials are made anew).
        for seed, block in ((1, 512), (1, 128), (2, 1024)):
            candidate = {"source": base.source, "params": {"block_size_x": block}}
            spec = base.model_validate({**base.model_dump(), "sizes": {"n": n}, "benchmark": {"seed": seed},
                                        "strategy": {"name": "verify", "candidate": candidate}})
            request = VerificationRequested(stream_id="job-bench", queue="verifier.0", candidate_id=f"block {block}",
                                            candidate=spec.strategy.candidate)
            started = time.perf_counter()
            answer = handlers._verify("job-bench", spec, request, lambda: process, "sm_90")
            times.append(time.perf_counter() - started)
            if not isinstance(answer, CandidateVerified):
                print(f"not verified: {answer}")
                return 1
    finally:
        process.close()
    trials = len(plan_trials(spec))
    print(f"verify one vector_add candidate at {n:,} floats, {trials} trials: {times[0]:.2f} s "
          f"(today about {TODAY_S:.0f} s; target {TARGET_S:g} s); the job's next candidate {times[1]:.2f} s; "
          f"another job's first candidate {times[2]:.2f} s")
    return 0 if times[0] <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
