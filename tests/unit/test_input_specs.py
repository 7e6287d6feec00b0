"""What a spec may say about its inputs' values (range, sorted, data, answer): each mistake is refused with the
field and the fix, a range is checked where it is evaluated (at admission, at each trial's sizes), and the
verifier plans its trials around fixed data."""
import pytest
from pydantic import ValidationError

from services.verifier.sanitizer import small_sizes
from services.verifier.trials import plan_trials, range_problem, sizes_not_tried
from shared.adapters.array_files import named_file_errors
from shared.application.limits import Limits, limit_errors
from shared.domain.errors import FieldError, field_errors
from shared.domain.spec import KernelSpec

SOURCE = 'extern "C" __global__ void gather(float *out, const float *x, const int *idx, int n) {}'
FILE = {"path": "/data/x.npy", "sha256": "0" * 64}


def gather(**changes) -> dict:
    """A gather spec (out[i] = x[idx[i]]) as a dict; `changes` replace arguments by position."""
    args = [{"name": "out", "dtype": "float32", "shape": ["n"], "role": "out"},
            {"name": "x", "dtype": "float32", "shape": ["n"]},
            {"name": "idx", "dtype": "int32", "shape": ["n"], "range": [0, "n"]},
            {"name": "n", "dtype": "int32", "value": "n"}]
    for position, arg in changes.items():
        args[int(position[1:])] = {**args[int(position[1:])], **arg}
    return {"kernel_name": "gather", "source": SOURCE, "sizes": {"n": 4096}, "args": args}


def errors_of(data: dict) -> list[FieldError]:
    with pytest.raises(ValidationError) as info:
        KernelSpec.model_validate(data)
    return field_errors(info.value.errors())


def only(errors: list[FieldError]) -> FieldError:
    assert len(errors) == 1, errors
    return errors[0]


def test_a_gather_spec_with_an_index_range_is_valid():
    spec = KernelSpec.model_validate(gather())
    assert spec.args[2].range == [0, "n"] and spec.value_range(spec.args[2]) == (0, 4096)
    assert limit_errors(spec, Limits()) == []


@pytest.mark.parametrize("changes, field, says", [
    ({"a0": {"range": [0, 1]}}, "args[0].range", "role inout"),
    ({"a0": {"sorted": True}}, "args[0].sorted", "answer"),
    ({"a0": {"data": FILE}}, "args[0].data", "role out"),
    ({"a3": {"range": [0, 1]}}, "args[3].range", "scalar"),
    ({"a1": {"answer": FILE}}, "args[1].answer", "is an input"),
    ({"a1": {"data": FILE, "range": [0, 1]}}, "args[1].data", "drop them"),
    ({"a1": {"sorted": True, "specials": ["nan"]}}, "args[1].sorted", "specials"),
    ({"a2": {"range": [0, "m"]}}, "args[2].range", "define it under sizes"),
    ({"a1": {"data": "x.npy"}}, "args[1].data", "sha256"),
    ({"a1": {"data": {"path": "x.npy", "sha256": "0" * 64}}}, "args[1].data.path", "absolute"),
    ({"a1": {"data": {"path": "/x.npy", "sha256": "not a hash"}}}, "args[1].data.sha256", "pattern"),
])
def test_each_mistake_names_the_field_and_the_fix(changes, field, says):
    error = only(errors_of(gather(**changes)))
    assert error.field == field and says in error.message


def test_a_range_takes_exactly_low_and_high():
    assert only(errors_of(gather(a2={"range": [0, 1, 2]}))).field == "args[2].range"


def test_an_answer_needs_data_on_every_input():
    error = only(errors_of(gather(a0={"answer": FILE}, a1={"data": FILE})))
    assert error.field == "args[0].answer" and "give data for every input array; idx has none" in error.message
    spec = KernelSpec.model_validate(gather(a0={"answer": FILE}, a1={"data": FILE}, a2={"range": None, "data": FILE}))
    assert spec.args[0].answer.path == "/data/x.npy"


@pytest.mark.parametrize("dtype, bounds, says", [
    ("int32", ["n", "n"], "is empty"),
    ("int32", [0, "n / 3"], "not an integer"),
    ("int8", [0, 300], "beyond the int8 values [-128, 128)"),
    ("uint8", [-1, 10], "beyond the uint8 values"),
    ("uint64", [0, 2 ** 64], "2**64 - 1"),
    ("float16", [0, 70000], "beyond the largest float16"),
    ("float16", [1e-9, 2e-9], "holds no float16 value"),  # [0, 1e-9) holds 0; this holds nothing
])
def test_admission_refuses_a_range_that_holds_nothing_the_dtype_can(dtype, bounds, says):
    spec = KernelSpec.model_validate(gather(a2={"dtype": dtype, "range": bounds}))
    error = only(limit_errors(spec, Limits()))
    assert error.field == "args[2].range" and says in error.message


def test_a_range_is_evaluated_at_each_trials_sizes():
    spec = KernelSpec.model_validate(gather(a2={"range": [0, "n - 4095"]}))
    assert range_problem(spec) == ""  # [0, 1) at the spec's sizes
    assert range_problem(spec.with_sizes({"n": 4095})) == ("args[2].range: [0, 0) is empty at sizes {'n': 4095}: "
                                                           "make high greater than low")
    # the sanitised launch shrinks the sizes only as far as every range still holds values
    assert small_sizes(spec, 16) == {"n": 4096}
    assert small_sizes(KernelSpec.model_validate(gather(a2={"range": [0, "n - 4000"]})), 16) == {"n": 4095}


def test_fixed_data_is_verified_at_the_specs_sizes_once_and_says_why():
    drawn = KernelSpec.model_validate(gather())
    assert len(plan_trials(drawn)) > drawn.verify.seeds and sizes_not_tried(drawn) == ""
    partly = KernelSpec.model_validate(gather(a1={"data": FILE}))
    assert [t.sizes for t in plan_trials(partly)] == [{"n": 4096}] * partly.verify.seeds
    assert sizes_not_tried(partly) == ("odd sizes not tried: x has fixed data, which holds values at the spec's "
                                       "sizes only")
    fixed = KernelSpec.model_validate(gather(a1={"data": FILE}, a2={"range": None, "data": FILE}))
    assert [t.label for t in plan_trials(fixed)] == ["spec sizes #1"]  # another seed would be the same trial
    assert small_sizes(fixed, 16) == {"n": 4096} and small_sizes(drawn, 16) == {"n": 15}


def test_a_spec_over_http_may_not_name_files():
    spec = KernelSpec.model_validate(gather(a0={"answer": FILE}, a1={"data": FILE}, a2={"range": None, "data": FILE}))
    assert [e.field for e in named_file_errors(spec)] == ["args[0].answer", "args[1].data", "args[2].data"]
    assert "submit the job with the kforge CLI or Python API" in named_file_errors(spec)[0].message
    assert named_file_errors(KernelSpec.model_validate(gather())) == []
