"""The cluster finder and the .clust reader: glint's C++ code through the extension glint._glint.

find() gives the same bits as `glint find` on the same frames: the same backends, the first
n_dark frames as dark frames, frame numbers the indices in the array.
"""
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

try:
    from . import _glint
except ImportError as _error:  # the package without its extension: RunFile and plots still work
    _glint = None
    _import_error = str(_error)
else:
    _import_error = ""

__all__ = ["FindResult", "cluster_dtype", "extension_available", "find", "frame_dtype",
           "gpu_unavailable_reason", "read_clust"]


def extension_available():
    """True when glint was built with its Python extension (pybind11-dev, python3-dev)."""
    return _glint is not None


def _extension():
    if _glint is None:
        raise ImportError("glint's C++ extension glint._glint is not available (" + _import_error +
                          "); build glint with pybind11-dev and python3-dev installed")
    return _glint


def gpu_unavailable_reason():
    """Why backend="gpu" cannot run here ("built without CUDA", "no CUDA device: ..."), or ""
    when it can."""
    return _extension().gpu_unavailable_reason()


def cluster_dtype(cluster_size=3, values=np.int32):
    """The clusters' structured dtype: frame_number u64, x u16 (column), y u16 (row) of the
    centre, data (S, S) int32 (ADU) or float32 (keV, calibrated JUNGFRAU frames), row-major."""
    s = int(cluster_size)
    return np.dtype([("frame_number", "<u8"), ("x", "<u2"), ("y", "<u2"),
                     ("data", np.dtype(values).newbyteorder("<"), (s, s))])


def frame_dtype(gain_counts=False, masked=False):
    """The per-frame records of find(): the fields of a run file's /entry/frames that the finder
    decides (JUNGFRAU frames: also gain_switched and gain_invalid; with a pixel mask:
    masked_clusters)."""
    fields = [("frame_number", "<u8"), ("cluster_offset", "<u8"), ("n_clusters", "<u4"),
              ("flags", "u1")]
    if gain_counts:
        fields += [("gain_switched", "<u4"), ("gain_invalid", "<u4")]
    if masked:
        fields += [("masked_clusters", "<u4")]
    return np.dtype(fields)


def _structured(columns, dtype):
    n = len(next(iter(columns.values())))
    out = np.empty(n, dtype=dtype)
    for name in dtype.names:
        out[name] = columns[name]
    return out


def _clusters(columns):
    data = columns["data"]
    return _structured(columns, cluster_dtype(data.shape[1], data.dtype))


@dataclass
class FindResult:
    """What find() found. Items are also reachable as result["clusters"] etc.

    clusters        structured array (cluster_dtype): the data frames' clusters, in frame order,
                    raster order of the centres within a frame (as /entry/clusters)
    frames          structured array (frame_dtype): one row per frame, dark frames first (flags
                    2), then the data frames (flags 0) (as /entry/frames)
    pedestal, noise float64 (rows, cols): the pedestal mean and rms noise at the end (as
                    /entry/pedestal/end_mean, end_noise)
    start_pedestal, start_noise: after the dark frames (as start_mean, start_noise)
    pedestal_state  dict of sum, sum2 (float64) and count (uint32): the finder's tracking state
                    (as end_sum, end_sum2, end_count)
    calibration_pedestal: calibrated JUNGFRAU frames: the ADC pedestal of G0, G1, G2 (3, rows,
                    cols); else None
    pixel_mask      with a mask: the mask applied, uint32 (rows, cols) NXdetector bits (as
                    /entry/instrument/detector/pixel_mask); else None
    masked_clusters the clusters the mask removed (as /entry@masked_clusters)
    backend         the finder that ran, e.g. "cpu (16 threads)"
    units           "ADU", or "keV" for calibrated frames
    """
    clusters: np.ndarray
    frames: np.ndarray
    pedestal: np.ndarray
    noise: np.ndarray
    start_pedestal: np.ndarray
    start_noise: np.ndarray
    pedestal_state: dict = field(default_factory=dict)
    calibration_pedestal: Optional[np.ndarray] = None
    pixel_mask: Optional[np.ndarray] = None
    masked_clusters: int = 0
    backend: str = ""
    units: str = "ADU"

    def __getitem__(self, name):
        return getattr(self, name)

    def keys(self):
        return [f for f in self.__dataclass_fields__]


def find(frames, n_dark, n_sigma=5.0, cluster_size=3, pedestal_window=1000, backend="auto",
         threads=0, batch=256, detector="generic", gain_file="", pedestal_file="", hg0=False,
         mask=None, mask_from_dark=False, noisy_factor=None, modules=(1, 1),
         module_orientation="normal"):
    """Finds photon clusters in `frames`, as `glint find` does.

    frames           numpy uint16 array (N, rows, cols): raw detector frames; the first n_dark
                     are dark (pedestal) frames, the rest are searched. Frame numbers are the
                     indices in the array.
    n_sigma          photon threshold in noise rms
    cluster_size     S: 3, 5, 7 or 9
    pedestal_window  the pedestal's running window N (glint find: 1000); n_dark must be >= it
    backend          "auto" (the GPU when usable, else the CPU), "cpu" (multi-threaded),
                     "reference" (the single-threaded reference), "gpu" (raises RuntimeError
                     with the reason where no GPU backend can run: gpu_unavailable_reason())
    threads          CPU threads, 0 = all cores
    batch            frames per finder batch (results do not depend on it)
    detector         "generic" (pixels are values) or "jungfrau" (gain bits 15:14 over a 14-bit
                     ADC); with gain_file (PSI module gain file) the frames are calibrated to keV
                     and the clusters' data is float32; pedestal_file (G1/G2 pedestals) and hg0
                     as `glint find --pedestal-file/--hg0`
    mask             a pixel mask (rows, cols) of NXdetector pixel_mask bits (non-negative
                     integers; any bit set masks the pixel): clusters centred on a masked pixel
                     are removed and counted, as `glint find --mask`
    mask_from_dark   also mask dead and noisy pixels found in the dark frames (JUNGFRAU: pixels
                     out of G0 in a dark frame), as `glint find --mask-from-dark`;
                     noisy_factor (5): noisy is noise > noisy_factor x the median noise
    modules          (x, y): the frames are x by y modules side by side and stacked, each with
                     its own pedestal and finder, as `glint find --modules X,Y` (clusters in
                     image coordinates, module by module within a frame)
    module_orientation  how each module is mounted, one value for all or a sequence with one
                     per module (row-major): "normal", "flip_rows" (upside down), "flip_cols",
                     "rotate_180", as `glint find --module-orientation`. The frames hold each
                     module as its ports send it; the clusters (x, y and data), the pedestal and
                     the mask show it flipped
    Every backend gives the same bits. The GIL is released while the finder runs.
    Returns a FindResult. Raises ValueError for bad arguments, naming the argument.
    """
    ext = _extension()
    arr = np.asarray(frames)
    try:
        modules_x, modules_y = (int(v) for v in modules)
    except (TypeError, ValueError):
        raise ValueError(f"modules {modules!r}: expected (x, y), two positive integers") from None
    if modules_x < 1 or modules_y < 1:
        raise ValueError(f"modules {modules!r}: expected (x, y), two positive integers")
    orientation = ([module_orientation] if isinstance(module_orientation, str)
                   else [str(v) for v in module_orientation])
    if noisy_factor is not None and not mask_from_dark:
        raise ValueError("noisy_factor needs mask_from_dark=True (noisy pixels are found in the "
                         "dark frames)")
    noisy_factor = 5.0 if noisy_factor is None else float(noisy_factor)
    if not 1.0 <= noisy_factor <= 1e6:
        raise ValueError(f"noisy_factor {noisy_factor}: allowed are 1 to 1e6")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype.kind not in "iub" or (mask.dtype.kind == "i" and mask.size and
                                             mask.min() < 0):
            raise ValueError("mask: non-negative integers (NXdetector pixel_mask bits) expected, "
                             f"got {mask.dtype}" + (" with negative values"
                                                    if mask.dtype.kind == "i" else ""))
        mask = mask.astype(np.uint32)
    out = ext.find(arr, int(n_dark), float(n_sigma), int(cluster_size), int(pedestal_window),
                   str(backend), int(threads), int(batch), str(detector), str(gain_file),
                   str(pedestal_file), bool(hg0), mask, bool(mask_from_dark), noisy_factor,
                   modules_x, modules_y, orientation)
    frame_columns = out["frames"]
    return FindResult(
        clusters=_clusters(out["clusters"]),
        frames=_structured(frame_columns, frame_dtype("gain_switched" in frame_columns,
                                                      "masked_clusters" in frame_columns)),
        pedestal=out["pedestal"],
        noise=out["noise"],
        start_pedestal=out["start_pedestal"],
        start_noise=out["start_noise"],
        pedestal_state={"sum": out["pedestal_sum"], "sum2": out["pedestal_sum2"],
                        "count": out["pedestal_count"]},
        calibration_pedestal=out.get("calibration_pedestal"),
        pixel_mask=out.get("pixel_mask"),
        masked_clusters=int(out.get("masked_clusters", 0)),
        backend=out["backend"],
        units=out["units"],
    )


def read_clust(path, cluster_size=3, values=np.int32, records=False):
    """Reads an aare .clust file (glint find --clust) with glint's C++ reader.

    The file does not record S: cluster_size must be the one it was written with. values=
    np.float32 reinterprets the stored 4-byte values as floats (the clusters of calibrated frames).
    Returns a structured array (cluster_dtype). Frame numbers are the int32 stored, as aare keeps
    them (a negative one comes back sign-extended). With records=True, returns (clusters,
    frames) where frames has one row per record (frame_number, n_clusters), also for frames
    without clusters.
    Raises FileNotFoundError for a missing file, RuntimeError naming the byte offset of a
    truncated or inconsistent file.
    """
    values = np.dtype(values)
    if values not in (np.dtype(np.int32), np.dtype(np.float32)):
        raise ValueError(f"values: int32 or float32, got {values}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    out = _extension().read_clust(str(path), int(cluster_size))
    if values == np.float32:
        out["data"] = out["data"].view(np.float32)
    clusters = _clusters(out)
    if not records:
        return clusters
    frames = np.empty(len(out["record_frame_number"]),
                      dtype=[("frame_number", "<u8"), ("n_clusters", "<u8")])
    frames["frame_number"] = out["record_frame_number"]
    frames["n_clusters"] = out["record_n_clusters"]
    return clusters, frames
