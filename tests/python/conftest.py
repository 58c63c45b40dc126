"""Fixtures of the Python package's tests (tests/python).

The package is imported from PYTHONPATH (scripts/test.sh: build/python), else from build/python
of this checkout; the glint executable from GLINT_BIN (default build/bin). Tests that need the
C++ extension, the executable or a GPU skip cleanly without them.
"""
import importlib
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _import_glint():
    try:
        return importlib.import_module("glint")
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "build", "python"))
    try:
        return importlib.import_module("glint")
    except ImportError as e:
        pytest.skip(f"the glint package is not importable ({e}); PYTHONPATH=build/python")


@pytest.fixture(scope="session")
def glint():
    return _import_glint()


@pytest.fixture(scope="session")
def ext(glint):
    """The package with its C++ extension (find, read_clust)."""
    if not glint.extension_available():
        pytest.skip("glint was built without its Python extension (pybind11-dev, python3-dev)")
    return glint


@pytest.fixture(scope="session")
def glint_bin():
    """The glint executable."""
    path = os.path.join(os.environ.get("GLINT_BIN", os.path.join(REPO, "build", "bin")), "glint")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no glint executable at {path} (GLINT_BIN)")
    return path


_held_ports = []  # the sockets that keep free_port's ports this test session's


def free_port():
    """A TCP port on 127.0.0.1 held until the test session ends, so that nothing else on the host
    (another test program, a connection's ephemeral port) takes it before the glintd or `glint sim`
    the test starts binds it: the kernel picks a port no socket has, a socket stays bound to it,
    and SO_REUSEADDR set after that bind lets ZeroMQ's listener (which sets it too) bind there."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _held_ports.append(s)
    return s.getsockname()[1]


def run_glint(glint_bin, *args, check=True):
    p = subprocess.run([glint_bin, *map(str, args)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"glint {' '.join(map(str, args))} exited {p.returncode}:\n"
                             f"{p.stdout}{p.stderr}")
    return p


def read_frames(path, dataset="/data"):
    import h5py
    with h5py.File(path, "r") as f:
        return f[dataset][()]


@pytest.fixture(scope="session")
def raw_run(glint_bin, tmp_path_factory):
    """Frames from glint synth (1000 dark + 300 photon frames of 48 x 40) and glint find's run
    file and .clust file of them (CPU backend, 3 x 3 clusters, n_sigma 5)."""
    d = tmp_path_factory.mktemp("raw_run")
    frames = d / "frames.h5"
    run_glint(glint_bin, "synth", "-q", "-o", frames, "--dark", 1000, "--frames", 300,
              "--rows", 48, "--cols", 40, "--photons", 25, "--seed", 7)
    run = d / "run.h5"
    clust = d / "run.clust"
    run_glint(glint_bin, "find", "-q", "-i", frames, "--dark", 1000, "--backend", "cpu",
              "--output", run, "--clust", clust)
    return {"frames": frames, "run": run, "clust": clust, "dir": d, "n_dark": 1000,
            "n_frames": 1300, "shape": (48, 40)}


@pytest.fixture(scope="session")
def raw_frames(raw_run):
    frames = read_frames(raw_run["frames"])
    assert frames.dtype == np.uint16 and frames.shape == (1300, 48, 40)
    return frames
