"""The memory-bound table's reference copy (bench/memory_bound_table.py): a byte count's copy time is its own or
its next whole MiB's scaled down to it, whichever is faster, so an odd size's slow copy flatters no kernel."""
import importlib.util

from tests.conftest import EXAMPLES

_spec = importlib.util.spec_from_file_location("memory_bound_table", EXAMPLES.parent / "bench" / "memory_bound_table.py")
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


def test_a_count_rounds_up_to_its_next_whole_mib_and_a_whole_one_stays():
    assert table.whole_mib(33_488_960) == 32 * 2**20
    assert table.whole_mib(32 * 2**20) == 32 * 2**20
    assert table.whole_mib(1) == 2**20


def test_the_faster_of_the_own_and_the_scaled_whole_mib_copy_stands_for_the_count():
    odd, whole = 33_488_960, 32 * 2**20
    # conv2d's bytes on the H100: 0.0184 ms as they are, 0.0157 ms at 32 MiB, which scaled is the faster.
    assert table.fastest_copy(odd, {odd: 0.0184, whole: 0.0157}) == 0.0157 * odd / whole
    assert table.fastest_copy(odd, {odd: 0.0150, whole: 0.0157}) == 0.0150
    assert table.fastest_copy(whole, {whole: 0.0157}) == 0.0157
