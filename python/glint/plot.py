"""Plots of a run file's products and pedestal as PNG files (`glint plot`, python3 -m glint.plot).

    glint plot RUN.h5 --what hitmap|energy|spectrum|pedestal|noise|eta|subpixel|recon
               [--output X.png]

Images are drawn cell for cell (no interpolation), row 0 at the bottom, with the viridis colour
map from 0 (counts) or the data's minimum to its maximum, and a labelled colour bar; the spectrum
is drawn as steps over its bin edges. The title names the run file. Without --output the PNG is
written next to the run file, RUN_<what>.png. A missing file or product ends with one line on
stderr and exit status 2.
"""
import argparse
import os
import sys

import numpy as np
# Figures are made without pyplot (no global state, no GUI backend chosen for the caller) and
# written by matplotlib's Agg renderer.
from matplotlib.figure import Figure

from .run_file import ProductMissing, RunFile

WHAT = ("hitmap", "energy", "spectrum", "pedestal", "noise", "eta", "subpixel", "recon")
COLOUR_MAP = "viridis"
FIGURE_SIZE = (7.0, 5.6)  # inches
DPI = 100


def default_output(run_path, what):
    """RUN_<what>.png next to the run file."""
    stem, _ = os.path.splitext(run_path)
    return f"{stem}_{what}.png"


def _window_text(attrs, units):
    window = attrs.get("energy_window")
    if window is None:
        return ""
    lo, hi = (float(v) for v in window)
    if np.isinf(lo) and np.isinf(hi):
        return ""
    return f", energy window {lo:g} to {hi:g} {units}"


def _summary(attrs):
    parts = []
    if "clusters" in attrs:
        parts.append(f"{int(attrs['clusters'])} clusters")
    if "frames" in attrs:
        parts.append(f"{int(attrs['frames'])} frames")
    return ", ".join(parts)


def _image(fig, ax, values, label, extent=None, vmin=None, vmax=None, aspect="equal"):
    """values (rows, cols) drawn with row 0 at the bottom, cell (i, j) centred on (j, i) unless
    `extent` says otherwise; a colour bar labelled `label`."""
    values = np.asarray(values, dtype=np.float64)
    rows, cols = values.shape
    if extent is None:
        extent = (-0.5, cols - 0.5, -0.5, rows - 0.5)
    finite = values[np.isfinite(values)]
    if vmin is None:
        vmin = float(finite.min()) if finite.size else 0.0
    if vmax is None:
        vmax = float(finite.max()) if finite.size else 1.0
    if vmax <= vmin:
        vmax = vmin + 1.0
    # Colour-mapped at the data's resolution, then resampled (nearest): every cell has exactly
    # its colour (resampling the data first rescales it, and a cell at vmax can come out as 0).
    im = ax.imshow(np.ma.masked_invalid(values), origin="lower", interpolation="nearest",
                   interpolation_stage="rgba", cmap=COLOUR_MAP, vmin=vmin, vmax=vmax,
                   extent=extent, aspect=aspect)
    fig.colorbar(im, ax=ax, label=label)
    return im


def _pixel_axes(ax):
    ax.set_xlabel("x (pixel column)")
    ax.set_ylabel("y (pixel row)")


def _title(ax, run, text, detail=""):
    """"RUN.h5: what", and the details (counts, window, ...) on a second line."""
    ax.set_title(f"{os.path.basename(run.path)}: {text}" + (f"\n{detail}" if detail else ""))


def plot_hitmap(fig, run, **_):
    p = run.product("hitmap")
    ax = fig.add_subplot()
    _image(fig, ax, p.signal, "clusters per pixel", vmin=0)
    _pixel_axes(ax)
    units = _energy_units(run)
    _title(ax, run, "hit map", f"{_summary(p.attrs)}{_window_text(p.attrs, units)}")


def _energy_units(run):
    for path in ("/entry/spectrum/energy", "/entry/energy_image/energy", "/entry/clusters/energy",
                 "/entry/clusters/data"):
        if path in run.file:
            units = run.file[path].attrs.get("units")
            if units is not None:
                return units.decode() if isinstance(units, bytes) else str(units)
    return "ADU"


def plot_energy(fig, run, **_):
    p = run.product("energy_image")
    units = p.units or _energy_units(run)
    ax = fig.add_subplot()
    _image(fig, ax, p.signal, f"summed cluster energy ({units})",
           vmin=min(0.0, float(np.nanmin(p.signal))) if p.signal.size else 0.0)
    _pixel_axes(ax)
    _title(ax, run, "energy image", f"{_summary(p.attrs)}{_window_text(p.attrs, units)}")


def plot_spectrum(fig, run, log=False, **_):
    p = run.product("spectrum")
    edges, counts = run.spectrum
    units = _energy_units(run)
    ax = fig.add_subplot()
    ax.stairs(counts, edges, color="C0", linewidth=1.2)
    ax.set_xlim(float(edges[0]), float(edges[-1]))
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(1.0, float(np.max(counts)) * 1.05) if len(counts) else 1.0)
    kind = p.attrs.get("energy_kind", "sum")
    ax.set_xlabel(f"cluster energy ({'2 x 2 sum' if kind == '2x2' else 'S x S sum'}, {units})")
    ax.set_ylabel("clusters per bin")
    extra = []
    for name in ("underflow", "overflow"):
        if name in p.attrs:
            extra.append(f"{name} {int(p.attrs[name])}")
    _title(ax, run, "spectrum", ", ".join([_summary(p.attrs)] + extra))


def _pedestal_units(run):
    """The finder's values are the pixels' (ADU), or keV for calibrated JUNGFRAU runs: the units
    of the clusters' data."""
    for path in ("/entry/pedestal/end_mean", "/entry/clusters/data"):
        ds = run.file.get(path)
        units = ds.attrs.get("units") if ds is not None else None
        if units is not None:
            return units.decode() if isinstance(units, bytes) else str(units)
    return "ADU"


def _plot_pedestal(fig, run, what, which):
    values = run.pedestal(which) if what == "pedestal" else run.noise(which)
    if which == "end" and not np.isfinite(values).any():
        # A run that never closed: its end pedestal was never written.
        which = "start"
        values = run.pedestal(which) if what == "pedestal" else run.noise(which)
    if not np.isfinite(values).any():
        raise ProductMissing(f"{run.path}: the pedestal was never written (NaN)")
    units = _pedestal_units(run)
    ax = fig.add_subplot()
    label = f"pedestal mean ({units})" if what == "pedestal" else f"noise rms ({units})"
    _image(fig, ax, values, label)
    _pixel_axes(ax)
    when = "at the end of the run" if which == "end" else "when data taking started"
    _title(ax, run, f"{'pedestal' if what == 'pedestal' else 'noise'} {when}")


def plot_pedestal(fig, run, which="end", **_):
    _plot_pedestal(fig, run, "pedestal", which)


def plot_noise(fig, run, which="end", **_):
    _plot_pedestal(fig, run, "noise", which)


def _eta_panel(fig, ax, p, name):
    ex = p.axes.get("eta_x")
    ey = p.axes.get("eta_y")
    counts = p.signal
    lo, hi = (0.0, 1.0) if name == "eta2" else (-1.0, 1.0)
    if ex is not None and len(ex) > 1:
        half = (ex[1] - ex[0]) / 2
        lo_x, hi_x = float(ex[0] - half), float(ex[-1] + half)
    else:
        lo_x, hi_x = lo, hi
    if ey is not None and len(ey) > 1:
        half = (ey[1] - ey[0]) / 2
        lo_y, hi_y = float(ey[0] - half), float(ey[-1] + half)
    else:
        lo_y, hi_y = lo, hi
    _image(fig, ax, counts, "clusters", extent=(lo_x, hi_x, lo_y, hi_y), vmin=0, aspect="auto")
    ax.set_xlabel(f"{name} x")
    ax.set_ylabel(f"{name} y")


def plot_eta(fig, run, **_):
    names = [n for n in ("eta2", "eta3") if n in run.products()]
    if not names:
        run.product("eta2")  # raises, naming what the file holds
    fig.set_size_inches(FIGURE_SIZE[0] * 0.8 * len(names), FIGURE_SIZE[1])
    axes = [fig.add_subplot(1, len(names), k + 1) for k in range(len(names))]
    for ax, name in zip(axes, names):
        p = run.product(name)
        _eta_panel(fig, ax, p, name)
        ax.set_title(f"{name} ({_summary(p.attrs)})", fontsize="medium")
    fig.suptitle(f"{os.path.basename(run.path)}: eta distributions")


def plot_subpixel(fig, run, **_):
    p = run.product("subpixel_image")
    f = int(p.attrs.get("factor", 1))
    rows, cols = p.signal.shape
    ax = fig.add_subplot()
    _image(fig, ax, p.signal, "photons per sub-pixel", extent=(0, cols / f, 0, rows / f), vmin=0)
    ax.set_xlabel("x (pixels)")
    ax.set_ylabel("y (pixels)")
    outside = f", {int(p.attrs['outside'])} outside the calibration" if "outside" in p.attrs \
        else ""
    _title(ax, run, f"sub-pixel image, factor {f}", f"{_summary(p.attrs)}{outside}")


def plot_recon(fig, run, slice=None, **_):  # noqa: A002 (the command's option name)
    volume, info = run.volume(-1)
    if volume.shape[0] == 0:
        raise ProductMissing(f"{run.path}: the last volume has no slice")
    k = volume.shape[0] // 2 if slice is None else int(slice)
    if not 0 <= k < volume.shape[0]:
        raise IndexError(f"--slice {k}: the last volume holds slices 0 to {volume.shape[0] - 1}")
    rec = run.file["/entry/reconstruction"]
    weight = rec.attrs.get("weight", b"centres")
    weight = weight.decode() if isinstance(weight, bytes) else str(weight)
    label = "reconstructed clusters per pixel" if weight == "centres" else \
        f"reconstructed signal ({_energy_units(run)})"
    ax = fig.add_subplot()
    _image(fig, ax, volume[k], label)
    _pixel_axes(ax)
    _title(ax, run, f"reconstruction, volume {info['index']}",
           f"frames {info['first_frame']} to {info['last_frame']}, slice {k} of {volume.shape[0]}")


PLOTS = {"hitmap": plot_hitmap, "energy": plot_energy, "spectrum": plot_spectrum,
         "pedestal": plot_pedestal, "noise": plot_noise, "eta": plot_eta,
         "subpixel": plot_subpixel, "recon": plot_recon}


def figure(run, what, **options):
    """The matplotlib Figure of `what` (WHAT) for an open RunFile."""
    if what not in PLOTS:
        raise ValueError(f"what '{what}': allowed are {', '.join(WHAT)}")
    fig = Figure(figsize=FIGURE_SIZE, dpi=DPI, layout="constrained")
    PLOTS[what](fig, run, **options)
    return fig


def plot(run_path, what, output=None, **options):
    """Writes the PNG of `what` for the run file at run_path; returns its path."""
    output = output or default_output(run_path, what)
    with RunFile(run_path) as run:
        fig = figure(run, what, **options)
    fig.savefig(output, dpi=DPI, format="png")
    return output


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="glint plot", description="Plot a glint run file's products and pedestal as PNG.")
    parser.add_argument("run", metavar="RUN.h5", help="the run file")
    parser.add_argument("--what", choices=WHAT, default="hitmap",
                        help="what to plot (default: hitmap)")
    parser.add_argument("-o", "--output", help="the PNG to write (default: RUN_<what>.png next "
                                               "to the run file)")
    parser.add_argument("--which", choices=("start", "end"), default="end",
                        help="pedestal, noise: when data taking started or at the end (default)")
    parser.add_argument("--slice", type=int, help="recon: the slice of the last volume "
                                                  "(default: the middle one)")
    parser.add_argument("--log", action="store_true", help="spectrum: logarithmic counts")
    a = parser.parse_args(argv)
    try:
        out = plot(a.run, a.what, a.output, which=a.which, slice=a.slice, log=a.log)
    except (ProductMissing, FileNotFoundError, OSError, ValueError, IndexError) as e:
        print(f"glint plot: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
