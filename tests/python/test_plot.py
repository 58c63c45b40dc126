"""glint plot (the C++ command running python3 -m glint.plot): the PNGs are decoded and what is
drawn is read back: colour-mapped cells invert through the colour map to the plotted values, a
spectrum's peak is drawn at its energy and height; labels, colour bars and titles; one clear
line and a non-zero exit for a missing file or product."""
import os
import shutil

import numpy as np
import pytest

from conftest import run_glint
from png_image import (axes_frame, cell_values, colormap_lut, image_areas, pixels_of_colour,
                       read_rgb)
from products_file import write_products_file

LUT = colormap_lut("viridis")


@pytest.fixture(scope="module")
def products_run(raw_run, tmp_path_factory):
    path = tmp_path_factory.mktemp("plots") / "prod_run.h5"
    shutil.copy(raw_run["run"], path)
    return path, write_products_file(path)


def plot(glint_bin, run, what, out, *extra):
    p = run_glint(glint_bin, "plot", run, "--what", what, "--output", out, *extra)
    assert p.stdout.strip() == str(out)
    assert os.path.getsize(out) > 1000
    return read_rgb(out)


def assert_read_back(values, expected, vmin, vmax):
    """Values read back through the colour map match within its resolution: neighbouring
    entries of viridis differ by a unit or two of 8-bit RGB, so the nearest entry of a stored
    colour may be up to 4 of the 256 entries away; on average it is within one."""
    step = (vmax - vmin) / 256
    error = np.abs(values - expected)
    assert error.max() <= 4 * step + 1e-9
    assert error.mean() <= step


def check_cells(rgb, expected, vmin, vmax):
    """The widest colour-mapped area is the image: its cells read back as `expected`."""
    areas = image_areas(rgb, LUT)
    assert len(areas) >= 2  # the image and its colour bar
    rows, cols = expected.shape
    values, dist = cell_values(rgb, areas[0], rows, cols, vmin, vmax, LUT, expected)
    visible = dist <= 2.5
    # Every cell is visible, except where cells are a few pixels wide: matplotlib places the
    # resampled image to a pixel or two, and the spines may cover an outermost row or column.
    ring = np.ones_like(visible)
    ring[1:-1, 1:-1] = False
    top, bottom, left, right = areas[0]
    if min((right - left) / cols, (bottom - top) / rows) >= 6:
        assert visible.all()
    else:
        assert visible[~ring].all() and visible.mean() > 0.9
    assert_read_back(values[visible], expected[visible], vmin, vmax)
    # The colour bar is tall and narrow, beside the image.
    bar = areas[1]
    assert bar[3] - bar[2] < (bar[1] - bar[0]) / 4
    assert bar[2] > areas[0][3]


def test_hitmap_cells_read_back_as_the_counts(glint_bin, products_run, tmp_path):
    run, written = products_run
    rgb = plot(glint_bin, run, "hitmap", tmp_path / "h.png")
    expected = written["hitmap"].astype(np.float64)
    check_cells(rgb, expected, 0.0, expected.max())
    # Not symmetric: a plot flipped in either direction would fail the comparison above.
    assert not np.array_equal(expected, expected[::-1]) and \
        not np.array_equal(expected, expected[:, ::-1])


def test_energy_and_subpixel_images(glint_bin, products_run, tmp_path):
    run, written = products_run
    rgb = plot(glint_bin, run, "energy", tmp_path / "e.png")
    e = written["energy_image"]
    check_cells(rgb, e, 0.0, e.max())
    rgb = plot(glint_bin, run, "subpixel", tmp_path / "s.png")
    s = written["subpixel_image"].astype(np.float64)
    check_cells(rgb, s, 0.0, s.max())


def test_recon_plots_the_middle_slice_of_the_last_volume(glint_bin, products_run, tmp_path):
    run, written = products_run
    for extra, k in (((), 1), (("--slice", 0), 0)):
        rgb = plot(glint_bin, run, "recon", tmp_path / f"r{k}.png", *extra)
        expected = written["volume"][1, k].astype(np.float64)
        check_cells(rgb, expected, expected.min(), expected.max())
    p = run_glint(glint_bin, "plot", run, "--what", "recon", "--slice", 2, check=False)
    assert p.returncode == 2 and "slices 0 to 1" in p.stderr


@pytest.mark.parametrize("what", ["pedestal", "noise"])
def test_pedestal_and_noise_of_a_real_run(glint, glint_bin, raw_run, tmp_path, what):
    rgb = plot(glint_bin, raw_run["run"], what, tmp_path / f"{what}.png")
    with glint.RunFile(raw_run["run"]) as r:
        expected = r.pedestal("end") if what == "pedestal" else r.noise("end")
    check_cells(rgb, expected, expected.min(), expected.max())


def test_spectrum_peak_is_drawn_at_its_energy_and_height(glint_bin, products_run, tmp_path):
    run, written = products_run
    rgb = plot(glint_bin, run, "spectrum", tmp_path / "sp.png")
    top, bottom, left, right = axes_frame(rgb)
    assert right - left > 300 and bottom - top > 200
    line = pixels_of_colour(rgb, (31, 119, 180))  # matplotlib's C0, the spectrum's colour
    line[:top + 2] = line[bottom - 1:] = False
    rows = np.flatnonzero(line.any(axis=1))
    peak_row = rows.min()
    peak_cols = np.flatnonzero(line[peak_row:peak_row + 2].any(axis=0))
    edges = written["spectrum_edges"]
    k = written["peak_bin"]
    to_x = lambda px: edges[0] + (px - left) / (right - left) * (edges[-1] - edges[0])  # noqa
    pixel = (edges[-1] - edges[0]) / (right - left)
    # The top of the peak spans bin k's edges (to a pixel or two of line width).
    assert abs(to_x(peak_cols.min()) - edges[k]) <= 3 * pixel
    assert abs(to_x(peak_cols.max() + 1) - edges[k + 1]) <= 3 * pixel
    # Its height: counts 1000 on a y axis from 0 to 1.05 x the maximum.
    expected_row = bottom - 1000 / 1050 * (bottom - top)
    assert abs(peak_row - expected_row) <= 3


def test_eta_has_both_distributions(glint, glint_bin, products_run, tmp_path):
    run, written = products_run
    rgb = plot(glint_bin, run, "eta", tmp_path / "eta.png")
    areas = image_areas(rgb, LUT)
    assert len(areas) == 4  # eta2, eta3 and their colour bars
    panels = sorted(areas[:2], key=lambda a: a[2])
    for area, name in zip(panels, ("eta2", "eta3")):
        expected = written[name].astype(np.float64)
        values, dist = cell_values(rgb, area, *expected.shape, 0.0, expected.max(), LUT,
                                   expected)
        assert (dist <= 2.5).all()
        assert_read_back(values, expected, 0.0, expected.max())


def test_labels_colour_bars_and_titles(glint, products_run, raw_run):
    from glint import plot as gplot
    run, _ = products_run
    with glint.RunFile(run) as r:
        fig = gplot.figure(r, "hitmap")
        ax, bar = fig.axes
        assert ax.get_xlabel() == "x (pixel column)" and ax.get_ylabel() == "y (pixel row)"
        assert bar.get_ylabel() == "clusters per pixel"
        assert ax.get_title().startswith("prod_run.h5: hit map")
        fig = gplot.figure(r, "energy")
        assert fig.axes[1].get_ylabel() == "summed cluster energy (ADU)"
        fig = gplot.figure(r, "spectrum")
        ax = fig.axes[0]
        assert ax.get_xlabel() == "cluster energy (S x S sum, ADU)"
        assert ax.get_ylabel() == "clusters per bin"
        assert "underflow 3, overflow 4" in ax.get_title()
        fig = gplot.figure(r, "subpixel")
        assert fig.axes[0].get_xlabel() == "x (pixels)"
        assert "factor 3" in fig.axes[0].get_title()
        fig = gplot.figure(r, "recon")
        assert fig.axes[0].get_title() == ("prod_run.h5: reconstruction, volume 1\n"
                                           "frames 1100 to 1299, slice 1 of 2")
    with glint.RunFile(raw_run["run"]) as r:
        fig = gplot.figure(r, "noise")
        assert fig.axes[1].get_ylabel() == "noise rms (ADU)"
        assert fig.axes[0].get_title() == "run.h5: noise at the end of the run"


def test_default_output_is_next_to_the_run_file(glint_bin, raw_run, tmp_path):
    run = tmp_path / "r.h5"
    shutil.copy(raw_run["run"], run)
    p = run_glint(glint_bin, "plot", run, "--what", "pedestal")
    assert p.stdout.strip() == str(tmp_path / "r_pedestal.png")
    assert read_rgb(tmp_path / "r_pedestal.png").shape[2] == 3


def test_missing_file_or_product_is_one_clear_line(glint_bin, raw_run, tmp_path):
    p = run_glint(glint_bin, "plot", tmp_path / "none.h5", check=False)
    assert p.returncode == 2
    assert p.stderr.strip() == f"glint plot: {tmp_path / 'none.h5'}: no such file"
    p = run_glint(glint_bin, "plot", raw_run["run"], "--what", "hitmap", "--output",
                  tmp_path / "x.png", check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "no /entry/hitmap" in lines[0] and lines[0].startswith("glint plot:")
    assert not (tmp_path / "x.png").exists()
    p = run_glint(glint_bin, "plot", raw_run["run"], "--what", "recon", check=False)
    assert p.returncode == 2 and "no /entry/reconstruction" in p.stderr
    p = run_glint(glint_bin, "plot", raw_run["run"], "--what", "volume", check=False)
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_help_passes_through(glint_bin):
    p = run_glint(glint_bin, "plot", "--help")
    assert "--what" in p.stdout and "usage: glint plot" in p.stdout
