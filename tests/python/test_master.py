"""Several glintd on one detector (docs/modules.md): two glintd, each on two modules of a
four-module detector (detector.placement), fed by their own `glint sim`; RunFile reads each run
file's modules, and the master file `glint master` makes of the two reads as one detector with
h5py: the hit map and pedestal placed, the clusters one run after the other."""
import json
import os
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from conftest import free_port, run_glint

ROWS, COLS = 32, 48  # each glintd's image: two modules of 32 x 24 side by side


def ctl(glint_bin, endpoint, *args):
    return json.loads(run_glint(glint_bin, "ctl", "--endpoint", endpoint, *args, "--json").stdout)


def wait_for(glint_bin, endpoint, ready, timeout=60):
    """glintd's status once `ready(status)` holds (None on timeout)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = run_glint(glint_bin, "ctl", "--endpoint", endpoint, "status", "--json", check=False)
        if p.returncode == 0:
            status = json.loads(p.stdout)
            if ready(status):
                return status
        time.sleep(0.1)
    return None


@pytest.fixture(scope="module")
def parts(glint_bin, tmp_path_factory):
    """The run files of two glintd: "top" (modules 0, 1 at row 0) and "bottom" (modules 2, 3
    at row 32) of a 64 x 48 detector."""
    glintd = os.path.join(os.path.dirname(glint_bin), "glintd")
    if not os.access(glintd, os.X_OK):
        pytest.skip(f"no glintd at {glintd}")
    work = tmp_path_factory.mktemp("master")
    daemons, logs, controls, configs, files = [], [], [], [], {}
    try:
        for k, name in enumerate(("top", "bottom")):
            runs = work / f"runs_{name}"
            config = work / f"{name}.yaml"
            control = f"tcp://127.0.0.1:{free_port()}"
            config.write_text(f"""
detector: {{rows: {ROWS}, cols: {COLS}, ports: [2, 1], modules: [2, 1],
           placement: {{detector_shape: [{2 * ROWS}, {COLS}], origin: [{ROWS * k}, 0],
                        first_module: {2 * k}}}}}
ingest:
  endpoints: [tcp://127.0.0.1:{free_port()}, tcp://127.0.0.1:{free_port()}]
pedestal: {{dark_frames: 16, window: 16}}
finder: {{backend: cpu, threads: 1}}
output: {{directory: {runs}, run_name: {name}, flush_interval_ms: 100}}
control: {{endpoint: {control}}}
preview: {{endpoint: "tcp://127.0.0.1:*"}}
""")
            log = open(work / f"glintd_{name}.log", "w")
            logs.append(log)
            daemons.append(subprocess.Popen([glintd, "--config", str(config)], stdout=log,
                                            stderr=subprocess.STDOUT))
            controls.append(control)
            configs.append(config)
        for name, control in zip(("top", "bottom"), controls):
            assert wait_for(glint_bin, control, lambda s: True), \
                (work / f"glintd_{name}.log").read_text()
            files[name] = ctl(glint_bin, control, "start")["file"]
        sims = [subprocess.Popen(
            [glint_bin, "--log-level", "warn", "sim", "--config", str(config), "--dark", "16",
             "--frames", str(50 + 30 * k), "--photons", "15", "--seed", str(5 + k),
             "--rate", "0", "--no-drop", "--wait-ms", "20000", "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for k, config in enumerate(configs)]
        for sim in sims:
            out, _ = sim.communicate(timeout=120)
            assert sim.returncode == 0, out
        for name, control in zip(("top", "bottom"), controls):
            status = wait_for(glint_bin, control, lambda s: s.get("state") == "idle")
            assert status, (work / f"glintd_{name}.log").read_text()
    finally:
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(timeout=30)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        for log in logs:
            log.close()
    return {"dir": work, **files}


@pytest.fixture(scope="module")
def master(glint_bin, parts):
    out = parts["dir"] / "joined" / "master.h5"
    out.parent.mkdir()
    # Given in the wrong order: the master puts the runs in module order.
    r = run_glint(glint_bin, "master", parts["bottom"], parts["top"], "--output", out)
    assert "4 modules, detector 64 x 48" in r.stdout, r.stdout
    return out


def test_run_files_record_their_modules(glint, parts):
    for k, name in enumerate(("top", "bottom")):
        with glint.RunFile(parts[name]) as run:
            assert run.has_modules
            assert run.shape == (ROWS, COLS)
            assert run.detector_shape == (2 * ROWS, COLS)
            assert run.detector_origin == (ROWS * k, 0)
            assert run.modules == [
                glint.Module(2 * k, (0, 0), (ROWS, 24), (ROWS * k, 0)),
                glint.Module(2 * k + 1, (0, 24), (ROWS, 24), (ROWS * k, 24))]
            local = np.concatenate(list(run.clusters(chunk=100)))
            image = np.concatenate(list(run.clusters(chunk=100, coordinates="image")))
            whole = np.concatenate(list(run.clusters(coordinates="detector")))
            event_id = run.file["/entry/clusters/event_id"][:len(local)]
            with pytest.raises(ValueError, match="allowed are file, image, detector"):
                run.clusters(coordinates="module")
        assert len(local) > 50
        assert set(np.unique(local["module"])) <= {2 * k, 2 * k + 1}
        assert (local["x"] < 24).all() and (local["y"] < ROWS).all()
        # The image coordinates are the pixel event_id names; the detector's are shifted.
        second = local["module"] == 2 * k + 1
        assert np.array_equal(image["x"], local["x"] + 24 * second)
        assert np.array_equal(image["y"].astype(np.uint32) * COLS + image["x"], event_id)
        assert np.array_equal(whole["y"], image["y"] + ROWS * k)
        assert np.array_equal(whole["x"], image["x"])
        assert np.array_equal(whole["data"], local["data"])


def test_the_master_file_is_one_detector(glint, parts, master, tmp_path, monkeypatch):
    # Read from elsewhere: the links are relative to the master's directory.
    monkeypatch.chdir(tmp_path)
    with glint.RunFile(parts["top"]) as top, glint.RunFile(parts["bottom"]) as bottom:
        hitmaps = [top.hitmap, bottom.hitmap]
        pedestals = [top.pedestal("end"), bottom.pedestal("end")]
        clusters = [np.concatenate(list(top.clusters())), np.concatenate(list(bottom.clusters()))]
    with h5py.File(master, "r") as f:
        det = f["entry/instrument/detector"]
        assert list(det.attrs["detector_shape"]) == [64, 48]
        assert det.attrs["modules"] == 4
        for m in range(4):
            g = det[f"module_{m:02}"]
            assert g.attrs["NX_class"] == "NXdetector_module"
            assert list(g["data_origin"][()]) == [ROWS * (m // 2), 24 * (m % 2)]
            assert list(g["data_size"][()]) == [ROWS, 24]
        assert np.array_equal(f["entry/hitmap/counts"][()], np.vstack(hitmaps))
        assert f["entry/hitmap/counts"][()].sum() == sum(len(c) for c in clusters)
        assert np.array_equal(f["entry/pedestal/end_mean"][()], np.vstack(pedestals))
        c = f["entry/clusters"]
        for name in ("frame_number", "x", "y", "module", "data"):
            assert np.array_equal(c[name][()], np.concatenate([p[name] for p in clusters])), name
        assert list(c.attrs["run_offsets"]) == [0, len(clusters[0]), sum(map(len, clusters))]
        assert [str(r) for r in c.attrs["runs"]] == ["top_000001", "bottom_000001"]
        # Each run's own groups, through the external links.
        assert np.array_equal(f["entry/runs/bottom_000001/hitmap/counts"][()], hitmaps[1])
        # Cluster positions in the detector: the module's place plus the local x, y.
        origin = np.array([det[f"module_{m:02}"]["data_origin"][()] for m in range(4)])
        rows = origin[c["module"][()], 0] + c["y"][()]
        cols = origin[c["module"][()], 1] + c["x"][()]
        placed = np.zeros((64, 48), np.uint64)
        np.add.at(placed, (rows, cols), 1)
        assert np.array_equal(placed, f["entry/hitmap/counts"][()])


def test_a_run_file_without_modules_is_one_module(glint, raw_run):
    with glint.RunFile(raw_run["run"]) as run:
        assert not run.has_modules
        assert run.modules == [glint.Module(0, (0, 0), (48, 40), (0, 0))]
        assert run.detector_shape == (48, 40) and run.detector_origin == (0, 0)
        assert "module" not in run.cluster_dtype().names
        stored = np.concatenate(list(run.clusters()))
        for coordinates in ("image", "detector"):
            moved = np.concatenate(list(run.clusters(coordinates=coordinates)))
            assert np.array_equal(moved, stored)
