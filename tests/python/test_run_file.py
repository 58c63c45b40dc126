"""glint.RunFile and glint.read_clust: chunked reads equal whole reads and h5py's view of the file;
only the flushed rows are read; .clust and run file hold the same clusters; the products per the
layout of docs/file-layout.md are returned as written, and an absent one is named."""
import shutil

import h5py
import numpy as np
import pytest

from products_file import write_products_file


def whole(run, what):
    with h5py.File(run.path, "r", libver="latest", swmr=True) as f:
        g = f[f"/entry/{what}"]
        return {name: g[name][()] for name in g if isinstance(g[name], h5py.Dataset)}


@pytest.mark.parametrize("chunk", [3, 1000, 1 << 20])
def test_chunked_iteration_equals_a_whole_read(glint, raw_run, chunk):
    with glint.RunFile(raw_run["run"]) as run:
        assert run.n_frames == 1300
        n = run.n_clusters
        assert n > 100
        cparts = list(run.clusters(chunk=chunk))
        fparts = list(run.frames(chunk=chunk))
        assert all(len(p) == chunk for p in cparts[:-1]) and 0 < len(cparts[-1]) <= chunk
        clusters = np.concatenate(cparts)
        frames = np.concatenate(fparts)
        direct_c = whole(run, "clusters")
        direct_f = whole(run, "frames")
    assert len(clusters) == n and len(frames) == 1300
    for name in clusters.dtype.names:
        assert np.array_equal(clusters[name], direct_c[name]), name
    for name in frames.dtype.names:
        assert np.array_equal(frames[name], direct_f[name]), name
    assert frames.dtype.names == ("frame_number", "timestamp", "cluster_offset", "n_clusters",
                                  "flags")
    assert np.array_equal(frames["frame_number"], np.arange(1300))
    assert np.array_equal(frames["flags"][:1000], np.full(1000, 2, np.uint8))


def test_metadata_and_pedestal(glint, raw_run):
    with glint.RunFile(raw_run["run"]) as run:
        assert run.shape == (48, 40)
        assert run.cluster_size == 3
        assert "n_sigma: 5" in run.config
        assert run.detector["cluster_size"] == 3
        assert run.pixel_mask is None
        with h5py.File(raw_run["run"], "r", libver="latest", swmr=True) as f:
            for which in ("start", "end"):
                assert np.array_equal(run.pedestal(which), f[f"/entry/pedestal/{which}_mean"][()])
                assert np.array_equal(run.noise(which), f[f"/entry/pedestal/{which}_noise"][()],
                                      equal_nan=True)
        assert np.isfinite(run.pedestal("end")).all()
        with pytest.raises(ValueError, match="allowed are start, end"):
            run.pedestal("middle")


def test_only_flushed_rows_are_read(glint, raw_run, tmp_path):
    # A file whose last flush counted fewer rows than its extents hold (a failed write leaves
    # such rows behind, with fill values): only the counted rows are read.
    path = tmp_path / "partial.h5"
    shutil.copy(raw_run["run"], path)
    with glint.RunFile(raw_run["run"]) as run:
        frames = np.concatenate(list(run.frames()))
        clusters = np.concatenate(list(run.clusters()))
    with h5py.File(path, "r+") as f:
        f["/entry/flushed_rows"][...] = [1200, len(clusters) - 9]
    with glint.RunFile(path) as run:
        assert run.n_frames == 1200
        assert run.n_clusters == len(clusters) - 9
        got_f = np.concatenate(list(run.frames(chunk=100)))
        got_c = np.concatenate(list(run.clusters(chunk=100)))
    assert np.array_equal(got_f, frames[:1200])
    assert np.array_equal(got_c, clusters[:-9])


def test_read_clust_equals_the_run_file(ext, raw_run):
    clusters = ext.read_clust(raw_run["clust"])
    with ext.RunFile(raw_run["run"]) as run:
        expected = np.concatenate(list(run.clusters()))
    assert clusters.dtype == expected.dtype
    assert np.array_equal(clusters, expected)
    clusters, records = ext.read_clust(raw_run["clust"], records=True)
    # One record per data frame, also for frames without clusters.
    assert np.array_equal(records["frame_number"], np.arange(1000, 1300))
    assert records["n_clusters"].sum() == len(clusters)


def test_read_clust_errors(ext, raw_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.clust"):
        ext.read_clust(tmp_path / "nothere.clust")
    cut = tmp_path / "cut.clust"
    data = raw_run["clust"].read_bytes()
    cut.write_bytes(data[:len(data) - 7])
    with pytest.raises(RuntimeError, match="cut.clust"):
        ext.read_clust(cut)


def test_run_file_errors(glint, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.h5"):
        glint.RunFile(tmp_path / "missing.h5")
    text = tmp_path / "text.h5"
    text.write_text("not hdf5\n")
    with pytest.raises(OSError, match="text.h5"):
        glint.RunFile(text)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = 1
    with pytest.raises(ValueError, match="not a glint run file"):
        glint.RunFile(other)


def test_absent_product_is_named(glint, raw_run):
    with glint.RunFile(raw_run["run"]) as run:
        assert run.products() == []
        with pytest.raises(glint.ProductMissing) as e:
            run.hitmap
        assert "/entry/hitmap" in str(e.value) and "run.h5" in str(e.value)
        assert isinstance(e.value, KeyError)
        with pytest.raises(KeyError, match="/entry/spectrum"):
            run.spectrum
        with pytest.raises(KeyError, match="reconstruction"):
            run.volume()


def test_products_are_read_as_written(glint, raw_run, tmp_path):
    path = tmp_path / "products.h5"
    shutil.copy(raw_run["run"], path)
    written = write_products_file(path)
    with glint.RunFile(path) as run:
        assert run.products() == ["hitmap", "energy_image", "hitmap_slices", "spectrum",
                                  "pixel_spectra", "eta2", "eta3", "subpixel_image"]
        assert run.hitmap.dtype == np.uint64
        assert np.array_equal(run.hitmap, written["hitmap"])
        assert np.array_equal(run.energy_image, written["energy_image"])
        edges, counts = run.spectrum
        assert np.array_equal(edges, written["spectrum_edges"])
        assert np.array_equal(counts, written["spectrum"])
        assert np.array_equal(run.pixel_spectra, written["pixel_spectra"])
        assert np.array_equal(run.eta2, written["eta2"])
        assert np.array_equal(run.eta3, written["eta3"])
        assert np.array_equal(run.subpixel_image, written["subpixel_image"])
        starts, slices = run.hitmap_slices
        assert np.array_equal(starts, written["slice_starts"])
        assert np.array_equal(slices, written["hitmap_slices"])
        p = run.product("hitmap")
        assert p.attrs["signal"] == "counts" and list(p.axes) == ["y", "x"]
        assert np.array_equal(p.axes["x"], np.arange(40, dtype=np.float64))
        assert p.attrs["energy_kind"] == "sum"
        assert int(p.attrs["clusters"]) == int(written["hitmap"].sum())
        assert run.product("spectrum").axis_units == {"energy": "ADU"}
        assert run.product("energy_image").units == "ADU"
        assert np.array_equal(run.cluster_energy("sum"), written["energy"])
        assert np.array_equal(run.cluster_energy("2x2"), written["energy_2x2"])
        volume, info = run.volume()
        assert info == {"index": 1, "first_frame": 1100, "last_frame": 1299, "slices": 2}
        assert np.array_equal(volume, written["volume"][1, :2])


def test_flipped_modules_read_native_and_in_the_image(glint, ext, glint_bin, raw_run, raw_frames,
                                                      tmp_path):
    """A run of two modules, the right one turned by 180 degrees: the file holds its clusters
    native to it; in image coordinates they are glint.find's clusters (x, y and data flipped)."""
    from conftest import run_glint
    path = tmp_path / "turned.h5"
    run_glint(glint_bin, "find", "-q", "-i", raw_run["frames"], "--dark", 1000, "--backend",
              "cpu", "--modules", "2,1", "--module-orientation", "normal,rotate_180",
              "--output", path)
    found = ext.find(raw_frames, n_dark=1000, backend="cpu", modules=(2, 1),
                     module_orientation=("normal", "rotate_180"))
    rows, cols = raw_run["shape"]
    with glint.RunFile(path) as run:
        assert [m.orientation for m in run.modules] == ["normal", "rotate_180"]
        assert run.modules[1] == glint.Module(1, (0, cols // 2), (rows, cols // 2), (0, cols // 2),
                                              "rotate_180")
        local = np.concatenate(list(run.clusters()))
        image = np.concatenate(list(run.clusters(coordinates="image")))
        whole_detector = np.concatenate(list(run.clusters(coordinates="detector")))
    assert len(image) == len(found.clusters) > 20
    for name in ("frame_number", "x", "y", "data"):
        assert np.array_equal(image[name], found.clusters[name]), name
        assert np.array_equal(whole_detector[name], found.clusters[name]), name
    turned = local["module"] == 1
    assert turned.any()
    assert np.array_equal(image["x"][turned], cols - 1 - local["x"][turned])
    assert np.array_equal(image["y"][turned], rows - 1 - local["y"][turned])
    assert np.array_equal(image["data"][turned], local["data"][turned][:, ::-1, ::-1])
    assert np.array_equal(image["data"][~turned], local["data"][~turned])
