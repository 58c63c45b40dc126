"""The products of a real run (glint find --products) read with RunFile, checked against a plain
numpy computation from the run's own clusters, and plotted. Skipped where glint find has no
--products."""
import numpy as np
import pytest

from conftest import run_glint
from png_image import cell_values, colormap_lut, image_areas, read_rgb


@pytest.fixture(scope="module")
def products_run(glint_bin, raw_run, tmp_path_factory):
    help_text = run_glint(glint_bin, "find", "--help").stdout
    if "--products" not in help_text:
        pytest.skip("this glint find writes no products (--products)")
    path = tmp_path_factory.mktemp("products") / "products_run.h5"
    run_glint(glint_bin, "find", "-q", "-i", raw_run["frames"], "--dark", 1000, "--backend",
              "cpu", "-o", path, "--products", "all,slices:100")
    return path


def quadrant_max(data):
    """The largest 2 x 2 sum of 3 x 3 clusters' values (the four quadrants around the centre)."""
    q = [data[:, r:r + 2, c:c + 2].sum(axis=(1, 2)) for r in (0, 1) for c in (0, 1)]
    return np.max(q, axis=0)


def test_products_agree_with_the_clusters(glint, products_run):
    with glint.RunFile(products_run) as run:
        assert {"hitmap", "energy_image", "hitmap_slices", "spectrum", "pixel_spectra", "eta2",
                "eta3"} <= set(run.products())
        rows, cols = run.shape
        clusters = np.concatenate(list(run.clusters()))
        energy = run.cluster_energy("sum")
        energy_2x2 = run.cluster_energy("2x2")
        hitmap, energy_image = run.hitmap, run.energy_image
        edges, counts = run.spectrum
        spectrum = run.product("spectrum")
        pixel_spectra = run.pixel_spectra
        starts, slices = run.hitmap_slices
        eta = {name: run.product(name) for name in ("eta2", "eta3")}
    assert len(clusters) > 1000
    data = clusters["data"].astype(np.int64)
    assert np.array_equal(energy, data.sum(axis=(1, 2)))
    assert np.array_equal(energy_2x2, quadrant_max(data))
    y, x = clusters["y"].astype(np.intp), clusters["x"].astype(np.intp)
    expected = np.zeros((rows, cols), np.uint64)
    np.add.at(expected, (y, x), 1)
    assert np.array_equal(hitmap, expected)
    expected_energy = np.zeros((rows, cols))
    np.add.at(expected_energy, (y, x), energy)
    assert np.array_equal(energy_image, expected_energy)
    # Bins [edge_i, edge_i+1): the energies are whole ADU and the edges whole numbers.
    b = np.searchsorted(edges, energy, side="right") - 1
    inside = (b >= 0) & (b < len(counts))
    assert np.array_equal(counts, np.bincount(b[inside], minlength=len(counts)))
    assert int(spectrum.attrs["underflow"]) == int((energy < edges[0]).sum())
    assert int(spectrum.attrs["overflow"]) == int((energy >= edges[-1]).sum())
    expected_ps = np.zeros(pixel_spectra.shape, np.uint32)
    np.add.at(expected_ps, (y[inside], x[inside], b[inside]), 1)
    assert np.array_equal(pixel_spectra, expected_ps)
    assert np.array_equal(starts, [1000, 1100, 1200])
    for k, start in enumerate(starts):
        sel = (clusters["frame_number"] >= start) & (clusters["frame_number"] < start + 100)
        expected_slice = np.zeros((rows, cols), np.uint32)
        np.add.at(expected_slice, (y[sel], x[sel]), 1)
        assert np.array_equal(slices[k], expected_slice)
    # Every cluster is in the eta distributions or counted outside their range.
    for name, p in eta.items():
        assert int(p.attrs["clusters"]) == len(clusters), name
        assert int(p.signal.sum()) + int(p.attrs["outside"]) == len(clusters), name
    assert int(eta["eta3"].attrs["outside"]) < int(eta["eta2"].attrs["outside"])


def test_plot_of_a_real_hitmap_reads_back(glint_bin, glint, products_run, tmp_path):
    out = tmp_path / "hitmap.png"
    run_glint(glint_bin, "plot", products_run, "--what", "hitmap", "--output", out)
    with glint.RunFile(products_run) as run:
        expected = run.hitmap.astype(np.float64)
    rgb = read_rgb(out)
    lut = colormap_lut()
    area = image_areas(rgb, lut)[0]
    values, dist = cell_values(rgb, area, *expected.shape, 0.0, expected.max(), lut, expected)
    assert (dist <= 2.5).all()
    step = expected.max() / 256
    assert np.abs(values - expected).max() <= 4 * step + 1e-9
    out = tmp_path / "spectrum.png"
    run_glint(glint_bin, "plot", products_run, "--what", "spectrum", "--output", out, "--log")
    assert read_rgb(out).shape[2] == 3
