"""A trial at sizes where the submitted kernel's launch cannot be worked out is skipped, saying why, and the
sanitizer's small launch avoids such sizes; a candidate whose launch fails where the submitted one's works is
rejected. Before, the ValueError escaped the verifier and the job ended as a TaskFailed."""
from services.verifier.sanitizer import small_sizes
from services.verifier.trials import size_problem
from shared.domain.spec import CandidateSpec


def with_smem(spec, size: str, n: int):
    return spec.model_validate({**spec.model_dump(), "sizes": {"n": n}, "smem_args": {"size": size}})


def test_a_launch_that_cannot_be_worked_out_at_a_size_is_named(vector_add_spec):
    spec = with_smem(vector_add_spec, "n * 4 / 3", 3072)  # whole bytes at n = 3072 only among these sizes
    params = spec.baseline_params()

    assert size_problem(spec, params) == ""
    problem = size_problem(spec.with_sizes({"n": 3071}), params)
    assert problem.startswith("its launch cannot be worked out there: 'n * 4 / 3' gives")
    assert "whole number of bytes" in problem


def test_the_sanitizer_launch_keeps_to_sizes_where_the_launch_works(vector_add_spec):
    spec = with_smem(vector_add_spec, "n * 4 / 3", 3072)

    assert small_sizes(spec, 4096) == {"n": 3072}  # 3071 would give a fraction of a byte
    assert small_sizes(with_smem(vector_add_spec, "n * 4", 3072), 4096) == {"n": 3071}


def test_a_grid_that_divides_by_zero_at_some_sizes_is_named_there(vector_add_spec):
    candidate = CandidateSpec(source=vector_add_spec.source, grid_div_x=["block_size_x * (n % 2)"])
    spec = vector_add_spec.for_candidate(candidate)

    assert size_problem(spec.with_sizes({"n": 4095}), spec.baseline_params()) == ""
    assert size_problem(spec.with_sizes({"n": 4096}), spec.baseline_params()).startswith(
        "its launch cannot be worked out there")
