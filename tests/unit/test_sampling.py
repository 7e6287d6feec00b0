"""When timing stops, and what the samples say."""
import math

from services.benchmark.sampling import Next, SamplingPolicy, next_step, summarize

POLICY = SamplingPolicy(min_samples=3, max_samples=7, ci_target=0.02, abandon_factor=1.25)


def test_stable_samples_stop_at_the_minimum():
    assert next_step([1.0, 1.0], None, POLICY) is Next.SAMPLE
    assert next_step([1.0, 1.001, 0.999], None, POLICY) is Next.DONE


def test_noisy_samples_run_to_the_maximum():
    noisy = [1.0, 1.5, 0.7, 1.3, 0.8, 1.2]
    assert next_step(noisy, None, POLICY) is Next.SAMPLE
    assert next_step([*noisy, 1.1], None, POLICY) is Next.DONE


def test_two_clearly_slower_samples_abandon_and_one_slow_launch_does_not():
    assert next_step([1.3], best_ms=1.0, policy=POLICY) is Next.SAMPLE  # one slow launch may be noise
    assert next_step([1.3, 1.31], best_ms=1.0, policy=POLICY) is Next.ABANDON
    assert next_step([2.4, 1.0], best_ms=1.0, policy=POLICY) is Next.SAMPLE  # it was: the second is as fast
    assert next_step([1.2, 1.2], best_ms=1.0, policy=POLICY) is Next.SAMPLE  # within the factor: keep timing


def test_summary_statistics():
    stats = summarize([1.0, 2.0, 3.0, 4.0])
    assert (stats.median_ms, stats.min_ms, stats.mean_ms) == (2.5, 1.0, 2.5)
    assert math.isclose(stats.stddev_ms, 1.2909944, rel_tol=1e-6)
    assert math.isclose(stats.ci95_ms, 3.182 * 1.2909944 / 2, rel_tol=1e-4)  # t(3 dof) = 3.182
    assert summarize([2.0]).ci95_ms == math.inf
