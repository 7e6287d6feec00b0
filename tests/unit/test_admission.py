"""A submission is refused with every semantic error at once, before anything is recorded: limits, the
webhook URL, and the submitted kernel itself, compiled once by real NVRTC (no GPU) to check that it compiles
and takes the arguments `args` lists, whatever the strategy."""
import pytest

from shared.application.jobs import Admission, AdmissionRefused, submit_job
from shared.application.kernel_admission import kernel_errors
from shared.domain.spec import KernelSpec
from tests.conftest import EXAMPLES
from tests.fakes import RecordingBus

# Each parameter is something args can get wrong: a pointer, a double, an int, a struct by value.
KERNEL = 'extern "C" __global__ void k(float *out, double x, int n, float4 v) { out[0] = x + n + v.x; }'
WRONG_ARGS = [{"name": "out", "dtype": "int32", "value": 1},  # a scalar where the kernel takes a pointer
              {"name": "x", "dtype": "float32", "value": 1},  # 32 bits where the kernel takes a double
              {"name": "n", "dtype": "int32", "shape": ["n"], "role": "out"},  # an array where it takes an int
              {"name": "v", "dtype": "float32", "value": 2}]  # a scalar where it takes a 16-byte struct
RIGHT_ARGS = [{"name": "out", "dtype": "float32", "shape": ["n"], "role": "out"},
              {"name": "x", "dtype": "float64", "value": 1}, {"name": "n", "dtype": "int32", "value": "n"}]
STRATEGIES = [{"name": "baseline"}, {"name": "tune"}, {"name": "one_prompt"}, {"name": "explicit"},
              {"name": "autonomous"}, {"name": "multiturn"}, {"name": "verify", "candidate": {"source": KERNEL}}]


def spec(**fields) -> KernelSpec:
    return KernelSpec.model_validate({"kernel_name": "k", "source": KERNEL, "sizes": {"n": 1024}, "args": WRONG_ARGS,
                                      **fields})


def refused(store, kernel_spec: KernelSpec) -> dict[str, str]:
    bus = RecordingBus()
    with pytest.raises(AdmissionRefused) as raised:
        submit_job(store, bus, kernel_spec, admission=Admission())
    assert store.stream_ids() == [] and bus.messages == []  # nothing recorded, nothing sent
    return {e.field: e.message for e in raised.value.errors}


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s["name"])
def test_every_argument_that_disagrees_with_the_kernel_is_named_at_once_whatever_the_strategy(store, strategy):
    errors = refused(store, spec(strategy=strategy, tune_params={"block_size_x": [64, 128]}))

    assert list(errors) == ["args[0]", "args[1].dtype", "args[2]", "args[3]"]
    assert errors["args[0]"] == ("parameter 0 (out) should be a int32 scalar (PTX .b32/.s32/.u32) but the kernel "
                                 "declares .u64: give out a shape if the kernel takes an array there, else a dtype "
                                 "of int64 or uint64")
    assert errors["args[1].dtype"].endswith("declares .f64: use a dtype of float64, or change the kernel's parameter")
    assert errors["args[2]"].endswith("declares .u32: give n a value instead of a shape and a dtype of int32 or "
                                      "uint32, or have the kernel take a pointer")
    assert "declares .b8[16]: args cannot describe a struct passed by value" in errors["args[3]"]


def test_a_kernel_error_comes_with_the_limit_and_webhook_errors_of_the_same_spec(store):
    errors = refused(store, spec(sizes={"n": 1 << 40}, webhook_url="http://127.0.0.1:9/hook"))

    assert list(errors) == ["sizes.n", "webhook_url", "args[0]", "args[1].dtype", "args[2]", "args[3]"]
    assert "KFORGE_MAX_SIZE" in errors["sizes.n"] and "loopback address" in errors["webhook_url"]


def test_a_kernel_that_does_not_compile_is_refused_with_nvrtcs_error_line(store):
    errors = refused(store, spec(source=KERNEL.replace("v.x;", "v.x + undefined_y;"), args=RIGHT_ARGS[:2]))

    assert list(errors) == ["source"]
    assert errors["source"].startswith("NVRTC could not compile k for compute_90: NVRTC_ERROR_COMPILATION: ")
    assert 'error: identifier "undefined_y" is undefined' in errors["source"]
    assert errors["source"].endswith("; fix the kernel (it is compiled with params as -D defines and with "
                                     "compiler_options)")


def test_a_header_of_the_users_own_is_refused_naming_what_to_do(store):
    """kforge has the kernel's source only: a quoted include of a file beside it cannot be opened, and the
    refusal says to paste it in; a CUDA header whose own include fails gets the general fix instead."""
    errors = refused(store, spec(source='#include "my_helpers.cuh"\n' + KERNEL, args=RIGHT_ARGS[:2]))
    assert 'cannot open source file "my_helpers.cuh"' in errors["source"]
    assert errors["source"].endswith("no file of yours beside it: paste my_helpers.cuh's contents into the source in "
                                     "place of its #include")
    from shared.application.kernel_admission import _fix
    log = ('/usr/include/cccl/thrust/system/omp/detail/par.h(30): catastrophic error: cannot open source file '
           '"omp.h"\n')
    assert _fix(log, {}).startswith("fix the kernel")


@pytest.mark.parametrize("header, name, what", [
    ("#include <cub/block/block_reduce.cuh>\n", "items_per_thread", "cub/util_arch.cuh"),
    ("", "round", "kforge_implicit.h (what nvcc declares for every kernel: the math functions, std's among them)"),
])
def test_a_tune_parameter_that_rewrites_a_name_of_a_header_is_named_with_the_header(store, header, name, what):
    """Tune parameters are -D defines, so one named like a member of CUB's (items_per_thread) or like a math
    function breaks the header that declares it; the refusal names the parameter and the header, not only
    NVRTC's errors inside it."""
    source = header + KERNEL.replace("v.x;", f"v.x * {name};")
    errors = refused(store, spec(source=source, args=RIGHT_ARGS[:2], params={name: 4}))
    assert errors["source"].endswith(f"the tune parameter {name} is defined as a macro (-D{name}=4), as Kernel Tuner "
                                     f"defines every tune parameter, and {what} uses {name} as a name of its own: "
                                     "rename the parameter (in params, tune_params, restrictions and the kernel)")


def test_a_constant_arg_must_name_a_constant_array_of_the_source(store):
    """role constant: a __constant__ array filled before every launch, no parameter, so the parameters still pair
    up around it; the source must declare it."""
    source = ('__constant__ float taps[4];\nextern "C" __global__ void k(float *out, int n) {\n'
              '    if (threadIdx.x < n) out[threadIdx.x] = taps[threadIdx.x % 4];\n}\n')
    args = [{"name": "out", "dtype": "float32", "shape": ["n"], "role": "out"},
            {"name": "taps", "dtype": "float32", "shape": [4], "role": "constant"},
            {"name": "n", "dtype": "int32", "value": "n"}]
    assert kernel_errors(spec(source=source, args=args), "sm_90") == []
    errors = refused(store, spec(source=source.replace("taps", "weights"), args=args))
    assert errors == {"args[1].name": "args[1] (taps) has role constant, but the kernel's source declares no "
                                      "__constant__ taps at file scope: declare it (__constant__ float taps[...];) "
                                      "or name the one it declares"}
    wider = [args[0], {**args[1], "shape": [8]}, args[2]]
    assert [(e.field, e.message) for e in kernel_errors(spec(source=source, args=wider), "sm_90")] == [
        ("args[1].shape", "__constant__ taps holds 16 bytes, and args[1] gives it 32: make the shape fit the "
                          "declaration (or the declaration the shape)")]


def test_a_missing_argument_is_one_error_on_args_not_one_per_shifted_position(store):
    errors = refused(store, spec(args=RIGHT_ARGS))

    assert errors == {"args": "the kernel takes 4 parameters (u64, f64, u32, b8[16]) but args lists 3 (out, x, n): "
                              "list one argument per kernel parameter, in the order of its signature"}


@pytest.mark.parametrize("name", ["vector_add", "matmul", "reduction"])
def test_the_examples_compile_and_fit_their_args(name):
    from kforge.specfile import load_spec

    assert kernel_errors(load_spec(EXAMPLES / f"{name}.cu", EXAMPLES / f"{name}.yaml"), "sm_90") == []


def test_the_python_api_raises_one_error_naming_every_field(tmp_path):
    from kforge.api import KforgeError, optimise
    from shared.adapters.settings import Settings
    from shared.application import runtime

    rt = runtime.build(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None))
    runtime.install(rt)
    try:
        with pytest.raises(KforgeError) as raised:
            optimise(spec())
        assert rt.store.stream_ids() == []
    finally:
        runtime.install(None)
        rt.store.close()
    message = str(raised.value)
    assert message.startswith("invalid spec: args[0]: parameter 0 (out) should be")
    assert all(f"; {field}: parameter" in message for field in ("args[1].dtype", "args[2]", "args[3]"))


def test_an_unknown_strategy_is_refused_at_submission_with_the_nearest_name(store):
    source = KERNEL.replace(", float4 v", "").replace(" + v.x", "")
    errors = refused(store, spec(source=source, args=RIGHT_ARGS, strategy={"name": "one_promt"}))

    assert list(errors) == ["strategy.name"]
    assert errors["strategy.name"].startswith("strategy 'one_promt' is not known: did you mean 'one_prompt'?")


def test_a_submission_that_finds_every_admission_compile_taken_is_refused_and_nothing_is_recorded(store,
                                                                                                monkeypatch):
    from shared.application import kernel_admission
    from shared.application.jobs import QueueFull

    monkeypatch.setattr(kernel_admission, "SLOT_WAIT_S", 0.05)
    right = spec(args=RIGHT_ARGS, source=KERNEL.replace(", float4 v", "").replace(" + v.x", ""))
    admission, bus = Admission(compiles=1), RecordingBus()
    gate = kernel_admission._compile_slots(1)
    assert gate.acquire(timeout=5)  # another request's compile, still running
    try:
        with pytest.raises(QueueFull) as raised:
            submit_job(store, bus, right, admission=admission)
    finally:
        gate.release()
    assert str(raised.value) == ("1 submitted kernels are being compiled for admission, as many as this kforge "
                                 "compiles at once (KFORGE_ADMISSION_COMPILES); submit again in a few seconds")
    assert store.stream_ids() == [] and bus.messages == []
    # Once that compile has ended the same submission goes through, and gives its slot back.
    job_id = submit_job(store, bus, right, admission=admission)
    assert store.stream_ids() == [f"job-{job_id}"] and gate.acquire(timeout=0)
    gate.release()
