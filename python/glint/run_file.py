"""Reading glint's HDF5 run files with h5py (the layout: docs/file-layout.md).

A run file is written in SWMR mode: RunFile opens it for SWMR reading (also while glintd writes
it, or after a crash) and reads only the rows /entry/flushed_rows counts as durable.
"""
import os

import h5py
import numpy as np

__all__ = ["Module", "Product", "ProductMissing", "RunFile", "PRODUCT_NAMES"]

# The science products a run may hold, each an NXdata group under /entry.
PRODUCT_NAMES = ("hitmap", "energy_image", "hitmap_slices", "spectrum", "pixel_spectra", "eta2",
                 "eta3", "subpixel_image")

FRAME_FIELDS = (("frame_number", "<u8"), ("timestamp", "<u8"), ("cluster_offset", "<u8"),
                ("n_clusters", "<u4"), ("flags", "u1"))
OPTIONAL_FRAME_FIELDS = (("gain_switched", "<u4"), ("gain_invalid", "<u4"),
                         ("masked_clusters", "<u4"))


class ProductMissing(KeyError):
    """A dataset or product the run file does not hold; the message names it."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _text(value[()])
    return value


ORIENTATIONS = ("normal", "flip_rows", "flip_cols", "rotate_180")


class Module:
    """One module of the detector (/entry/instrument/detector/module_<id>, NXdetector_module):
    `id`, `data_origin` (row, col) of the module in the file's image, `data_size` (rows, cols),
    `detector_origin` (row, col) of the module in the whole detector, `orientation` how the
    image shows the module's native pixels (normal, flip_rows: upside down, flip_cols: mirrored
    left-right, rotate_180; docs/modules.md)."""

    def __init__(self, id, data_origin, data_size, detector_origin, orientation="normal"):
        self.id = id
        self.data_origin = data_origin
        self.data_size = data_size
        self.detector_origin = detector_origin
        self.orientation = orientation

    @property
    def flips_rows(self):
        return self.orientation in ("flip_rows", "rotate_180")

    @property
    def flips_cols(self):
        return self.orientation in ("flip_cols", "rotate_180")

    def __eq__(self, other):
        return isinstance(other, Module) and vars(self) == vars(other)

    def __repr__(self):
        return (f"Module({self.id}, data_origin {self.data_origin}, data_size {self.data_size}, "
                f"detector_origin {self.detector_origin}, orientation {self.orientation})")


class Product:
    """One NXdata group: `signal` (the data, numpy), `axes` (name -> numpy array, in the order
    of the group's axes attribute), `attrs` (the group's attributes, text decoded), `units` (the
    signal's units attribute, "" where none), `axis_units` (axis name -> its units attribute,
    for the axes that have one)."""

    def __init__(self, name, signal, axes, attrs, units, axis_units=None):
        self.name = name
        self.signal = signal
        self.axes = axes
        self.attrs = attrs
        self.units = units
        self.axis_units = axis_units or {}

    def __repr__(self):
        return (f"Product({self.name!r}, signal {self.signal.dtype} {self.signal.shape}, "
                f"axes {list(self.axes)})")


class RunFile:
    """A glint run file, opened read-only (SWMR reading where the file allows it).

        with glint.RunFile("runs/run_000001.h5") as run:
            print(run.n_frames, run.n_clusters, run.shape)
            for clusters in run.clusters(chunk=100_000):
                ...

    Raises FileNotFoundError for a missing file, OSError for a file HDF5 cannot open, ValueError
    for an HDF5 file that is not a run file.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"{self.path}: no such file")
        try:
            self._file = h5py.File(self.path, "r", libver="latest", swmr=True)
            self.swmr = True
        except OSError:
            # Files not written in the latest format cannot be opened for SWMR reading.
            try:
                self._file = h5py.File(self.path, "r")
            except OSError as e:
                raise OSError(f"{self.path}: cannot be opened as an HDF5 file ({e})") from None
            self.swmr = False
        if "entry" not in self._file or "frames" not in self._file["entry"]:
            self._file.close()
            raise ValueError(f"{self.path}: not a glint run file (no /entry/frames)")
        self._entry = self._file["entry"]

    # --- file -------------------------------------------------------------------------------

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def file(self):
        """The h5py.File, for what this class does not offer."""
        return self._file

    def _dataset(self, path):
        try:
            ds = self._file[path]
        except KeyError:
            raise ProductMissing(f"{self.path}: no {path}") from None
        if self.swmr:
            ds.refresh()
        return ds

    def _flushed(self):
        if "flushed_rows" not in self._entry:
            return None
        rows = self._dataset("/entry/flushed_rows")[()]
        return int(rows[0]), int(rows[1])

    # --- tables -----------------------------------------------------------------------------

    def _frame_fields(self):
        group = self._entry["frames"]
        fields = list(FRAME_FIELDS)
        fields += [f for f in OPTIONAL_FRAME_FIELDS if f[0] in group]
        return fields

    @property
    def n_frames(self):
        """Frame rows readable: the shortest /entry/frames column, at most the flushed rows."""
        lengths = [self._dataset(f"/entry/frames/{name}").shape[0]
                   for name, _ in self._frame_fields()]
        flushed = self._flushed()
        if flushed is not None:
            lengths.append(flushed[0])
        return min(lengths)

    @property
    def n_clusters(self):
        """Cluster rows readable: the shortest /entry/clusters column, at most the flushed
        rows."""
        names = ("frame_number", "x", "y", "data") + (("module",) if self.has_modules else ())
        lengths = [self._dataset(f"/entry/clusters/{name}").shape[0] for name in names]
        flushed = self._flushed()
        if flushed is not None:
            lengths.append(flushed[1])
        return min(lengths)

    @property
    def cluster_size(self):
        return int(self._dataset("/entry/clusters/data").shape[1])

    @property
    def has_modules(self):
        """Whether the file records its modules (/entry/clusters/module: detector.modules or
        detector.placement set; docs/modules.md)."""
        return "module" in self._entry["clusters"]

    def cluster_dtype(self):
        """The structured dtype of clusters(): frame_number u64, x u16, y u16, data (S, S) int32
        (float32 for calibrated runs), as glint.find's clusters; in a file that records modules
        also module u16 (x, y are then local to the module, see clusters())."""
        data = self._dataset("/entry/clusters/data")
        s = int(data.shape[1])
        fields = [("frame_number", "<u8"), ("x", "<u2"), ("y", "<u2"),
                  ("data", data.dtype.newbyteorder("<"), (s, s))]
        if self.has_modules:
            fields.append(("module", "<u2"))
        return np.dtype(fields)

    def frame_dtype(self):
        return np.dtype(self._frame_fields())

    def _rows(self, group, names, dtype, total, chunk):
        if chunk < 1:
            raise ValueError(f"chunk: must be at least 1, got {chunk}")
        datasets = {name: self._dataset(f"/entry/{group}/{name}") for name in names}
        for start in range(0, total, chunk):
            stop = min(start + chunk, total)
            out = np.empty(stop - start, dtype=dtype)
            for name, ds in datasets.items():
                out[name] = ds[start:stop]
            yield out

    def frames(self, chunk=1 << 20):
        """Iterates over /entry/frames in structured arrays of up to `chunk` rows (the fields of
        frame_dtype(): frame_number, timestamp, cluster_offset, n_clusters, flags, and
        gain_switched, gain_invalid, masked_clusters where the run has them)."""
        dtype = self.frame_dtype()
        return self._rows("frames", dtype.names, dtype, self.n_frames, int(chunk))

    def clusters(self, chunk=1 << 20, coordinates="file"):
        """Iterates over /entry/clusters in structured arrays of up to `chunk` rows
        (cluster_dtype()). `coordinates`: "file" (x, y and data as stored: local and native to
        the module in a file that records modules), "image" (in the file's image, frame_shape)
        or "detector" (in the whole detector, detector_shape); in both, a module mounted flipped
        (Module.orientation) has x, y and each cluster's data flipped as the image shows it."""
        if coordinates not in ("file", "image", "detector"):
            raise ValueError(f"coordinates '{coordinates}': allowed are file, image, detector")
        dtype = self.cluster_dtype()
        rows = self._rows("clusters", dtype.names, dtype, self.n_clusters, int(chunk))
        if coordinates == "file":
            return rows
        return (self._shift(part, coordinates) for part in rows)

    def _shift(self, part, coordinates):
        """`part` with x, y moved from the module's coordinates to the image's or detector's."""
        key = "data_origin" if coordinates == "image" else "detector_origin"
        modules = self.modules
        ids = part["module"] if self.has_modules else np.zeros(len(part), np.uint16)
        row = np.zeros(max(m.id for m in modules) + 1, np.int64)
        col = np.zeros_like(row)
        for m in modules:
            row[m.id], col[m.id] = getattr(m, key)
        out = part.copy()
        x = part["x"].astype(np.int64)
        y = part["y"].astype(np.int64)
        for m in modules:
            if m.orientation == "normal":
                continue
            mine = ids == m.id
            if m.flips_rows:
                y[mine] = m.data_size[0] - 1 - y[mine]
                out["data"][mine] = out["data"][mine][:, ::-1, :]
            if m.flips_cols:
                x[mine] = m.data_size[1] - 1 - x[mine]
                out["data"][mine] = out["data"][mine][:, :, ::-1]
        out["x"] = x + col[ids]
        out["y"] = y + row[ids]
        return out

    def cluster_energy(self, kind="sum"):
        """/entry/clusters/energy (kind "sum": the S x S sum) or energy_2x2 (kind "2x2": the
        largest 2 x 2 quadrant), one value per readable cluster row."""
        names = {"sum": "energy", "2x2": "energy_2x2"}
        if kind not in names:
            raise ValueError(f"kind '{kind}': allowed are sum, 2x2")
        return self._dataset(f"/entry/clusters/{names[kind]}")[:self.n_clusters]

    # --- run metadata -----------------------------------------------------------------------

    @property
    def shape(self):
        """(rows, cols) of the frames."""
        det = self._file["/entry/instrument/detector"]
        rows, cols = (int(v) for v in det.attrs["frame_shape"])
        return rows, cols

    @property
    def detector_shape(self):
        """(rows, cols) of the whole detector (the file's own shape where it records none)."""
        det = self._file["/entry/instrument/detector"]
        if "detector_shape" in det.attrs:
            return tuple(int(v) for v in det.attrs["detector_shape"])
        return self.shape

    @property
    def detector_origin(self):
        """(row, col) of the file's image in the whole detector ((0, 0) where it records
        none)."""
        det = self._file["/entry/instrument/detector"]
        if "detector_origin" in det.attrs:
            return tuple(int(v) for v in det.attrs["detector_origin"])
        return (0, 0)

    @property
    def modules(self):
        """The modules (Module), in id order: the NXdetector_module groups of
        /entry/instrument/detector; a file that records none is one module, id 0, the whole
        image."""
        det = self._file["/entry/instrument/detector"]
        out = []
        for name, item in det.items():
            if not name.startswith("module_") or not isinstance(item, h5py.Group):
                continue
            if _text(item.attrs.get("NX_class")) != "NXdetector_module":
                continue
            orientation = _text(item.attrs.get("orientation", "normal"))
            if orientation not in ORIENTATIONS:
                raise ValueError(f"{self.path}: {item.name}: @orientation '{orientation}' is "
                                   f"none of {', '.join(ORIENTATIONS)}")
            out.append(Module(int(item.attrs["module_id"]),
                              tuple(int(v) for v in item["data_origin"][()]),
                              tuple(int(v) for v in item["data_size"][()]),
                              tuple(int(v) for v in item.attrs["detector_origin"]),
                              orientation))
        if not out:
            out.append(Module(0, (0, 0), self.shape, self.detector_origin))
        return sorted(out, key=lambda m: m.id)

    @property
    def detector(self):
        """The attributes of /entry/instrument/detector (n_sigma, cluster_size, backend, ...)."""
        return {k: _text(v) for k, v in self._file["/entry/instrument/detector"].attrs.items()}

    @property
    def attrs(self):
        """The attributes of /entry (start_time, end_time, end_reason, ...)."""
        return {k: _text(v) for k, v in self._entry.attrs.items()}

    @property
    def config(self):
        """The run's effective configuration (YAML text)."""
        return _text(self._dataset("/entry/config")[()])

    def pedestal(self, which="end"):
        """The pedestal mean (rows, cols) float64 when data taking started ("start") or at the
        end of the run ("end"; NaN in a run that never closed)."""
        return self._pedestal_image(which, "mean")

    def noise(self, which="end"):
        """The pedestal rms noise (rows, cols) float64, "start" or "end" as pedestal()."""
        return self._pedestal_image(which, "noise")

    def _pedestal_image(self, which, what):
        if which not in ("start", "end"):
            raise ValueError(f"which '{which}': allowed are start, end")
        return self._dataset(f"/entry/pedestal/{which}_{what}")[()]

    @property
    def pixel_mask(self):
        """/entry/instrument/detector/pixel_mask (rows, cols) uint32, or None without a mask."""
        path = "/entry/instrument/detector/pixel_mask"
        return self._dataset(path)[()] if path in self._file else None

    # --- products ---------------------------------------------------------------------------

    def products(self):
        """The names of the products (NXdata groups under /entry) the file holds."""
        out = []
        for name, item in self._entry.items():
            if isinstance(item, h5py.Group) and _text(item.attrs.get("NX_class")) == "NXdata":
                out.append(name)
        return sorted(out, key=lambda n: (PRODUCT_NAMES.index(n) if n in PRODUCT_NAMES
                                          else len(PRODUCT_NAMES), n))

    def _group(self, name):
        group = self._entry.get(name)
        if not isinstance(group, h5py.Group) or _text(group.attrs.get("NX_class")) != "NXdata":
            held = ", ".join(self.products()) or "none"
            raise ProductMissing(f"{self.path}: no /entry/{name} (products in the file: {held})")
        return group

    def product(self, name):
        """The NXdata group /entry/NAME as a Product (signal, axes, attrs, units). Raises
        ProductMissing naming the group and what the file holds when it is absent."""
        group = self._group(name)
        attrs = {k: _text(v) for k, v in group.attrs.items()}
        signal_name = attrs.get("signal")
        if signal_name not in group:
            raise ProductMissing(f"{self.path}: /entry/{name} has no signal dataset "
                                 f"'{signal_name}'")
        signal_ds = self._dataset(f"/entry/{name}/{signal_name}")
        signal = signal_ds[()]
        axes, axis_units = {}, {}
        axes_attr = attrs.get("axes", [])
        if isinstance(axes_attr, str):
            axes_attr = [axes_attr]
        for axis in axes_attr:
            axis = _text(axis)
            if axis in group and axis != ".":
                ds = self._dataset(f"/entry/{name}/{axis}")
                axes[axis] = ds[()]
                if "units" in ds.attrs:
                    axis_units[axis] = _text(ds.attrs["units"])
        units = _text(signal_ds.attrs.get("units", ""))
        return Product(name, signal, axes, attrs, units, axis_units)

    def _signal(self, name, dataset):
        self._group(name)  # the clear error when the group is absent
        return self._dataset(f"/entry/{name}/{dataset}")[()]

    @property
    def hitmap(self):
        """/entry/hitmap/counts (rows, cols) uint64."""
        return self._signal("hitmap", "counts")

    @property
    def energy_image(self):
        """/entry/energy_image/energy (rows, cols) float64 (ADU, or keV calibrated)."""
        return self._signal("energy_image", "energy")

    @property
    def spectrum(self):
        """(edges, counts): /entry/spectrum/energy_edges (bins + 1) and counts (bins)."""
        counts = self._signal("spectrum", "counts")
        return self._dataset("/entry/spectrum/energy_edges")[()], counts

    @property
    def pixel_spectra(self):
        """/entry/pixel_spectra/counts (rows, cols, bins) uint32 (edges: spectrum[0])."""
        return self._signal("pixel_spectra", "counts")

    @property
    def eta2(self):
        """/entry/eta2/counts (bins, bins) uint64 over eta y (rows) and eta x (cols)."""
        return self._signal("eta2", "counts")

    @property
    def eta3(self):
        """/entry/eta3/counts (bins, bins) uint64 over eta y (rows) and eta x (cols)."""
        return self._signal("eta3", "counts")

    @property
    def subpixel_image(self):
        """/entry/subpixel_image/counts (rows * f, cols * f) uint64."""
        return self._signal("subpixel_image", "counts")

    @property
    def hitmap_slices(self):
        """(frame_start, counts): the first frame number of each slice (n_slices) uint64 and the
        slices' hit maps (n_slices, rows, cols) uint32; the slices complete in both."""
        self._group("hitmap_slices")  # the clear error when the group is absent
        counts = self._dataset("/entry/hitmap_slices/counts")
        starts = self._dataset("/entry/hitmap_slices/frame_start")
        n = min(counts.shape[0], starts.shape[0])
        return starts[:n], counts[:n]

    # --- reconstruction ---------------------------------------------------------------------

    @property
    def n_volumes(self):
        """Volumes complete in /entry/reconstruction (the shortest per-volume table), 0 where
        the run does not reconstruct."""
        if "reconstruction" not in self._entry:
            return 0
        tables = ("first_frame", "last_frame", "slices", "iterations", "solve_seconds", "status")
        return min(self._dataset(f"/entry/reconstruction/{t}").shape[0] for t in tables
                   if t in self._entry["reconstruction"])

    def volume(self, index=-1, which="output"):
        """Volume `index` (negative: from the end) of /entry/reconstruction: "output" (the
        reconstruction) or "input" (the hit images), (slices, rows, cols) float32, only the
        filled slices. Returns (volume, info) with info first_frame, last_frame, slices."""
        if which not in ("output", "input"):
            raise ValueError(f"which '{which}': allowed are output, input")
        n = self.n_volumes
        if n == 0:
            raise ProductMissing(f"{self.path}: no volume in /entry/reconstruction"
                                 if "reconstruction" in self._entry else
                                 f"{self.path}: no /entry/reconstruction (the run did not "
                                 "reconstruct)")
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"volume {index}: the file holds {n} volumes")
        rec = "/entry/reconstruction"
        filled = int(self._dataset(f"{rec}/slices")[i])
        info = {"index": i, "first_frame": int(self._dataset(f"{rec}/first_frame")[i]),
                "last_frame": int(self._dataset(f"{rec}/last_frame")[i]), "slices": filled}
        return self._dataset(f"{rec}/{which}")[i, :filled], info
