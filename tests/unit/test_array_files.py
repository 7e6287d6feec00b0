""".npy files a spec names (data, answer): read without unpickling, bounded by their header and by
KFORGE_MAX_ARRAY_BYTES, checked against the argument's dtype and shape, and refused once their content changed."""
import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import SpecError, load_spec
from shared.adapters.array_files import ArrayFileError, array_file, array_file_errors, read_array
from shared.adapters.inputs import make_arrays

KERNEL = 'extern "C" __global__ void gather(float *out, const float *x, const int *idx, int n) {}\n'


def write_spec(folder: Path, x: str = "data: data/x.npy", idx: str = "range: [0, n]", out: str = "", n: int = 64) -> Path:
    (folder / "gather.cu").write_text(KERNEL)
    spec = folder / "gather.yaml"
    spec.write_text(f"""kernel_name: gather
source_file: gather.cu
sizes: {{n: {n}}}
args:
  - {{name: out, dtype: float32, shape: [n], role: out{', ' + out if out else ''}}}
  - {{name: x, dtype: float32, shape: [n], {x}}}
  - {{name: idx, dtype: int32, shape: [n], {idx}}}
  - {{name: n, dtype: int32, value: n}}
""")
    return spec


def saved(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, array)
    return path


def load_errors(spec: Path) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        load_spec(None, spec)
    return {e.field: e.message for e in info.value.errors}


def test_data_relative_to_the_spec_file_is_recorded_with_its_hash_and_used(tmp_path, monkeypatch):
    x = np.arange(64, dtype=np.float32) / 7
    saved(tmp_path / "data" / "x.npy", x)
    spec_file = write_spec(tmp_path)
    monkeypatch.chdir("/")  # paths are the spec file's, not the working directory's
    spec = load_spec(None, spec_file)
    assert spec.args[1].data.path == str(tmp_path / "data" / "x.npy")
    assert spec.args[1].data.sha256 == hashlib.sha256((tmp_path / "data" / "x.npy").read_bytes()).hexdigest()
    arrays = make_arrays(spec, 1)
    assert arrays["x"].tobytes() == x.tobytes()
    assert arrays["x"].tobytes() == make_arrays(spec, 2)["x"].tobytes()  # fixed: the same under every seed
    assert arrays["idx"].min() >= 0 and arrays["idx"].max() < 64


def test_an_answer_is_checked_like_data(tmp_path):
    saved(tmp_path / "data" / "x.npy", np.zeros(64, np.float32))
    saved(tmp_path / "y.npy", np.zeros(65, np.float32))
    saved(tmp_path / "data" / "idx.npy", np.zeros(64, np.int32))
    errors = load_errors(write_spec(tmp_path, idx="data: data/idx.npy", out="answer: y.npy"))
    assert list(errors) == ["args[0].answer"] and "has shape (65,), the argument (64,)" in errors["args[0].answer"]


class _Trap:
    """Unpickling this writes a file: the proof that something ran code from the data file."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path(self.path).write_text, ("unpickled",))


def test_a_pickle_is_never_unpickled(tmp_path):
    trap = tmp_path / "trap"
    path = tmp_path / "data" / "x.npy"
    path.parent.mkdir()
    np.save(path, np.array([_Trap(str(trap))] * 64, dtype=object), allow_pickle=True)
    errors = load_errors(write_spec(tmp_path))
    assert "holds Python objects, which only unpickling reads, and kforge never unpickles" in errors["args[1].data"]
    assert not trap.exists()
    with pytest.raises(ArrayFileError, match="not a .npy file"):  # nor is a bare pickle read
        path.write_bytes(pickle.dumps(_Trap(str(trap))))
        array_file(path, 1 << 20)
    assert not trap.exists()


@pytest.mark.parametrize("array, says", [
    (np.zeros(64, np.float64), "holds float64 values (<f8), the argument is float32: save it with .astype('<f4')"),
    (np.zeros(64, ">f4"), "holds >f4 values"),
    (np.zeros((8, 8), np.float32), "has shape (8, 8), the argument (64,) at the spec's sizes"),
    (np.zeros(64, [("a", np.float32)]), "holds records ([('a', '<f4')])"),
])
def test_dtype_and_shape_must_be_the_arguments(tmp_path, array, says):
    saved(tmp_path / "data" / "x.npy", array)
    assert says in load_errors(write_spec(tmp_path))["args[1].data"]


def test_a_missing_file_and_a_file_that_is_not_npy(tmp_path):
    assert "does not exist" in load_errors(write_spec(tmp_path))["args[1].data"]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.npy").write_text("x = 1\n")
    assert "is not a .npy file kforge reads" in load_errors(write_spec(tmp_path))["args[1].data"]


def test_more_bytes_than_a_job_may_use_are_refused_before_they_are_read(tmp_path, monkeypatch):
    path = saved(tmp_path / "data" / "x.npy", np.zeros(64, np.float32))
    with pytest.raises(ArrayFileError, match=r"holds 256 bytes, above the 255 a job may use \(KFORGE_MAX_ARRAY_BYTES\)"):
        array_file(path, 255)
    monkeypatch.setenv("KFORGE_MAX_ARRAY_BYTES", "255")
    assert "KFORGE_MAX_ARRAY_BYTES" in load_errors(write_spec(tmp_path))["args[1].data"]


@pytest.mark.parametrize("change", [lambda b: b[:-4], lambda b: b + b"\0" * 4])
def test_a_file_longer_or_shorter_than_its_header_says_is_refused(tmp_path, change):
    path = saved(tmp_path / "x.npy", np.zeros(64, np.float32))
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(ArrayFileError, match="bytes where its header announces 384"):
        array_file(path, 1 << 20)


def test_a_file_changed_after_the_spec_was_loaded_is_refused_where_it_is_used(tmp_path):
    path = saved(tmp_path / "data" / "x.npy", np.zeros(64, np.float32))
    spec = load_spec(tmp_path / "gather.cu", write_spec(tmp_path))
    assert array_file_errors(spec) == []
    saved(path, np.ones(64, np.float32))  # same dtype and shape: only the content tells
    with pytest.raises(ArrayFileError, match=r"changed since the job was submitted \(sha256 .* then, .* now\): put "
                                             "the original back, or submit the job again"):
        make_arrays(spec, 1)
    path.unlink()
    assert [e.field for e in array_file_errors(spec)] == ["args[1].data"]


def test_a_fortran_ordered_file_reads_as_the_same_array(tmp_path):
    matrix = np.arange(12, dtype=np.int32).reshape(3, 4)
    path = saved(tmp_path / "m.npy", np.asfortranarray(matrix))
    loaded = read_array(array_file(path, 1 << 20), "int32", (3, 4))
    assert np.array_equal(loaded, matrix) and loaded.flags.c_contiguous
