"""kforge from Python: rewrite vector_add with the offline rules (explicit strategy), then read the reports.

    python examples/python_api.py [OUT_DIR]

Needs a CUDA GPU (or add benchmark={"replay": True} to replay recorded measurements, for strategy tune).
kforge compiles in spawned processes, so a script calling it keeps its work under `if __name__ == "__main__"`."""
import sys
from pathlib import Path

import kforge

EXAMPLES = Path(__file__).resolve().parent


def main(out_dir: str | None) -> None:
    kernel, best_params, tracker = kforge.make_kernel_tunable(
        EXAMPLES / "vector_add.cu", strategy="explicit", generator={"provider": "rules"}, sizes={"n": 1 << 24},
        run="python-api", out_dir=out_dir)

    print(f"\nbest parameters: {best_params}; total improvement {tracker.get_total_improvement():.1f}%")
    for step in tracker.steps:
        print(f"  {step.step_id}: {step.old_execution_time:.4f} -> {step.new_execution_time:.4f} ms "
              f"({step.improvement_percentage:+.1f}%)")
    print("\nsuggestions:")
    for suggestion in kforge.suggestions(tracker.job_id):
        print(f"  [{suggestion.priority}] {suggestion.type}: {suggestion.description} "
              f"({suggestion.expected_improvement})")
    profile = kforge.profile(tracker.job_id)
    print("\nwhere the time went:")
    for stage in profile.stages:
        print(f"  {stage.stage:<13}{stage.seconds:8.2f} s {stage.percent:5.1f}%")
    print(f"  bottlenecks: {', '.join(profile.bottlenecks)}; compile cache hit rate "
          f"{profile.cache_hit_rate or 0:.0%}; peak worker memory {profile.peak_worker_memory_mb:,.0f} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
