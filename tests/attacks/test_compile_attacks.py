"""Attacks through the compiler: reading host files and secrets, writing files, compile bombs.

Each is tried where a stranger can reach it: a submitted spec (refused at admission), a candidate that
reaches the compiler later (refused before NVRTC sees it), and, with the policy bypassed, the sandboxed
child itself, to show the second wall holds on its own."""
import os
import time
from pathlib import Path

import pytest

from shared.adapters.device import compiler
from shared.adapters.device.compiler import CompileLimits, Sandbox, compile_kernel
from shared.adapters.device.nvrtc import CompileError, compile_options
from shared.adapters.settings import Settings
from shared.application import runtime
from shared.application.jobs import AdmissionRefused, job_events, submit_job
from shared.domain.compile_policy import PolicyViolation, check_options, check_source
from shared.domain.spec import KernelSpec
from tests.conftest import record_attack

KERNEL = 'extern "C" __global__ void k(float *out) { out[0] = 1.0f; }\n'
SECRET = "kf-secret-7d1c0ffee"
FAST = CompileLimits(timeout_s=8, cpu_s=3, memory_bytes=1536 << 20, log_chars=4096)
MACRO_BOMB = """#define A(x) x x x x x x x x x x
#define B(x) A(A(A(A(x))))
#define C(x) B(B(B(B(x))))
#define D(x) C(C(C(C(x))))
__device__ int v[] = {D(1)};
"""

# thrust names some headers by macros (`#include __THRUST_DEVICE_SYSTEM_ALGORITH_DETAIL_HEADER_INCLUDE(unique.h)`,
# `<thrust/system/cuda/detail/unique.h>` once expanded): defining the name's words aims it at any file.
THRUST_AIMED = ("#define unique\n#define execution_policy\n#define h /" + "../" * 20 + "etc/passwd\n"
                "#include <thrust/detail/unique.inl>\n")
HOSTILE_INCLUDES = {
    "absolute path": '#include "/proc/self/environ"\n',
    "angled absolute path": "#include </etc/passwd>\n",
    "parent directory": '#include "../../../../etc/passwd"\n',
    "computed include": '#define FILE "/proc/self/environ"\n#include FILE\n',
    "digraph": '%:include "/etc/passwd"\n',
    "trigraph": '??=include "/etc/passwd"\n',
    "comment before #": '/* hidden */ # /* */ include "/etc/passwd"\n',
    "line splice": '#inc\\\nlude "/etc/passwd"\n',
    "include_next": "#include_next <passwd>\n",
    "import": '#import "/etc/passwd"\n',
    "embed": '#embed "/etc/passwd"\n',
    "__has_include probe": "#if __has_include(</root/.ssh/id_rsa>)\n#endif\n",
    "__has_include of a macro": '#define P "/etc/shadow"\n#if __has_include(P)\n#endif\n',
    "angled parent directory": "#include <../../../../etc/passwd>\n",
    "through a header's path": "#include <cuda_fp16.h/../../../../../../etc/passwd>\n",
    "a name outside the CUDA headers": "#include <passwd>\n",
    "a CUDA header that includes by macro": THRUST_AIMED,
    # Directives hidden in what a misreading takes for a comment or a literal: the policy reads the source in the
    # language mode of its --std, as NVRTC does (see STD for those compiled in another mode than C++17).
    "after a digit separator": "__device__ int a = 1'0; __device__ char b = '/*';\n#include \"/etc/passwd\"\n// */\n",
    "after a prefixed raw string": ('__device__ const wchar_t *s = LR"(x" /* )";\n#include "/proc/self/environ"\n'
                                    "// */\n"),
    "after a raw string in a number": '#if 0\n1.R"(a"b)" /*\n#endif\n#include "/etc/passwd"\n// */\n',
    "after a raw string in C++03": '#if 0\nR"(a"b)" /*\n#endif\n#include "/etc/passwd"\n// */\n',
    "after a trigraph C++17 ignores": '// hi ??/\n#include "/etc/passwd"\n',
    "after a line splice in a raw string": ('__device__ const char *s = R"a(x)\\\na" /* )a";\n#include "/etc/passwd"\n'
                                            "// */\n"),
    "after a raw string delimiter NVRTC rejects": ('__device__ const char *s = R"a b(a" /* )a b";\n'
                                                   '#include "/etc/passwd"\n// */\n'),
    "after a $ before a raw string": '__device__ const char *s = $R"d(a" /* )d";\n#include "/etc/passwd"\n// */\n',
    "__has_include pasted in an #if": '#define H(a, b) a##b\n#if H(__has_, include)("/etc/passwd")\n#endif\n',
    # A third review's: the text is also scanned for directives whatever seems to hold them (directive_scan).
    "after a block comment ending on its line": '__device__ int a; /*\n*/ #include "/etc/passwd"\n',
    "in what a literal suffix R makes a raw string": '__device__ const char *s = "a"R"(\n#include "/etc/passwd"\n)";\n',
    "after a digit separator and a UCN": "__device__ int v = 1'\\u0041'/*';\n#include \"/etc/passwd\"\n// */\n",
    "after a non-ASCII digit": "int v = \u0661'a/*';\n#include \"/etc/passwd\"\n// */\n",
    "after a digit separator in #if 0": "#if 0\n1'a/*'\n#endif\n#include \"/etc/passwd\"\n// */\n",
    "after a splice before a raw string's quote": '__device__ const char *s = R"a(\n)a\\\n";\n#include "/etc/passwd"\n'
                                                  '// )a";\n',
    "__has_include through a parameter named defined": ('#define H(defined) defined __has_include\n'
                                                         '#if H()("/etc/passwd")\n#endif\n'),
    "__has_include pasted by a CUDA header's macro": ('#include <cuda/std/cstdint>\n'
                                                       '#if _CCCL_PP_CAT(__has_, include)("/etc/passwd")\n#endif\n'),
    "__has_include pasted by a macro the #if names": ('#include <cuda/std/cstdint>\n#define PROBE _CCCL_PP_CAT('
                                                      '__has_, include)("/etc/passwd")\n#if PROBE\n#endif\n'),
    "a call behind a // in a literal": ("#define CAT(a, b) a##b\n#if '//' && CAT(__has_, include)(\"/etc/passwd\")\n"
                                         "#endif\n"),
    "a call between comment openers in literals": ("#include <cuda/std/cstdint>\n#if '/*' && _CCCL_PP_CAT(__has_, "
                                                   "include)(\"/etc/passwd\") && '*/'\n#endif\n"),
    "a call in a define behind a // in a literal": ("#include <cuda/std/cstdint>\n#define G '//' && "
                                                    "_CCCL_PP_CAT(__has_, include)(\"/etc/passwd\")\n#if G\n#endif\n"),
    "after a splice of a backslash, two carriage returns and a newline": (
        '#define S "abc\\\r\r\n/*"\n#incl\\\r\r\nude "/etc/passwd"\n// */\n'),
    "a pasting macro redefined after its #if": ('#define CAT(a, b) a##b\n#if CAT(__has_, include)("/etc/passwd")\n'
                                                '#endif\n#undef CAT\n#define CAT(a, b) a b\n'),
    "a hidden define aiming thrust's include": (
        "#include <thrust/detail/config.h>\n__device__ int a = 1'0; __device__ char b = '/*';\n"
        "#undef __THRUST_DEVICE_SYSTEM_ALGORITH_DETAIL_HEADER_INCLUDE\n"
        '#define __THRUST_DEVICE_SYSTEM_ALGORITH_DETAIL_HEADER_INCLUDE(f) "/proc/self/environ"\n// */\n'
        "#include <cub/block/block_load.cuh>\n"),
}
HOSTILE_OPTIONS = ["--pre-include=/etc/passwd", "--create-pch=/tmp/kforge.db", "--use-pch=/tmp/x.pch",
                   "--pch-dir=/tmp", "--time=/tmp/webhook-secret", "-I/etc", "--include-path=/", "-I", "/etc",
                   "--fdevice-time-trace=/tmp/trace.json", "-Xptxas=-o=/tmp/out", "-lto"]


def _spec(source: str = KERNEL, **more) -> dict:
    return {"kernel_name": "k", "source": source, "args": [{"name": "out", "dtype": "float32", "shape": [1],
                                                             "role": "out"}], "sizes": {"n": 1}, **more}


STD = {"after a raw string in C++03": ["--std=c++03"], "trigraph": ["--std=c++14"],
       "after a digit separator": ["--std=c++17"]}


@pytest.mark.parametrize("name", sorted(HOSTILE_INCLUDES))
def test_host_file_includes_are_refused_in_specs_and_before_any_compile(name):
    source, options = HOSTILE_INCLUDES[name] + KERNEL, STD.get(name, [])
    with pytest.raises(ValueError, match="source") as refused:
        KernelSpec.model_validate(_spec(source, compiler_options=options))
    with pytest.raises(CompileError) as compiling:
        compile_kernel(source, "k", {}, options, "sm_90")  # a candidate reaches the compiler without admission
    assert compiling.value.log == ""
    record_attack(f"include: {name}", repr(HOSTILE_INCLUDES[name].strip())[:60],
                  f"refused at admission and before NVRTC: {refused.value.errors()[0]['msg'][:70]}")


def test_cuda_headers_and_ordinary_directives_pass_the_policy():
    """A commented-out include passes, of a header kforge lacks too: NVRTC could open only the headers' files."""
    ordinary = ("#include <cuda_fp16.h>\n#include \"cuda/std/cstdint\"\n#pragma once\n#define TILE 16\n"
                "#if defined(TILE) && __has_include(<cuda_bf16.h>)\n#endif\n"
                "const char *s = \"#include <iostream>\"; // #include \"helpers.cuh\" in a comment\n"
                "/* #include <vector> */ int x = 1 % 2;\n" + KERNEL)
    assert check_source(ordinary) == ordinary


@pytest.mark.parametrize("hidden", ['const char *s = "#include </etc/passwd>";\n',
                                    '// #include "/etc/passwd" in a comment\n', "/* #include <../shadow> */\n"])
def test_an_unsafe_include_is_refused_even_where_a_comment_or_literal_seems_to_hold_it(hidden):
    """Three reviews found readings of comments and literals that NVRTC does not share: the text is scanned
    whatever seems to hold a directive, and what could leave the headers' directories is refused there too."""
    with pytest.raises(PolicyViolation, match="is not allowed"):
        check_source(hidden + KERNEL)


@pytest.mark.parametrize("option", HOSTILE_OPTIONS)
def test_options_that_touch_files_are_refused(option):
    with pytest.raises(ValueError, match="compiler_options"):
        KernelSpec.model_validate(_spec(compiler_options=[option]))
    with pytest.raises(CompileError, match="not allowed"):
        compile_kernel(KERNEL, "k", {}, [option], "sm_90")
    record_attack(f"compiler option {option.split('=')[0]}", option, "refused at admission and before NVRTC")


def test_ordinary_options_still_compile():
    options = ["--use_fast_math", "-lineinfo", "--maxrregcount=64", "-DEXTRA=2", "--ftz=true", "-Xptxas=-v",
               "--std=c++20", "--restrict", "--diag-suppress=177"]
    assert check_options(options) == options
    assert compile_kernel(KERNEL, "k", {}, options, "sm_90").cubin.startswith(b"\x7fELF")


@pytest.mark.parametrize("options, params", [(["-DX=__has_##include"], {}), ([], {"X": ["__has_ ## include"]}),
                                             (["-DX=__has_include"], {}), ([], {"X": ["__has_include_next"]}),
                                             (["-DX=CAT"], {}), ([], {"X": ["CAT"]}),
                                             (["-DX=_CCCL_PP_CAT/**/(__has_, include)"], {}),
                                             ([], {"X": ["_CCCL_PP_CAT/**/(__has_, include)"]})])
def test_no_define_from_outside_the_source_may_build_has_include(options, params):
    """A -D value or a tune parameter of __has_include, pasting it, or naming a macro of the source's that pastes,
    would probe any path from an #if."""
    source = '#include <cuda/std/cstdint>\n#define CAT(a, b) a##b\n#if X("/etc/passwd")\n#endif\n' + KERNEL
    with pytest.raises(ValueError, match="##|__has_include"):
        KernelSpec.model_validate(_spec(source, compiler_options=options, tune_params=params))
    with pytest.raises(CompileError, match="##|__has_include"):
        compile_kernel(source, "k", {name: values[0] for name, values in params.items()}, options, "sm_90")


def test_a_define_value_cannot_smuggle_a_second_line():
    with pytest.raises(ValueError, match="one short line"):
        KernelSpec.model_validate(_spec(tune_params={"X": ['1\n#include "/etc/passwd"']}))
    with pytest.raises(CompileError, match="one short line"):
        compile_kernel(KERNEL, "k", {"X": '1\n#include "/etc/passwd"'}, [], "sm_90")


# CUB's BlockLoad reaches thrust's macro-built includes: allowed, so long as nothing outside the headers redefines
# a name their paths are built from (`h` of `unique.h`, `detail`, ...).
BLOCK_LOAD = ("#include <cub/block/block_load.cuh>\n"
              'extern "C" __global__ void k(float *out) {\n'
              "    float v[1];\n    cub::LoadDirectBlocked(0, out, v);\n    out[0] = v[0];\n}\n")


@pytest.mark.parametrize("how", ["-D option", "-U option", "tune parameter"])
def test_a_name_thrust_builds_an_include_path_from_cannot_be_defined_from_outside_the_source(how):
    options = {"-D option": ["-Dh=/" + "../" * 20 + "etc/passwd"], "-U option": ["-Udetail"]}.get(how, [])
    params = {"h": ["/etc/passwd"]} if how == "tune parameter" else {}
    with pytest.raises(ValueError, match="compiler_options|tune_params.h") as refused:
        KernelSpec.model_validate(_spec(BLOCK_LOAD, compiler_options=options, tune_params=params))
    with pytest.raises(CompileError, match="cub/block/block_load.cuh includes headers whose names its macros build"):
        compile_kernel(BLOCK_LOAD, "k", {name: values[0] for name, values in params.items()}, options, "sm_90")
    assert compile_kernel(BLOCK_LOAD, "k", {}, [], "sm_90").cubin.startswith(b"\x7fELF")
    record_attack(f"thrust's macro-built include aimed by a {how}", (options or [f"{params}"])[0][:60],
                  f"refused at admission and before NVRTC: {refused.value.errors()[0]['msg'][:70]}")


def test_policy_errors_name_the_line():
    with pytest.raises(PolicyViolation, match="source line 3"):
        check_source("int a;\n// fine\n#include </etc/passwd>\n" + KERNEL)


# --- the second wall: the child on its own, policy bypassed ------------------------------------------
def _raw(sandbox: Sandbox, source: str, flags: list[str]) -> dict:
    return sandbox.run({"op": "compile", "source": source, "kernel_name": "k", "flags": flags, "arch": "sm_90",
                        "cpu_s": FAST.cpu_s, "log_chars": FAST.log_chars}, "k")


def test_the_compiler_child_has_no_environment_to_leak(monkeypatch):
    monkeypatch.setenv("KFORGE_API_KEYS", SECRET)
    monkeypatch.setenv("DATABASE_URL", f"postgresql://kforge:{SECRET}@db/kforge")
    sandbox = Sandbox(FAST)
    try:
        answer = _raw(sandbox, '#include "/proc/self/environ"\n' + KERNEL, compile_options({}, [], "sm_90"))
        environ = Path(f"/proc/{sandbox.pid}/environ").read_bytes()
        cwd = os.readlink(f"/proc/{sandbox.pid}/cwd")
    finally:
        sandbox.close()
    assert SECRET not in str(answer) and environ == b""
    assert cwd.startswith("/tmp") and "kforge-compile-" in cwd and not Path(cwd).exists()  # its own, removed
    record_attack("environment through a bypassed policy", "#include \"/proc/self/environ\" sent to the child "
                  "directly, secrets in the worker's environment", "the child's environment is empty: no secret "
                  "in the answer")


def test_the_compiler_child_cannot_write_files(tmp_path):
    store = tmp_path / "kforge.db"
    store.write_bytes(b"SQLite format 3\x00 the event store")
    before = store.read_bytes()
    sandbox = Sandbox(FAST)
    try:
        for flag in (f"--create-pch={store}", f"--time={store}"):
            answer = _raw(sandbox, KERNEL, [*compile_options({}, [], "sm_90"), flag])
            assert answer.get("ok") is not True or store.read_bytes() == before
    finally:
        sandbox.close()
    assert store.read_bytes() == before
    record_attack("file write through a bypassed policy", "--create-pch and --time aimed at the event store, sent "
                  "to the child directly", "the child's file-size limit is 0: the store is unchanged")


def test_the_compiler_child_can_open_no_file_outside_the_cuda_headers():
    sandbox = Sandbox(FAST)
    try:
        if not sandbox.confined:
            pytest.skip("this kernel has no Landlock: the compile policy is the only wall here")
        answers = [_raw(sandbox, source + KERNEL, compile_options({}, [], "sm_90"))
                   for source in ('#include "/etc/passwd"\n', THRUST_AIMED)]
        fine = _raw(sandbox, "#include <cuda_fp16.h>\n" + KERNEL, compile_options({}, [], "sm_90"))
    finally:
        sandbox.close()
    assert [a["ok"] for a in answers] == [False, False] and fine["ok"]
    assert "Permission denied" in answers[0]["log"] and "root:" not in str(answers)
    assert "cannot open source file" in answers[1]["log"]
    record_attack("host file through a bypassed policy", "#include \"/etc/passwd\" and a thrust header aimed at "
                  "it by macros, sent to the child directly", "Landlock: the child opens files only under the "
                  "CUDA headers, so NVRTC cannot open it")


# --- bombs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("limit", ["cpu", "memory", "wall-clock"])
def test_a_macro_bomb_is_killed_within_its_limit_and_the_next_compile_works(limit):
    limits = {"cpu": CompileLimits(timeout_s=30, cpu_s=2, memory_bytes=8 << 30, log_chars=4096),
              "memory": CompileLimits(timeout_s=30, cpu_s=30, memory_bytes=1024 << 20, log_chars=4096),
              "wall-clock": CompileLimits(timeout_s=2, cpu_s=30, memory_bytes=8 << 30, log_chars=4096)}[limit]
    started = time.monotonic()
    with pytest.raises(CompileError) as killed:
        compile_kernel(MACRO_BOMB + KERNEL, "k", {}, [], "sm_90", limits=limits)
    took = time.monotonic() - started
    expected = {"cpu": "KFORGE_COMPILE_CPU_S", "memory": "out of memory", "wall-clock": "KFORGE_COMPILE_TIMEOUT_S"}
    assert expected[limit] in str(killed.value) + killed.value.log
    assert took < {"cpu": 8, "memory": 20, "wall-clock": 5}[limit]
    assert compile_kernel(KERNEL, "k", {}, [], "sm_90", limits=limits).cubin  # a fresh child serves the next
    record_attack(f"macro bomb ({limit} limit)", f"{len(MACRO_BOMB)}-byte nested macro expansion",
                  f"stopped in {took:.1f} s: {str(killed.value)[:60]}")


def test_nvrtc_never_runs_in_the_calling_process(monkeypatch):
    from shared.adapters.device import nvrtc

    def in_this_process(*_):
        raise AssertionError("NVRTC compiled in the calling process")

    monkeypatch.setattr(nvrtc, "build_cubin", in_this_process)
    monkeypatch.setattr(nvrtc, "ptx_parameter_types", in_this_process)
    assert compile_kernel(KERNEL, "k", {}, [], "sm_90").cubin.startswith(b"\x7fELF")
    assert compiler.parameter_types(KERNEL, "k", {}, [], "sm_90") == ["u64"]


def test_a_huge_log_is_capped():
    # every line an error: NVRTC's log quotes each, so the log is many times the source
    source = KERNEL + "".join(f"__device__ int e{i} = undefined_{i};\n" for i in range(4000))
    with pytest.raises(CompileError) as failed:
        compile_kernel(source, "k", {}, [], "sm_90", limits=FAST)
    assert len(failed.value.log) < FAST.log_chars + 200 and "log cut" in failed.value.log
    record_attack("oversized compile log", f"{len(source) // 1000} KB source of 4,000 errors",
                  f"log capped at {FAST.log_chars} characters (KFORGE_COMPILE_LOG_CHARS)")


# --- a whole job: the bomb becomes an event, the job ends, no secret anywhere ---------------------------
@pytest.fixture
def embedded(tmp_path, monkeypatch):
    import kforge.worker  # noqa: F401  (registers the planner and benchmark Celery tasks)

    monkeypatch.setenv("KFORGE_WEBHOOK_SECRET", "whsec_" + "a2ZvcmdlLXNlY3JldC1rZnMtd2hzZWM=")
    monkeypatch.setenv("KFORGE_COMPILE_CPU_S", "2")
    monkeypatch.setenv("KFORGE_COMPILE_TIMEOUT_S", "10")
    rt = runtime.build(Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None))
    runtime.install(rt)
    yield rt
    runtime.install(None)
    rt.store.close()


def test_a_compile_bomb_submitted_as_the_kernel_is_refused_at_admission(embedded):
    spec = KernelSpec.model_validate(_spec(MACRO_BOMB + KERNEL))
    started = time.monotonic()
    with pytest.raises(AdmissionRefused) as refused:
        submit_job(embedded.store, embedded.bus, spec)
    [error] = refused.value.errors
    assert error.field == "source" and "KFORGE_COMPILE_CPU_S" in error.message
    assert embedded.store.stream_ids() == []
    record_attack("compile bomb as the submitted kernel", "macro bomb submitted as the kernel",
                  f"refused at admission on source, nothing recorded, in {time.monotonic() - started:.1f} s; "
                  "the process that compiled it lives on")


def test_a_compile_bomb_job_ends_with_the_reason_and_leaks_nothing(embedded):
    # The submitted kernel is sound; the bomb is the candidate, which only a worker compiles.
    spec = KernelSpec.model_validate(_spec(strategy={"name": "verify", "candidate": {"source": MACRO_BOMB + KERNEL}}))
    started = time.monotonic()
    job_id = submit_job(embedded.store, embedded.bus, spec)
    embedded.bus.wait_idle()
    events = job_events(embedded.store, job_id)
    types = [e.type for e in events]
    assert "CandidateRejected" in types and "JobFailed" in types
    rejected = next(e for e in events if e.type == "CandidateRejected")
    assert rejected.check == "compile" and "KFORGE_COMPILE_CPU_S" in rejected.reason
    stored = "".join(e.model_dump_json() for e in events)
    assert "a2ZvcmdlLXNlY3JldC1rZnMtd2hzZWM=" not in stored
    record_attack("compile bomb as a job", "macro bomb submitted as the candidate to verify, in-process workers",
                  f"CandidateRejected at compile, JobFailed, in {time.monotonic() - started:.1f} s; "
                  "the process that submitted it lives on")
