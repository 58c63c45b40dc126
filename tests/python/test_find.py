"""glint.find against `glint find` on the same frames: the same clusters, frame records and
pedestal, bit for bit, on every backend; bad arguments give clear errors."""
import threading
import time

import h5py
import numpy as np
import pytest

from conftest import read_frames, run_glint


def run_file_tables(glint, path):
    with glint.RunFile(path) as run:
        clusters = np.concatenate(list(run.clusters())) if run.n_clusters else None
        frames = np.concatenate(list(run.frames()))
    return clusters, frames


def assert_same_as_run_file(glint, result, path):
    clusters, frames = run_file_tables(glint, path)
    assert len(result.clusters) > 100  # the frames hold photons: a comparison of something
    assert result.clusters.dtype == clusters.dtype
    # Exact: the same clusters in the same order, values compared bit for bit.
    assert np.array_equal(result.clusters.view(np.uint8), clusters.view(np.uint8))
    for name in result.frames.dtype.names:
        assert np.array_equal(result.frames[name], frames[name]), name
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        ped = f["/entry/pedestal"]
        # NaN-aware exact equality of float64 images (bits, not values).
        for mine, theirs in ((result.pedestal, "end_mean"), (result.noise, "end_noise"),
                             (result.start_pedestal, "start_mean"),
                             (result.start_noise, "start_noise"),
                             (result.pedestal_state["sum"], "end_sum"),
                             (result.pedestal_state["sum2"], "end_sum2"),
                             (result.pedestal_state["count"], "end_count")):
            expected = ped[theirs][()]
            assert mine.dtype == expected.dtype and mine.shape == expected.shape, theirs
            assert np.array_equal(mine.view(np.uint8), expected.view(np.uint8)), theirs


@pytest.mark.parametrize("backend", ["cpu", "reference", "auto"])
def test_find_is_bit_identical_to_glint_find(ext, raw_run, raw_frames, backend):
    result = ext.find(raw_frames, n_dark=raw_run["n_dark"], backend=backend, threads=3, batch=64)
    assert_same_as_run_file(ext, result, raw_run["run"])
    assert result.units == "ADU"
    assert result.clusters["data"].dtype == np.int32
    assert result.pedestal.shape == raw_run["shape"]
    # The data frames' records: frame numbers are the indices in the array.
    data = result.frames[result.frames["flags"] == 0]
    assert np.array_equal(data["frame_number"], np.arange(1000, 1300))
    assert data["n_clusters"].sum() == len(result.clusters)
    if backend == "reference":
        assert result.backend.startswith("cpu reference")


def test_find_gpu_backend(ext, raw_run, raw_frames):
    why = ext.gpu_unavailable_reason()
    if why:
        with pytest.raises(RuntimeError, match="GPU backend not available"):
            ext.find(raw_frames, n_dark=1000, backend="gpu")
        pytest.skip(f"no GPU backend here: {why}")
    result = ext.find(raw_frames, n_dark=1000, backend="gpu")
    assert result.backend.startswith("gpu")
    assert_same_as_run_file(ext, result, raw_run["run"])


def test_find_cluster_size_and_threshold(ext, glint_bin, raw_run, raw_frames, tmp_path):
    run = tmp_path / "run5.h5"
    run_glint(glint_bin, "find", "-q", "-i", raw_run["frames"], "--dark", 1000, "--n-sigma", 3,
              "--cluster-size", 5, "--backend", "cpu", "-o", run)
    result = ext.find(raw_frames, n_dark=1000, n_sigma=3, cluster_size=5, backend="cpu")
    assert result.clusters["data"].shape[1:] == (5, 5)
    assert_same_as_run_file(ext, result, run)


def test_find_calibrated_jungfrau(ext, glint_bin, tmp_path):
    frames_path = tmp_path / "jf.h5"
    gain, ped = tmp_path / "gain.bin", tmp_path / "ped.bin"
    run_glint(glint_bin, "synth", "-q", "-o", frames_path, "--dark", 1000, "--frames", 60,
              "--rows", 32, "--cols", 48, "--photons", 30, "--jungfrau", "--gain-switch-rate",
              2e-3, "--seed", 11, "--gain-file", gain, "--pedestal-file", ped)
    run = tmp_path / "jf_run.h5"
    run_glint(glint_bin, "find", "-q", "-i", frames_path, "--dark", 1000, "--detector",
              "jungfrau", "--gain-file", gain, "--pedestal-file", ped, "--backend", "cpu",
              "-o", run)
    frames = read_frames(frames_path)
    result = ext.find(frames, n_dark=1000, detector="jungfrau", gain_file=str(gain),
                      pedestal_file=str(ped), backend="cpu")
    assert result.units == "keV"
    assert result.clusters["data"].dtype == np.float32
    assert "gain_switched" in result.frames.dtype.names
    assert result.frames["gain_switched"].sum() > 0
    assert_same_as_run_file(ext, result, run)
    with h5py.File(run, "r", libver="latest", swmr=True) as f:
        expected = f["/entry/pedestal/calibration"][()]
    assert np.array_equal(result.calibration_pedestal.view(np.uint8), expected.view(np.uint8))


def test_find_with_a_pixel_mask(ext, glint_bin, tmp_path):
    # A mask file and the dark frames' dead and noisy pixels, as glint find --mask
    # --mask-from-dark: the same clusters, per-frame removals and mask.
    frames_path = tmp_path / "defects.h5"
    stuck, noisy = [5 * 40 + 7, 30 * 40 + 20], [12 * 40 + 33, 40 * 40 + 3]
    run_glint(glint_bin, "synth", "-q", "-o", frames_path, "--dark", 1000, "--frames", 200,
              "--rows", 48, "--cols", 40, "--photons", 40, "--seed", 5, "--stuck-pixels",
              ",".join(map(str, stuck)), "--noisy-pixels", ",".join(map(str, noisy)))
    mask = np.zeros((48, 40), dtype=np.uint32)
    mask[20:24, 10:16] = 256  # user-defined (e.g. a beam stop)
    mask[0, :] = 1  # gap
    with h5py.File(tmp_path / "mask.h5", "w") as f:
        f["/mask"] = mask
    run = tmp_path / "masked.h5"
    run_glint(glint_bin, "find", "-q", "-i", frames_path, "--dark", 1000, "--backend", "cpu",
              "--mask", f"{tmp_path / 'mask.h5'}:/mask", "--mask-from-dark", "-o", run)
    frames = read_frames(frames_path)
    result = ext.find(frames, n_dark=1000, backend="cpu", mask=mask, mask_from_dark=True)
    assert "masked_clusters" in result.frames.dtype.names
    assert result.masked_clusters == result.frames["masked_clusters"].sum() > 0
    assert_same_as_run_file(ext, result, run)
    with h5py.File(run, "r", libver="latest", swmr=True) as f:
        expected = f["/entry/instrument/detector/pixel_mask"][()]
        assert result.masked_clusters == f["/entry"].attrs["masked_clusters"]
    assert np.array_equal(result.pixel_mask, expected)
    flat = result.pixel_mask.ravel()
    assert all(flat[p] & 2 for p in stuck) and all(flat[p] & 16 for p in noisy)
    # No cluster is centred on a masked pixel; without the mask there are such clusters.
    assert (result.pixel_mask[result.clusters["y"], result.clusters["x"]] == 0).all()
    plain = ext.find(frames, n_dark=1000, backend="cpu")
    assert len(plain.clusters) == len(result.clusters) + result.masked_clusters
    with pytest.raises(ValueError, match="non-negative"):
        ext.find(frames, n_dark=1000, mask=-np.ones((48, 40), dtype=np.int32))
    with pytest.raises(ValueError, match=r"\(48, 40\)"):
        ext.find(frames, n_dark=1000, mask=np.zeros((40, 48), dtype=np.uint32))
    with pytest.raises(ValueError, match="needs mask_from_dark"):
        ext.find(frames, n_dark=1000, noisy_factor=3)


def test_find_releases_the_gil(ext, raw_frames):
    frames = np.concatenate([raw_frames] + [raw_frames[1000:]] * 6)
    done = threading.Event()
    holder = {}

    def work():
        holder["result"] = ext.find(frames, n_dark=1000, backend="reference")
        done.set()

    t = threading.Thread(target=work)
    t.start()
    time.sleep(0.01)  # the finder is running
    ticks = 0
    while not done.is_set():
        ticks += 1  # runs only while the finder thread does not hold the GIL
    t.join()
    assert len(holder["result"].clusters) > 0
    # With the GIL held for the whole search this loop would get at most a handful of turns.
    assert ticks > 10000


def test_find_rejects_bad_arguments(ext, raw_frames):
    with pytest.raises(ValueError, match="uint16"):
        ext.find(raw_frames.astype(np.float64), n_dark=1000)
    with pytest.raises(ValueError, match="3 dimensions"):
        ext.find(raw_frames[0], n_dark=0)
    with pytest.raises(ValueError, match="pedestal window"):
        ext.find(raw_frames, n_dark=10)
    with pytest.raises(ValueError, match="holds only 1300 frames"):
        ext.find(raw_frames, n_dark=2000, pedestal_window=1000)
    with pytest.raises(ValueError, match="allowed are auto, cpu, reference, gpu"):
        ext.find(raw_frames, n_dark=1000, backend="fpga")
    with pytest.raises(ValueError, match="cluster"):
        ext.find(raw_frames, n_dark=1000, cluster_size=4)
    with pytest.raises(ValueError, match="allowed are generic, jungfrau"):
        ext.find(raw_frames, n_dark=1000, detector="eiger")
    with pytest.raises(ValueError, match="need detector='jungfrau'"):
        ext.find(raw_frames, n_dark=1000, gain_file="gain.bin")


def test_find_on_a_non_contiguous_array(ext, raw_frames):
    # A strided view is read as the frames it shows (a copy is made where needed).
    wide = np.zeros((raw_frames.shape[0], 48, 80), dtype=np.uint16)
    wide[:, :, ::2] = raw_frames
    view = wide[:, :, ::2]
    a = ext.find(view, n_dark=1000, backend="cpu")
    b = ext.find(np.ascontiguousarray(view), n_dark=1000, backend="cpu")
    assert np.array_equal(a.clusters, b.clusters)
    assert len(a.clusters) > 0


def test_find_modules_each_as_found_alone(ext, raw_frames):
    # Two modules side by side: each with its own pedestal and finder, so each module's clusters
    # and pedestal are those of its half of the frames found alone.
    both = ext.find(raw_frames, n_dark=1000, backend="cpu", modules=(2, 1))
    half = raw_frames.shape[2] // 2
    total = 0
    for k, cols in enumerate((slice(0, half), slice(half, None))):
        alone = ext.find(np.ascontiguousarray(raw_frames[:, :, cols]), n_dark=1000,
                         backend="reference")
        mine = both.clusters[(both.clusters["x"] >= k * half) & (both.clusters["x"] < (k + 1) * half)]
        assert len(alone.clusters) > 20
        assert np.array_equal(mine["x"] - k * half, alone.clusters["x"])
        for name in ("frame_number", "y", "data"):
            assert np.array_equal(mine[name], alone.clusters[name]), name
        assert np.array_equal(both.pedestal[:, cols].view(np.uint8),
                              np.ascontiguousarray(alone.pedestal).view(np.uint8))
        total += len(alone.clusters)
    assert len(both.clusters) == total
    assert both.backend.startswith("2 modules: cpu")
    with pytest.raises(ValueError, match="modules"):
        ext.find(raw_frames, n_dark=1000, modules=(3, 1))
    with pytest.raises(ValueError, match="modules"):
        ext.find(raw_frames, n_dark=1000, modules=(0, 1))


def test_find_module_upside_down_found_native_shown_flipped(ext, raw_frames):
    # The right module mounted upside down: its finder reads its frames as they are, so its
    # clusters are those found alone; the result shows them (x, y and data) and its pedestal
    # flipped.
    both = ext.find(raw_frames, n_dark=1000, backend="cpu", modules=(2, 1),
                    module_orientation=["normal", "flip_rows"])
    rows, half = raw_frames.shape[1], raw_frames.shape[2] // 2
    right = both.clusters[both.clusters["x"] >= half]
    alone = ext.find(np.ascontiguousarray(raw_frames[:, :, half:]), n_dark=1000,
                     backend="reference")
    assert len(alone.clusters) > 20
    # In the module's own order within each frame: mapped back, they are the module's clusters.
    assert np.array_equal(right["x"] - half, alone.clusters["x"])
    assert np.array_equal(rows - 1 - right["y"], alone.clusters["y"])
    assert np.array_equal(right["frame_number"], alone.clusters["frame_number"])
    assert np.array_equal(right["data"][:, ::-1, :], alone.clusters["data"])
    assert not np.array_equal(right["data"], alone.clusters["data"])
    assert np.array_equal(both.pedestal[::-1, half:].view(np.uint8),
                          np.ascontiguousarray(alone.pedestal).view(np.uint8))
    # The left module is untouched.
    plain = ext.find(raw_frames, n_dark=1000, backend="cpu", modules=(2, 1))
    left = both.clusters[both.clusters["x"] < half]
    assert np.array_equal(left, plain.clusters[plain.clusters["x"] < half])
    with pytest.raises(ValueError, match="module_orientation"):
        ext.find(raw_frames, n_dark=1000, modules=(2, 1), module_orientation=["flip_rows"] * 3)
    with pytest.raises(ValueError, match="'sideways' is not an orientation"):
        ext.find(raw_frames, n_dark=1000, modules=(2, 1), module_orientation="sideways")
