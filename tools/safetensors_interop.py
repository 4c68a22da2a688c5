"""Proves that hybrid's safetensors files load in Python's `safetensors` package and that files
written there load in hybrid. Called by tests/core/safetensors_python_test.cpp:
  python3 tools/safetensors_interop.py check FILE   # the file hybrid wrote: names, dtypes, values
  python3 tools/safetensors_interop.py write FILE   # a file for hybrid to read back
Values follow one formula on both sides: element i of tensor k is (i % 97) * 0.25 - k.
Installs `safetensors` and `numpy` from PyPI when they are missing (the product needs no Python)."""
import subprocess
import sys


def ensure(pkg):
    try:
        __import__(pkg)
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", pkg], check=True)


ensure("numpy")
ensure("safetensors")
import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

SPECS = [("a.f32", np.float32, (3, 5)), ("b.f64", np.float64, (7,)), ("c.i32", np.int32, (2, 3)),
         ("d.i64", np.int64, (4,)), ("e.u16", np.uint16, (2, 2, 2))]


def expected(k, dtype, shape):
    i = np.arange(int(np.prod(shape)), dtype=np.float64)
    v = (i % 97) * 0.25 - k
    if np.issubdtype(dtype, np.integer):
        v = np.abs(np.floor(v))
    return v.astype(dtype).reshape(shape)


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "write":
        save_file({n: expected(k, t, s) for k, (n, t, s) in enumerate(SPECS)}, path, metadata={"format": "python"})
        return
    with safe_open(path, framework="np") as f:
        assert f.metadata() == {"format": "hybrid", "step": "7"}, f.metadata()
        assert sorted(f.keys()) == sorted(n for n, _, _ in SPECS), f.keys()
        for k, (n, t, s) in enumerate(SPECS):
            got = f.get_tensor(n)
            assert got.dtype == t and got.shape == s, (n, got.dtype, got.shape)
            assert np.array_equal(got, expected(k, t, s)), n
    print("python safetensors: loaded", len(SPECS), "tensors and the metadata of", path)


main()
