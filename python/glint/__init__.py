"""glint's Python package: the exact cluster finder, run files and plots (docs/python.md).

    import glint
    result = glint.find(frames, n_dark=1000)          # numpy uint16 (N, rows, cols)
    with glint.RunFile("run_000001.h5") as run:
        for clusters in run.clusters(chunk=100_000):   # numpy structured arrays
            ...
        counts = run.hitmap
    clusters = glint.read_clust("run.clust")

find() and read_clust() need the C++ extension (glint._glint, built with pybind11 when glint is
built); RunFile and the plots (python3 -m glint.plot, `glint plot`) need only h5py and
matplotlib.
"""
from .finder import (
    FindResult,
    cluster_dtype,
    extension_available,
    find,
    frame_dtype,
    gpu_unavailable_reason,
    read_clust,
)
from .run_file import Module, Product, ProductMissing, RunFile

__all__ = [
    "FindResult",
    "Module",
    "Product",
    "ProductMissing",
    "RunFile",
    "cluster_dtype",
    "extension_available",
    "find",
    "frame_dtype",
    "gpu_unavailable_reason",
    "read_clust",
]
