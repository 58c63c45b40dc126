"""Writes the science products into a run file with h5py, exactly per docs/file-layout.md's
product layout (NXdata groups under /entry), with values that identify each cell, and a
reconstruction group as glint writes it. Returns what was written."""
import h5py
import numpy as np


def _nxdata(entry, name, signal, data, axes, indices, extra=None, clusters=0, frames=300):
    if name in entry:  # a run that wrote its own products: replaced by the known values
        del entry[name]
    g = entry.create_group(name)
    g.attrs["NX_class"] = "NXdata"
    g.attrs["signal"] = signal
    g.attrs["axes"] = axes
    for axis, index in indices.items():
        g.attrs[f"{axis}_indices"] = np.int32(index)
    g.attrs["energy_kind"] = "sum"
    g.attrs["energy_window"] = np.array([-np.inf, np.inf])
    g.attrs["clusters"] = np.uint64(clusters)
    g.attrs["frames"] = np.uint64(frames)
    g.create_dataset(signal, data=data)
    for key, value in (extra or {}).items():
        g.create_dataset(key, data=value)
    return g


def write_products_file(path, rows=48, cols=40, bins=50, emax=2000.0, peak_bin=17):
    """Adds every product to the run file at `path` (rows x cols frames)."""
    out = {}
    hitmap = (np.arange(rows * cols, dtype=np.uint64).reshape(rows, cols) * 7) % 251
    out["hitmap"] = hitmap
    out["energy_image"] = hitmap.astype(np.float64) * 612.5
    edges = np.linspace(0.0, emax, bins + 1)
    spectrum = np.zeros(bins, dtype=np.uint64)
    spectrum[peak_bin] = 1000
    spectrum[peak_bin - 1] = 150
    spectrum[peak_bin + 1] = 120
    out["spectrum"], out["spectrum_edges"] = spectrum, edges
    out["peak_bin"] = peak_bin
    out["pixel_spectra"] = (np.arange(rows * cols * bins, dtype=np.uint32) % 5).reshape(
        rows, cols, bins)
    eta_bins = 20
    out["eta2"] = (np.arange(eta_bins * eta_bins, dtype=np.uint64) * 37 % 400).reshape(
        eta_bins, eta_bins)
    out["eta3"] = out["eta2"][::-1].copy()
    f = 3
    out["subpixel_image"] = (np.arange(rows * f * cols * f, dtype=np.uint64) % 97).reshape(
        rows * f, cols * f)
    out["slice_starts"] = np.array([1000, 1100, 1200], dtype=np.uint64)
    out["hitmap_slices"] = (np.arange(3 * rows * cols, dtype=np.uint32) % 11).reshape(
        3, rows, cols)
    centres = (edges[:-1] + edges[1:]) / 2
    x, y = np.arange(cols, dtype=np.float64), np.arange(rows, dtype=np.float64)
    eta2_c = (np.arange(eta_bins) + 0.5) / eta_bins
    eta3_c = -1 + 2 * (np.arange(eta_bins) + 0.5) / eta_bins
    with h5py.File(path, "r+") as fh:
        entry = fh["entry"]
        n = entry["clusters/x"].shape[0]
        out["energy"] = np.arange(n, dtype=np.int32) * 3
        out["energy_2x2"] = np.arange(n, dtype=np.int32) * 2
        for name in ("energy", "energy_2x2", "reconstruction"):
            group = entry if name == "reconstruction" else entry["clusters"]
            if name in group:
                del group[name]
        entry["clusters"].create_dataset("energy", data=out["energy"]).attrs["units"] = "ADU"
        entry["clusters"].create_dataset("energy_2x2", data=out["energy_2x2"]).attrs["units"] = \
            "ADU"
        xy = {"y": y, "x": x}
        _nxdata(entry, "hitmap", "counts", hitmap, ["y", "x"], {"y": 0, "x": 1}, xy,
                clusters=int(hitmap.sum()))
        g = _nxdata(entry, "energy_image", "energy", out["energy_image"], ["y", "x"],
                    {"y": 0, "x": 1}, xy)
        g["energy"].attrs["units"] = "ADU"
        g = _nxdata(entry, "hitmap_slices", "counts", out["hitmap_slices"], [".", "y", "x"],
                    {"y": 1, "x": 2}, dict(xy, frame_start=out["slice_starts"]))
        g = _nxdata(entry, "spectrum", "counts", spectrum, ["energy"], {"energy": 0},
                    {"energy": centres, "energy_edges": edges}, clusters=int(spectrum.sum()))
        g.attrs["underflow"] = np.uint64(3)
        g.attrs["overflow"] = np.uint64(4)
        g["energy"].attrs["units"] = "ADU"
        g["energy_edges"].attrs["units"] = "ADU"
        _nxdata(entry, "pixel_spectra", "counts", out["pixel_spectra"], ["y", "x", "energy"],
                {"y": 0, "x": 1, "energy": 2}, dict(xy, energy=centres))
        _nxdata(entry, "eta2", "counts", out["eta2"], ["eta_y", "eta_x"],
                {"eta_y": 0, "eta_x": 1}, {"eta_y": eta2_c, "eta_x": eta2_c})
        _nxdata(entry, "eta3", "counts", out["eta3"], ["eta_y", "eta_x"],
                {"eta_y": 0, "eta_x": 1}, {"eta_y": eta3_c, "eta_x": eta3_c})
        sub_y = (np.arange(rows * f) + 0.5) / f
        sub_x = (np.arange(cols * f) + 0.5) / f
        g = _nxdata(entry, "subpixel_image", "counts", out["subpixel_image"], ["y", "x"],
                    {"y": 0, "x": 1}, {"y": sub_y, "x": sub_x})
        g.attrs["factor"] = np.uint32(f)
        g.attrs["calibration"] = "eta.h5"
        g.attrs["outside"] = np.uint64(5)
        entry.attrs["default"] = "hitmap"
        # /entry/reconstruction: two volumes, the last a partial one (2 of 3 slices).
        rec = entry.create_group("reconstruction")
        rec.attrs["NX_class"] = "NXprocess"
        rec.attrs["weight"] = "centres"
        volume = np.full((2, 3, rows, cols), np.nan, dtype=np.float32)
        volume[0] = np.arange(3 * rows * cols).reshape(3, rows, cols) / 10
        volume[1, :2] = (np.arange(2 * rows * cols).reshape(2, rows, cols) % 53) / 4
        out["volume"] = volume
        rec.create_dataset("output", data=volume)
        rec.create_dataset("input", data=volume)
        rec.create_dataset("first_frame", data=np.array([1000, 1100], dtype=np.uint64))
        rec.create_dataset("last_frame", data=np.array([1099, 1299], dtype=np.uint64))
        rec.create_dataset("slices", data=np.array([3, 2], dtype=np.uint32))
        rec.create_dataset("iterations", data=np.array([40, 40], dtype=np.uint32))
        rec.create_dataset("solve_seconds", data=np.array([0.1, 0.1]))
        rec.create_dataset("status", data=np.array([0, 1], dtype=np.uint8))
    return out
