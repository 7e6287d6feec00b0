"""A Kernel Tuner script on a real GPU, through kforge.tune_kernel, against Kernel Tuner's own tune_kernel on the
same space: both brute force over vector_add's block sizes. Each runs in a process of its own, as a user runs a
script (Kernel Tuner imported beside kforge's in-process workers misbehaves: bench/tune_vs_kernel_tuner.py).

kforge must measure every configuration, pick Kernel Tuner's best block size or one within noise of it, and
write a cache file that Kernel Tuner itself resumes from, measuring nothing again."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
NOISE = 1.10  # timings of one configuration in separate runs differ by several per cent

SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy
    {import_line}

    kernel_string = """
    __global__ void vector_add(float *c, float *a, float *b, int n) {{
        int i = blockIdx.x * block_size_x + threadIdx.x;
        if (i < n) {{
            c[i] = a[i] + b[i];
        }}
    }}
    """

    if __name__ == "__main__":
        size = 1 << 25
        rng = numpy.random.default_rng(3)
        a = rng.standard_normal(size, dtype=numpy.float32)
        b = rng.standard_normal(size, dtype=numpy.float32)
        c = numpy.zeros_like(b)
        args = [c, a, b, numpy.int32(size)]
        tune_params = {{"block_size_x": [32 * i for i in range(1, 33)]}}
        results, env = tune_kernel("vector_add", kernel_string, size, args, tune_params,
                                   answer=[a + b, None, None, None], cache=sys.argv[1] if len(sys.argv) > 1 else None,
                                   quiet=True{extra})
        json.dump({{"results": [{{"block_size_x": r["block_size_x"], "time": r.get("time"),
                                 "error": str(r["__error__"]) if "__error__" in r else None}} for r in results],
                   "best": env["best_config"]["block_size_x"], "device": env["device_name"]}}, sys.stdout)
''')


def run_script(tmp_path: Path, name: str, import_line: str, extra: str = "", cache: str | None = None) -> dict:
    path = tmp_path / f"{name}.py"
    path.write_text(SCRIPT.format(import_line=import_line, extra=extra))
    # The script runs from its own folder, as a user's would: kforge is found where it is installed, or here.
    path_entries = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "KFORGE_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(path_entries)}
    for setting in ("REDIS_URL", "DATABASE_URL"):
        env.pop(setting, None)
    done = subprocess.run([sys.executable, str(path), *([cache] if cache else [])], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def kernel_tuner_lang() -> str:
    """Kernel Tuner's CUDA backend that runs here: pycuda's (lang CUDA) where it is installed, else cuda-python's."""
    return "CUDA" if importlib.util.find_spec("pycuda") else "NVCUDA"


def times(run: dict) -> dict[int, float]:
    return {r["block_size_x"]: r["time"] for r in run["results"] if r["error"] is None}


def test_a_kernel_tuner_script_on_kforge_finds_kernel_tuners_best_block_size(tmp_path):
    cache = str(tmp_path / "vector_add_cache.json")
    ours = run_script(tmp_path, "on_kforge", "from kforge import tune_kernel", cache=cache)
    theirs = run_script(tmp_path, "on_kernel_tuner", "from kernel_tuner import tune_kernel",
                        extra=f", lang={kernel_tuner_lang()!r}")
    print(f"\nkforge best block size {ours['best']}, Kernel Tuner's {theirs['best']} on {ours['device']}")
    assert ours["device"] == theirs["device"]
    mine, kt = times(ours), times(theirs)
    assert len(mine) == 32, ours["results"]  # every configuration measured and correct
    # The same best block size, or one within noise of the other's best by either's own timings.
    assert (ours["best"] == theirs["best"] or mine[theirs["best"]] <= NOISE * mine[ours["best"]]
            or kt[ours["best"]] <= NOISE * kt[theirs["best"]]), (mine, kt)

    # Kernel Tuner resumes from kforge's cache file: same device name, every configuration already there.
    resumed = run_script(tmp_path, "resumed_by_kernel_tuner", "from kernel_tuner import tune_kernel",
                         extra=f", lang={kernel_tuner_lang()!r}", cache=cache)
    assert times(resumed) == mine
    # And kforge resumes from it too, with no job at all.
    again = run_script(tmp_path, "resumed_by_kforge", "from kforge import tune_kernel", cache=cache)
    assert times(again) == mine and again["best"] == ours["best"]
