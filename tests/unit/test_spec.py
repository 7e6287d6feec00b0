"""Kernel specs: the examples load, launch geometry follows Kernel Tuner, and every invalid spec is
reported as (field, message with the fix). Also the seeded kernel inputs built from a spec."""
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

from kforge.specfile import SpecError, load_spec
from shared.adapters.inputs import make_arrays
from shared.domain.errors import FieldError, field_errors
from shared.domain.expressions import ExpressionError
from shared.domain.spec import DTYPES, CandidateSpec, KernelSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VECTOR_ADD_SOURCE = (EXAMPLES / "vector_add.cu").read_text()


def example(name: str) -> KernelSpec:
    return load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml")


def vector_add_data() -> dict:
    return yaml.safe_load((EXAMPLES / "vector_add.yaml").read_text())


def errors_of(data: dict, source: str = VECTOR_ADD_SOURCE) -> list[FieldError]:
    """Validate a spec dict directly and return its errors as people see them."""
    with pytest.raises(ValidationError) as info:
        KernelSpec.model_validate({"source": source, **data})
    return field_errors(info.value.errors())


def load_errors(tmp_path: Path, spec_text: str, source: str = VECTOR_ADD_SOURCE) -> list[FieldError]:
    """Write a .cu/.yaml pair and load it the way the CLI does; return the SpecError's errors."""
    kernel, spec = tmp_path / "k.cu", tmp_path / "k.yaml"
    kernel.write_text(source)
    spec.write_text(spec_text)
    with pytest.raises(SpecError) as info:
        load_spec(kernel, spec)
    assert str(spec) in str(info.value)
    return info.value.errors


def only(errors: list[FieldError]) -> FieldError:
    assert len(errors) == 1, errors
    return errors[0]


# --- the examples -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kernel", [("vector_add", "vector_add"), ("matmul", "matmul"),
                                          ("reduction", "reduce_sum")])
def test_examples_load(name, kernel):
    spec = example(name)
    assert spec.kernel_name == kernel
    assert spec.source == (EXAMPLES / f"{name}.cu").read_text()
    assert [a.name for a in spec.output_args] == [spec.args[0].name]
    assert spec.benchmark.iterations >= 1


def test_spec_beside_the_kernel_is_found(tmp_path):
    (tmp_path / "k.cu").write_text(VECTOR_ADD_SOURCE)
    (tmp_path / "k.yaml").write_text((EXAMPLES / "vector_add.yaml").read_text())
    assert load_spec(tmp_path / "k.cu", None) == example("vector_add")

    (tmp_path / "alone.cu").write_text(VECTOR_ADD_SOURCE)
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "alone.cu", None)
    error = only(info.value.errors)
    assert error.field == "--spec" and "alone.yaml" in error.message


def test_source_file_relative_to_the_spec(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "va.cu").write_text(VECTOR_ADD_SOURCE)
    (tmp_path / "va.yaml").write_text((EXAMPLES / "vector_add.yaml").read_text() + "source_file: kernels/va.cu\n")

    assert load_spec(None, tmp_path / "va.yaml").source == VECTOR_ADD_SOURCE


def test_vector_add_geometry():
    spec = example("vector_add")
    n = spec.sizes["n"]

    assert spec.launch_geometry(spec.baseline_params()) == ((math.ceil(n / 256), 1, 1), (256, 1, 1))
    for block in spec.tune_params["block_size_x"]:
        assert spec.launch_geometry({"block_size_x": block}) == ((math.ceil(n / block), 1, 1), (block, 1, 1))
    # A block that does not divide n rounds the grid up, so every element is covered.
    grid, block = spec.launch_geometry({"block_size_x": 1000})
    assert grid[0] == n // 1000 + 1 and grid[0] * block[0] >= n


def test_matmul_geometry_divides_y_by_the_product_of_grid_div_y():
    spec = example("matmul")
    n = spec.sizes["n"]
    params = spec.baseline_params()

    grid, block = spec.launch_geometry(params)
    assert block == (params["block_size_x"], params["block_size_y"], 1) == (16, 16, 1)
    assert grid == (math.ceil(n / 16), math.ceil(n / 16), 1)

    grid, block = spec.launch_geometry({**params, "block_size_x": 32, "tile_size_x": 4, "block_size_y": 8,
                                        "tile_size_y": 8})
    assert grid == (math.ceil(n / (32 * 4)), math.ceil(n / (8 * 8)), 1) and block == (32, 8, 1)


def test_reduction_has_a_fixed_grid():
    spec = example("reduction")
    for block in spec.tune_params["block_size_x"]:
        grid, launch_block = spec.launch_geometry({**spec.baseline_params(), "block_size_x": block})
        assert grid == (spec.sizes["blocks"], 1, 1) == (1024, 1, 1)
        assert launch_block == (block, 1, 1)


def test_default_block_is_256_when_block_size_x_is_not_given():
    data = vector_add_data()
    del data["params"], data["tune_params"], data["strategy"]
    data["sizes"] = {"n": 1000}
    spec = KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **data})

    assert spec.baseline_params() == {"block_size_x": 256, "block_size_y": 1, "block_size_z": 1}
    assert spec.launch_geometry(spec.baseline_params()) == ((math.ceil(1000 / 256), 1, 1), (256, 1, 1))


def test_problem_size_defaults_to_sizes():
    data = vector_add_data()
    del data["problem_size"]
    data["sizes"] = {"n": 1000}
    spec = KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **data})
    assert spec.launch_geometry({"block_size_x": 100}) == ((10, 1, 1), (100, 1, 1))


def test_launch_geometry_without_params_uses_the_default_block_for_the_grid_too():
    spec = example("vector_add")
    assert spec.launch_geometry({}) == ((math.ceil(spec.sizes["n"] / 256), 1, 1), (256, 1, 1))


def test_dynamic_shared_memory_is_evaluated_for_each_configuration():
    row_sum = EXAMPLES / "corpus" / "row_sum"
    spec = load_spec(row_sum.with_suffix(".cu"), row_sum.with_suffix(".yaml"))  # smem_args: {size: block_size_x * 4}

    assert spec.shared_memory_bytes(spec.baseline_params()) == 256 * 4
    for block in spec.tune_params["block_size_x"]:
        assert spec.shared_memory_bytes({"block_size_x": block}) == block * 4
    assert spec.for_candidate(spec.as_candidate()).shared_memory_bytes({"block_size_x": 64}) == 256
    assert spec.for_candidate(CandidateSpec(source=spec.source, smem_args={"size": 0})).shared_memory_bytes({}) == 0
    assert example("vector_add").shared_memory_bytes({"block_size_x": 128}) == 0  # no smem_args: none


def test_dynamic_shared_memory_naming_an_unknown_variable():
    error = only(errors_of({**vector_add_data(), "smem_args": {"size": "block_size_x * elements"}}))
    assert error.field == "smem_args.size" and "uses elements" in error.message


def test_shapes_and_scalars():
    spec = example("matmul")
    n = spec.sizes["n"]
    by_name = {a.name: a for a in spec.args}
    assert spec.shape_of(by_name["C"]) == (n, n)
    scalar = spec.scalar_of(by_name["n"], spec.baseline_params())
    assert scalar == n and scalar.dtype == np.int32
    assert [a.effective_role for a in spec.args] == ["out", "in", "in", "scalar"]


# --- invalid specs: each error names the field and the fix ------------------------------------------
def test_unknown_dtype_lists_the_dtypes():
    data = vector_add_data()
    data["args"][1]["dtype"] = "float"

    error = only(errors_of(data))
    assert error.field == "args[1].dtype"
    assert "'float'" in error.message
    assert "float32" in error.message and all(d in error.message for d in DTYPES)


def test_shape_with_an_undefined_size():
    data = vector_add_data()
    data["args"][2]["shape"] = ["m"]

    error = only(errors_of(data))
    assert error.field == "args[2].shape"
    assert "uses m" in error.message and "define it under sizes" in error.message and "known: n" in error.message


def test_scalar_value_with_an_undefined_name():
    data = vector_add_data()
    data["args"][3]["value"] = "n * stride"

    error = only(errors_of(data))
    assert error.field == "args[3].value"
    assert "stride" in error.message and "block_size_x" in error.message  # params are known names for values


def test_kernel_name_not_in_source_lists_the_kernels():
    data = vector_add_data()
    data["kernel_name"] = "vectoradd"
    source = VECTOR_ADD_SOURCE + '\nextern "C" __global__ void helper_kernel(float *x) {}\n'

    error = only(errors_of(data, source))
    assert error.field == "kernel_name"
    assert "'vectoradd' is not defined in source" in error.message
    assert "vector_add" in error.message and "helper_kernel" in error.message


def test_source_without_any_kernel():
    error = only(errors_of(vector_add_data(), "__device__ float f(float x) { return x; }"))
    assert error.field == "source" and "no __global__ function" in error.message


@pytest.mark.parametrize("declaration", [
    'extern "C" __global__ void vector_add(float *c)',
    "__global__ __launch_bounds__(256) void vector_add(float *c)",
    "__global__\nvoid\nvector_add (float *c)",
])
def test_kernel_declarations_are_recognised(declaration):
    spec = KernelSpec.model_validate({**vector_add_data(), "source": declaration + " {}"})
    assert spec.kernel_name == "vector_add"


@pytest.mark.parametrize("kernel_name", ["vector_add<float>", "ns::vector_add<float, 4>", "vector_add<int2 *>",
                                         "vector_add<Pair<float, -1>>", "::vector_add<unsigned int>"])
def test_a_template_kernel_is_named_by_its_instance(kernel_name):
    source = "template <typename T, int N = 1>\n__global__ void vector_add(T *c) {}"
    spec = KernelSpec.model_validate({**vector_add_data(), "kernel_name": kernel_name, "source": source})
    assert spec.kernel_name == kernel_name


def test_a_template_kernel_named_without_its_instance_asks_for_one():
    source = "template <typename T>\n__global__ void vector_add(T *c) {}"
    error = only(errors_of(vector_add_data(), source))
    assert error.field == "kernel_name" and "vector_add<float>" in error.message


def test_an_instance_of_a_kernel_that_is_not_a_template_says_to_drop_the_arguments():
    data = {**vector_add_data(), "kernel_name": "vector_add<float>"}
    error = only(errors_of(data, "// a template <typename T> in a comment\n" + VECTOR_ADD_SOURCE))
    assert error.field == "kernel_name"
    assert "not a template" in error.message and "write kernel_name: vector_add" in error.message


@pytest.mark.parametrize("kernel_name, why", [
    ("vector_add<float>; int x", "no ; { } # quotes, newlines or parentheses"),
    ("vector_add<float>\n#include <x>", "no ; { } # quotes, newlines or parentheses"),
    ('vector_add<"float">', "no ; { } # quotes, newlines or parentheses"),
    ("vector_add<(1<<3)>", "write f<8> rather than f<(1<<3)>"),
    ("vector_add<float>>", "do not pair up"),
    ("vector_add<" + "float, " * 40 + "int>", "at most 200"),
])
def test_a_kernel_name_that_could_add_code_is_refused_with_the_allowed_shape(kernel_name, why):
    error = only(errors_of({**vector_add_data(), "kernel_name": kernel_name}))
    assert error.field == "kernel_name"
    assert why in error.message and "scale<float>" in error.message


def test_a_candidate_kernel_name_is_held_to_the_same_shape():
    data = {**vector_add_data(), "strategy": {"name": "explicit", "candidate": {
        "source": VECTOR_ADD_SOURCE, "kernel_name": "vector_add<float>; int x"}}}
    error = only(errors_of(data))
    assert error.field.endswith("candidate.kernel_name") and "neither an identifier" in error.message


def test_launch_bounds_after_the_return_type_is_recognised():
    source = 'extern "C" __global__ void __launch_bounds__(256, 2) vector_add(float *c) {}'
    spec = KernelSpec.model_validate({**vector_add_data(), "source": source})
    assert spec.kernel_name == "vector_add"


def test_no_output_argument():
    data = vector_add_data()
    data["args"][0]["role"] = "in"

    error = only(errors_of(data))
    assert error.field == "args"
    assert "no argument has role out or inout" in error.message and "mark the output" in error.message


def test_duplicate_argument_names():
    data = vector_add_data()
    data["args"][2]["name"] = "a"

    error = only(errors_of(data))
    assert error.field == "args"
    assert "unique" in error.message and "repeated: a" in error.message


def test_unknown_top_level_field_suggests_the_right_one(tmp_path):
    text = (EXAMPLES / "vector_add.yaml").read_text().replace("tune_params:", "tune_param:")

    error = only(load_errors(tmp_path, text))
    assert error.field == "tune_param"
    assert "unknown field" in error.message and "did you mean 'tune_params'?" in error.message


def test_unknown_nested_field_suggests_the_right_one():
    data = vector_add_data()
    data["args"][1]["dtpye"] = data["args"][1].pop("dtype")
    data["benchmark"]["iteration"] = data["benchmark"].pop("iterations")

    errors = {e.field: e.message for e in errors_of(data)}
    assert "did you mean 'dtype'?" in errors["args[1].dtpye"]
    assert errors["args[1].dtype"] == "required: add this field"
    assert "did you mean 'iterations'?" in errors["benchmark.iteration"]


def test_unknown_field_far_from_any_known_one():
    error = only(errors_of({**vector_add_data(), "zzzz": 1}))
    assert error.field == "zzzz" and error.message == "unknown field: remove it"


@pytest.mark.parametrize("missing", ["kernel_name", "args"])
def test_missing_required_field(tmp_path, missing):
    data = vector_add_data()
    del data[missing]

    error = only(load_errors(tmp_path, yaml.safe_dump(data)))
    assert error.field == missing
    assert error.message == "required: add this field"


def test_bad_yaml_gives_the_line(tmp_path):
    text = "kernel_name: vector_add\nsizes:\n  n: 4\n bad: 1\nargs: []\n"

    error = only(load_errors(tmp_path, text))
    assert error.field == ""
    assert "not valid YAML at line 4" in error.message


def test_yaml_that_is_not_a_mapping(tmp_path):
    error = only(load_errors(tmp_path, "- kernel_name: vector_add\n"))
    assert "must be a mapping" in error.message


def test_missing_spec_file(tmp_path):
    (tmp_path / "k.cu").write_text(VECTOR_ADD_SOURCE)
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "k.cu", tmp_path / "nope.yaml")
    assert "does not exist" in only(info.value.errors).message


@pytest.mark.parametrize("option", ["-arch=sm_90", "--gpu-architecture=compute_90", "-arch"])
def test_arch_in_compiler_options_is_rejected(option):
    error = only(errors_of({**vector_add_data(), "compiler_options": ["--use_fast_math", option]}))
    assert error.field == "compiler_options"
    assert repr(option) in error.message and "benchmark.arch" in error.message


def test_arch_goes_in_benchmark():
    spec = KernelSpec.model_validate({**vector_add_data(), "source": VECTOR_ADD_SOURCE,
                                      "compiler_options": ["--use_fast_math"], "benchmark": {"arch": "sm_90a"}})
    assert spec.benchmark.arch == "sm_90a"
    error = only(errors_of({**vector_add_data(), "benchmark": {"arch": "90"}}))
    assert error.field == "benchmark.arch"


def test_wrong_types_show_the_value_given():
    data = vector_add_data()
    data["benchmark"]["iterations"] = "many"

    error = only(errors_of(data))
    assert error.field == "benchmark.iterations" and "'many'" in error.message


def test_several_errors_are_reported_together():
    data = vector_add_data()
    data["args"][1]["dtype"] = "float"
    data["tune_param"] = {}
    del data["kernel_name"]

    assert {e.field for e in errors_of(data)} == {"args[1].dtype", "tune_param", "kernel_name"}


def test_non_positive_size():
    error = only(errors_of({**vector_add_data(), "sizes": {"n": 0}}))
    assert error.field == "sizes" and "must be positive" in error.message


def test_field_error_str():
    assert str(FieldError("args[0].dtype", "bad")) == "args[0].dtype: bad"
    assert str(FieldError("", "bad yaml")) == "bad yaml"


# --- seeded inputs ----------------------------------------------------------------------------------
@pytest.fixture
def small_spec() -> KernelSpec:
    source = 'extern "C" __global__ void k(float *out, double *x, int *idx, unsigned char *mask, short *acc, int n) {}'
    return KernelSpec.model_validate({
        "kernel_name": "k", "source": source, "sizes": {"n": 64, "m": 3},
        "problem_size": ["n"],
        "args": [
            {"name": "out", "dtype": "float32", "shape": ["n", "m"], "role": "out"},
            {"name": "x", "dtype": "float64", "shape": ["n"]},
            {"name": "idx", "dtype": "int32", "shape": ["n * m"]},
            {"name": "mask", "dtype": "uint8", "shape": ["n"]},
            {"name": "acc", "dtype": "int16", "shape": ["m"], "role": "inout"},
            {"name": "n", "dtype": "int32", "value": "n"},
        ],
    })


def test_make_arrays_shapes_dtypes_and_zeroed_outputs(small_spec):
    arrays = make_arrays(small_spec, seed=3)

    assert set(arrays) == {"out", "x", "idx", "mask", "acc"}  # scalars are not arrays
    assert {name: a.dtype for name, a in arrays.items()} == {
        "out": np.float32, "x": np.float64, "idx": np.int32, "mask": np.uint8, "acc": np.int16}
    assert {name: a.shape for name, a in arrays.items()} == {
        "out": (64, 3), "x": (64,), "idx": (192,), "mask": (64,), "acc": (3,)}
    assert not arrays["out"].any()
    assert arrays["x"].any() and arrays["idx"].any()
    assert np.all((arrays["x"] >= -1) & (arrays["x"] < 1))
    assert np.all((arrays["idx"] >= -100) & (arrays["idx"] < 100))
    assert np.all(arrays["mask"] < 100)


def test_make_arrays_is_deterministic_per_seed(small_spec):
    first, again, other = make_arrays(small_spec, 7), make_arrays(small_spec, 7), make_arrays(small_spec, 8)

    for name in first:
        assert np.array_equal(first[name], again[name])
    for name in ("x", "idx", "mask"):
        assert not np.array_equal(first[name], other[name]), name
    assert np.array_equal(first["out"], other["out"])  # outputs are zero whatever the seed


def test_make_arrays_inputs_differ_between_arguments():
    source = 'extern "C" __global__ void k(float *c, const float *a, const float *b) {}'
    spec = KernelSpec.model_validate({
        "kernel_name": "k", "source": source, "sizes": {"n": 32},
        "args": [{"name": "c", "dtype": "float32", "shape": ["n"], "role": "out"},
                 {"name": "a", "dtype": "float32", "shape": ["n"]},
                 {"name": "b", "dtype": "float32", "shape": ["n"]}],
    })
    arrays = make_arrays(spec, 0)
    assert not np.array_equal(arrays["a"], arrays["b"])


def test_tuning_without_tune_params_and_unknown_search_strategies_are_field_errors():
    data = vector_add_data()
    del data["tune_params"]
    with pytest.raises(ValidationError, match="strategy tune needs tune_params"):
        KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **data})
    data = vector_add_data()
    data["benchmark"] = {"search": {"strategy": "genetic"}}
    with pytest.raises(ValidationError, match="not a Kernel Tuner strategy: use one of brute_force"):
        KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **data})


def test_work_defaults_to_every_array_once_and_takes_expressions():
    spec = example("matmul")
    n = spec.sizes["n"]
    assert spec.bytes_per_launch() == 3 * 4 * n * n and spec.flops_per_launch() == 2 * n**3
    assert example("vector_add").bytes_per_launch() == 3 * 4 * example("vector_add").sizes["n"]


def test_large_inputs_are_drawn_in_chunks_that_depend_on_the_seed_not_the_threads(monkeypatch):
    import shared.adapters.inputs

    source = 'extern "C" __global__ void k(float *c, const float *a, const int *i) {}'
    spec = KernelSpec.model_validate({
        "kernel_name": "k", "source": source, "sizes": {"n": 100},
        "args": [{"name": "c", "dtype": "float32", "shape": ["n"], "role": "out"},
                 {"name": "a", "dtype": "float32", "shape": ["n"]},
                 {"name": "i", "dtype": "int32", "shape": ["n"]}],
    })
    monkeypatch.setattr(shared.adapters.inputs, "CHUNK", 16)  # 7 chunks of 100 elements
    monkeypatch.setattr(shared.adapters.inputs.os, "cpu_count", lambda: 1)
    one_thread = make_arrays(spec, 5)
    monkeypatch.setattr(shared.adapters.inputs.os, "cpu_count", lambda: 4)
    four_threads = make_arrays(spec, 5)

    for name in ("a", "i"):
        assert np.array_equal(one_thread[name], four_threads[name]), name
    a = one_thread["a"]
    assert np.all((a >= -1) & (a < 1)) and len(np.unique(a)) == 100  # every chunk drew its own values
    assert not np.array_equal(a[:16], a[16:32])


# --- admission limits, bounded restrictions, non-finite floats, identifiers --------------------------
def _spec(**changes) -> KernelSpec:
    return KernelSpec.model_validate({**vector_add_data(), "source": VECTOR_ADD_SOURCE, **changes})


@pytest.mark.parametrize("changes, limits, field", [
    ({"sizes": {"n": 2 ** 40}}, {}, "sizes.n"),
    ({"sizes": {"n": 4096}}, {"max_size": 1024}, "sizes.n"),
    ({"tune_params": {f"p{i}": list(range(10)) for i in range(6)}}, {}, "tune_params"),
    ({"tune_params": {"block_size_x": [32, 64, 128]}}, {"max_search_space": 2}, "tune_params"),
    ({"benchmark": {"timeout_s": 601}}, {}, "benchmark.timeout_s"),
    ({"verify": {"timeout_s": 60}}, {"max_verify_timeout_s": 30}, "verify.timeout_s"),
    ({"benchmark": {"search": {"time_limit_s": 5 * 3600}}}, {}, "benchmark.search.time_limit_s"),
    ({}, {"max_array_bytes": 1 << 20}, "args"),
    ({"work": {"bytes": "n ** 4"}}, {}, "work.bytes"),
    ({"restrictions": ["block_size_x ** block_size_x > 0"]}, {}, "restrictions[0]"),
    ({"grid_div_x": ["block_size_x - 32"]}, {}, "problem_size"),  # a divisor of 0 at block_size_x 32
    ({"smem_args": {"size": "(block_size_x - 64) * 4"}}, {}, "smem_args.size"),  # negative at block_size_x 32
    ({"smem_args": {"size": "block_size_x / 3"}}, {}, "smem_args.size"),  # not whole bytes at 32
])
def test_admission_refuses_each_limit_naming_the_field_and_setting(changes, limits, field):
    from shared.application.limits import Limits, limit_errors

    assert [e.field for e in limit_errors(_spec(**changes), Limits(**limits))] == [field]


def test_the_examples_pass_admission_and_limits_come_from_settings(monkeypatch):
    from shared.adapters.settings import Settings
    from shared.application.limits import Limits, limit_errors

    for name in ("vector_add", "matmul", "reduction"):
        assert limit_errors(example(name), Limits()) == []
    monkeypatch.setenv("KFORGE_MAX_SEARCH_SPACE", "7")
    monkeypatch.setenv("KFORGE_MAX_BENCHMARK_TIMEOUT_S", "30")
    limits = Limits.of(Settings())
    assert (limits.max_search_space, limits.max_benchmark_timeout_s) == (7, 30.0)
    assert Limits.of(Settings(_env_file=None)).max_size == Limits().max_size


def test_memory_refusal_compares_arrays_and_copies_with_device_and_host():
    from shared.application.limits import memory_refusal

    spec = example("vector_add")  # 3 x 256 MiB arrays, one output: 1.25 GiB with the output's two copies
    assert memory_refusal(spec, 80 << 30) is None
    reason = memory_refusal(spec, 1 << 30)
    assert reason and "the device" and "use smaller sizes" in reason and f"{5 * 256 << 20:,}" in reason
    huge = spec.with_sizes({"n": 2 ** 40})
    assert "this host" in memory_refusal(huge, None)
    # The benchmark's comparison: its two sets and the set it draws afresh
    assert memory_refusal(spec, 2 * (5 * 256 << 20), 2) is None
    assert f"{15 * 256 << 20:,}" in memory_refusal(spec, 2 * (5 * 256 << 20), 3)


def test_kernel_tuner_gets_restrictions_through_the_bounded_evaluator():
    from services.benchmark.tuning import _bounded_restrictions, _kernel_tuner

    kt = _kernel_tuner()
    spec = _spec(tune_params={"block_size_x": [32, 64, 128, 256, 512, 1024], "t": [1, 2, 4], "v": ["a", "b"]},
                 restrictions=["block_size_x * t <= 512 and n % block_size_x == 0", "v == v"])
    bounded = kt.Searchspace(spec.tune_params, _bounded_restrictions(kt, spec), 1024, block_size_names=spec.block_size_names)
    as_text = kt.Searchspace(spec.tune_params, ["block_size_x * t <= 512"], 1024, block_size_names=spec.block_size_names)
    assert sorted(bounded.list) == sorted(as_text.list) and bounded.size == 2 * (5 + 4 + 3)
    bomb = _spec(tune_params={"block_size_x": [32, 64]}, restrictions=["9 ** 9 ** 9 > block_size_x"])
    with pytest.raises(ExpressionError, match="past 2\\*\\*64"):
        kt.Searchspace(bomb.tune_params, _bounded_restrictions(kt, bomb), 1024, block_size_names=bomb.block_size_names)


@pytest.mark.parametrize("path", ["benchmark.timeout_s", "benchmark.ci_target", "benchmark.abandon_factor",
                                  "benchmark.atol", "verify.rtol", "verify.timeout_s", "strategy.target_speedup",
                                  "strategy.reference_ms", "generator.temperature", "params.x"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), float("-inf")])
def test_nan_and_infinity_are_refused(path, value):
    first, second = path.split(".")
    errors = errors_of({**vector_add_data(), first: {second: value}})
    assert errors and all(e.field.startswith(path) for e in errors)  # a union reports each of its members
    assert any("finite" in e.message for e in errors)


@pytest.mark.parametrize("changes, field", [
    ({"kernel_name": "vector_add\n"}, "kernel_name"), ({"sizes": {"n\n": 8}}, "sizes"),
    ({"tune_params": {"block_size_x\n": [64]}}, "tune_params"), ({"params": {"x\n": 1}}, "params"),
    ({"block_size_names": ["block_size_x\n"]}, "block_size_names"), ({"benchmark": {"arch": "sm_90\n"}}, "benchmark.arch"),
    ({"benchmark": {"arch": "sm_\u0669\u0660"}}, "benchmark.arch"),  # Arabic-Indic digits match \d, not [0-9]
])
def test_identifiers_are_whole_text_matches(changes, field):
    assert only(errors_of({**vector_add_data(), **changes})).field == field


def test_prime_below_is_exact_and_cheap_at_any_size():
    import time

    from services.verifier.trials import prime_below

    def by_division(n):
        return next((c for c in range(n - 1, 1, -1) if all(c % d for d in range(2, math.isqrt(c) + 1))), None)

    assert [prime_below(n) for n in range(2000)] == [by_division(n) for n in range(2000)]
    started = time.perf_counter()
    assert prime_below(2 ** 64) == 2 ** 64 - 59 and prime_below(2 ** 34) == 17179869143
    assert time.perf_counter() - started < 0.05


# --- the strategy ---------------------------------------------------------------------------------------
def test_tune_params_without_a_strategy_tune_them_and_without_tune_params_the_kernel_is_measured():
    data = {k: v for k, v in vector_add_data().items() if k != "strategy"}
    assert KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **data}).strategy.name == "tune"
    measured = {**data, "tune_params": {}, "params": {"block_size_x": 256}}
    assert KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **measured}).strategy.name == "baseline"
    # A strategy named outright is kept: baseline with tune_params measures only the params.
    named = {**data, "strategy": {"name": "baseline"}}
    assert KernelSpec.model_validate({"source": VECTOR_ADD_SOURCE, **named}).strategy.name == "baseline"


def test_a_kernel_tuner_search_strategy_as_the_job_strategy_points_to_benchmark_search():
    data = {**vector_add_data(), "strategy": {"name": "brute_force"}}
    error = only(errors_of(data))
    assert error.field == "strategy.name"
    assert "Kernel Tuner's search strategies" in error.message
    assert "benchmark: {search: {strategy: brute_force}}" in error.message
