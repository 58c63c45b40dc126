"""Run files against the NeXus standard: files made by glintd from a `glint sim` stream and by
`glint find` on calibrated JUNGFRAU frames are checked with nexusformat's `nxcheck` (the NXDL
base classes it ships, offline), and the NXevent_data fields are checked value by value.

nxcheck reports nothing as an error in these files. Its warnings are glint's own metadata,
which the base classes do not define and NeXus allows (docs/file-layout.md): the attributes of
/entry and /entry/instrument/detector, the module_id, detector_origin and orientation
attributes of the NXdetector_module groups, the /entry/config and /entry/flushed_rows fields,
and the reconstruction's tables and parameters in /entry/reconstruction (NXprocess).
Every other warning fails the test, as does any error.

The validator comes from scripts/setup.sh (a virtual environment, GLINT_NEXUS_VENV, default
/opt/glint/nexus). Without it the tests skip, unless GLINT_NEXUS_REQUIRED is set (scripts/test.sh
sets it)."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import h5py
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("GLINT_BIN", os.path.join(HERE, "..", "..", "build", "bin"))
VENV = os.environ.get("GLINT_NEXUS_VENV", "/opt/glint/nexus")
NXCHECK = os.path.join(VENV, "bin", "nxcheck")

GLINT_ENTRY_ATTRS = {"start_time", "end_time", "program_name", "program_version", "end_reason",
                     "stream_stride"}
GLINT_DETECTOR_ATTRS = {"frame_shape", "pixel_type", "detector_type", "source", "n_sigma",
                        "cluster_size", "backend", "pedestal_window",
                        "modules", "module_grid", "detector_shape", "detector_origin"}
# Of each NXdetector_module group (/entry/instrument/detector/module_<id>): its id, its place
# in the whole detector and its orientation (the NeXus pixel directions are fields of the class).
GLINT_MODULE_ATTRS = {"module_id", "detector_origin", "orientation"}
ACCEPTED = {("/entry", f'"@{a}" is not defined as an attribute in NXentry')
            for a in GLINT_ENTRY_ATTRS}
ACCEPTED |= {("/entry/instrument/detector", f'"@{a}" is not defined as an attribute in NXdetector')
             for a in GLINT_DETECTOR_ATTRS}
ACCEPTED |= {("/entry/config", "This field is not defined in NXentry"),
             ("/entry/flushed_rows", "This field is not defined in NXentry")}


def accepted(finding):
    """glint's metadata; in /entry/reconstruction (NXprocess) its tables and parameters."""
    where, message = finding
    if finding in ACCEPTED:
        return True
    if re.fullmatch(r"/entry/instrument/detector/module_\d+", where):
        return any(message == f'"@{a}" is not defined as an attribute in NXdetector_module'
                   for a in GLINT_MODULE_ATTRS)
    return where.startswith("/entry/reconstruction") and (
        re.fullmatch(r'"@\w+" is not defined as an attribute in NXprocess', message) or
        message == "This field is not defined in NXprocess")


def nxcheck(path):
    """nxcheck's findings as (path, message) pairs, and its error count."""
    if not os.access(NXCHECK, os.X_OK):
        if os.environ.get("GLINT_NEXUS_REQUIRED"):
            pytest.fail(f"{NXCHECK} is missing: scripts/setup.sh installs nexusformat there")
        pytest.skip(f"{NXCHECK} is missing: scripts/setup.sh installs nexusformat there")
    r = subprocess.run([NXCHECK, "-w", path], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, NO_COLOR="1"))
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout + r.stderr)
    assert r.returncode == 0, out
    errors = re.search(r"Total number of errors: (\d+)", out)
    assert errors, out  # nxcheck read the file (it reports a missing file without counts)
    found, where = [], None
    for line in out.splitlines():
        s = line.strip()
        head = re.match(r"(?:NX\w+|Field): (/\S*)$", s)
        if head:
            where = head.group(1)
        elif s and where and not s.startswith("Total number of"):
            found.append((where, s))
    return found, int(errors.group(1)), out


def expect_conformant(path):
    found, errors, out = nxcheck(path)
    assert errors == 0, out
    unexpected = [f for f in found if not accepted(f)]
    assert not unexpected, out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def daemon_run(tmp_path_factory):
    """A run file written by glintd from `glint sim` (2 ports, 24 dark and 300 data frames),
    reconstructing (/entry/reconstruction)."""
    work = tmp_path_factory.mktemp("nexus_glintd")
    runs = work / "runs"
    ports = [free_port(), free_port()]
    config = work / "glintd.yaml"
    config.write_text(f"""
detector: {{rows: 64, cols: 48, ports: [1, 2]}}
ingest:
  endpoints: [tcp://127.0.0.1:{ports[0]}, tcp://127.0.0.1:{ports[1]}]
pedestal: {{dark_frames: 24, window: 24}}
finder: {{backend: cpu, threads: 1, n_sigma: 5.0}}
output: {{directory: {runs}, flush_interval_ms: 200}}
run: {{auto_start: true}}
reconstruction: {{enabled: true, frames_per_slice: 50, slices: 4, backend: cpu, outer: 2,
                 tv_inner: 2}}
control: {{endpoint: tcp://127.0.0.1:{free_port()}}}
preview: {{endpoint: "tcp://127.0.0.1:*"}}
""")
    log = open(work / "glintd.log", "w")
    daemon = subprocess.Popen([f"{BIN}/glintd", "--config", str(config)], stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        sim = subprocess.run(
            [f"{BIN}/glint", "--log-level", "warn", "sim", "--rows", "64", "--cols", "48",
             "--ports", "1", "2", "--endpoint", f"tcp://127.0.0.1:{ports[0]}",
             "--endpoint", f"tcp://127.0.0.1:{ports[1]}", "--dark", "24", "--frames", "300",
             "--photons", "30", "--rate", "2000", "--no-drop", "--wait-ms", "20000", "-q"],
            capture_output=True, text=True, timeout=120)
        assert sim.returncode == 0, sim.stdout + sim.stderr
        deadline = time.time() + 60
        while time.time() < deadline:
            for name in sorted(os.listdir(runs)) if runs.exists() else []:
                path = str(runs / name)
                try:
                    with h5py.File(path, "r", libver="latest", swmr=True) as f:
                        if "end_time" in f["entry"].attrs:
                            return path
                except OSError:
                    pass  # still being created, or closed and reopened for end_time
            time.sleep(0.2)
        pytest.fail("glintd wrote no closed run file: " + (work / "glintd.log").read_text())
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()


def glint_ctl(endpoint, *args, check=True):
    return subprocess.run([f"{BIN}/glint", "ctl", "--endpoint", endpoint, *args],
                          capture_output=True, text=True, timeout=60, check=check)


@pytest.fixture(scope="module")
def module_run(tmp_path_factory):
    """A run file written by glintd on two modules (detector.modules [2, 1]) that are modules 4
    and 5 of a larger detector (detector.placement), the second mounted upside down
    (detector.module_orientation), from `glint sim` (2 ports)."""
    work = tmp_path_factory.mktemp("nexus_modules")
    runs = work / "runs"
    control = f"tcp://127.0.0.1:{free_port()}"
    config = work / "glintd.yaml"
    config.write_text(f"""
detector: {{rows: 32, cols: 48, ports: [2, 1], modules: [2, 1],
           module_orientation: [normal, flip_rows],
           placement: {{detector_shape: [64, 96], origin: [32, 48], first_module: 4}}}}
ingest:
  endpoints: [tcp://127.0.0.1:{free_port()}, tcp://127.0.0.1:{free_port()}]
pedestal: {{dark_frames: 24, window: 24}}
finder: {{backend: cpu, threads: 1, n_sigma: 5.0}}
output: {{directory: {runs}, flush_interval_ms: 200}}
control: {{endpoint: {control}}}
preview: {{endpoint: "tcp://127.0.0.1:*"}}
""")
    log = open(work / "glintd.log", "w")
    daemon = subprocess.Popen([f"{BIN}/glintd", "--config", str(config)], stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while glint_ctl(control, "status", check=False).returncode != 0:
            assert time.time() < deadline, (work / "glintd.log").read_text()
            time.sleep(0.1)
        path = json.loads(glint_ctl(control, "start", "--json").stdout)["file"]
        sim = subprocess.run(
            [f"{BIN}/glint", "--log-level", "warn", "sim", "--config", str(config), "--dark",
             "24", "--frames", "100", "--photons", "20", "--rate", "0", "--no-drop",
             "--wait-ms", "20000", "-q"], capture_output=True, text=True, timeout=120)
        assert sim.returncode == 0, sim.stdout + sim.stderr
        deadline = time.time() + 60
        while True:
            status = json.loads(glint_ctl(control, "status", "--json").stdout)
            if status.get("state") == "idle":
                return path
            assert time.time() < deadline, (work / "glintd.log").read_text()
            time.sleep(0.1)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()


@pytest.fixture(scope="module")
def calibrated_run(tmp_path_factory):
    """A run file of calibrated JUNGFRAU frames written by glint find, with every product."""
    work = tmp_path_factory.mktemp("nexus_jungfrau")
    frames, gain, ped, out = (str(work / n) for n in ("jf.h5", "gain.bin", "ped.bin", "cal.h5"))
    subprocess.run([f"{BIN}/glint", "synth", "-q", "-o", frames, "--rows", "32", "--cols", "64",
                    "--dark", "1000", "--frames", "100", "--photons", "20", "--jungfrau",
                    "--gain-switch-rate", "2e-3", "--seed", "7", "--gain-file", gain,
                    "--pedestal-file", ped], check=True, timeout=120)
    subprocess.run([f"{BIN}/glint", "find", "-q", "-i", frames, "--detector", "jungfrau",
                    "--backend", "cpu", "--gain-file", gain, "--pedestal-file", ped,
                    "--output", out, "--products", "all,slices:40", "--energy-window", "1,40"],
                   check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def subpixel_run(tmp_path_factory):
    """A run file of raw frames written by glint find with every product and the sub-pixel
    image, through an eta calibration of a flat field (glint synth --photon-grid)."""
    work = tmp_path_factory.mktemp("nexus_subpixel")
    flat, flat_run, eta, frames, out = (str(work / n) for n in
                                        ("flat.h5", "flat_run.h5", "eta.h5", "in.h5", "sp.h5"))
    glint = f"{BIN}/glint"
    for args in (["synth", "-q", "-o", flat, "--rows", "32", "--cols", "40", "--dark", "1000",
                  "--frames", "100", "--photon-grid", "4", "--seed", "5"],
                 ["find", "-q", "-i", flat, "--backend", "cpu", "--output", flat_run],
                 ["eta-calibrate", "-q", flat_run, "-o", eta, "--bins", "20"],
                 ["synth", "-q", "-o", frames, "--rows", "32", "--cols", "40", "--dark", "1000",
                  "--frames", "50", "--photons", "15", "--seed", "6"],
                 ["find", "-q", "-i", frames, "--backend", "cpu", "--output", out,
                  "--products", "all,subpixel", "--eta-calibration", eta, "--subpixel", "4"]):
        subprocess.run([glint] + args, check=True, timeout=120)
    return out


def check_event_fields(path):
    """The NXevent_data fields are the frame and cluster tables, mapped (exact values)."""
    with h5py.File(path, "r") as f:
        cols = int(f["entry/instrument/detector"].attrs["frame_shape"][1])
        c = f["entry/clusters"]
        e = f["entry/instrument/events"]
        assert e.attrs["NX_class"] == "NXevent_data"
        n_clusters = f["entry/frames/n_clusters"][:].astype(np.uint64)
        index = np.concatenate([[0], np.cumsum(n_clusters)[:-1]]).astype(np.uint64)
        assert n_clusters.sum() > 0
        assert np.array_equal(e["event_index"][:], index)
        assert np.array_equal(e["event_index"][:], f["entry/frames/cluster_offset"][:])
        assert np.array_equal(e["event_time_zero"][:],
                              f["entry/frames/timestamp"][:].astype(np.uint64) * 100)
        assert e["event_time_zero"].attrs["units"] == "ns"
        want_id = c["y"][:].astype(np.uint32) * cols + c["x"][:]
        assert np.array_equal(e["event_id"][:], want_id)
        assert np.array_equal(e["event_time_offset"][:], np.zeros(len(want_id), np.uint32))
        assert len(e["event_time_offset"]) == len(c["data"])
        return f["entry/frames/timestamp"][:]


def test_glintd_run_file_is_nexus(daemon_run):
    timestamps = check_event_fields(daemon_run)
    with h5py.File(daemon_run, "r") as f:
        assert len(f["entry/reconstruction/first_frame"]) >= 1  # the NXprocess is checked too
    # glint sim stamps frame n with n * 10000 ticks (1 ms): the times are real, not zeros.
    data = timestamps[timestamps > 0]
    assert len(data) >= 300
    expect_conformant(daemon_run)


def test_calibrated_jungfrau_run_file_is_nexus(calibrated_run):
    check_event_fields(calibrated_run)
    with h5py.File(calibrated_run, "r") as f:
        adc = f["entry/pedestal/calibration"]
        assert adc.shape == (3, 32, 64)
        assert adc.attrs["units"] == "ADU"
        assert not np.isnan(adc[:]).any()
        assert f["entry/clusters/data"].dtype == np.float32
    expect_conformant(calibrated_run)


def test_a_class_out_of_place_is_an_error(daemon_run, tmp_path):
    """The check fails where NeXus says no: NXevent_data directly in NXentry (where glint wrote
    /entry/clusters before) is an error to nxcheck."""
    bad = str(tmp_path / "bad.h5")
    with open(daemon_run, "rb") as src, open(bad, "wb") as dst:
        dst.write(src.read())
    with h5py.File(bad, "r+") as f:
        f["entry/clusters"].attrs["NX_class"] = "NXevent_data"
    _, errors, out = nxcheck(bad)
    assert errors >= 1, out


def test_subpixel_image_is_nexus(subpixel_run):
    with h5py.File(subpixel_run, "r") as f:
        g = f["entry/subpixel_image"]
        assert g.attrs["NX_class"] == "NXdata"
        assert g.attrs["signal"] == "counts"
        assert list(g.attrs["axes"]) == ["y", "x"]
        assert g["counts"].shape == (32 * 4, 40 * 4)
        assert g["counts"].dtype == np.uint64
        assert np.array_equal(g["x"][:], (np.arange(160) + 0.5) / 4)
        assert np.array_equal(g["y"][:], (np.arange(128) + 0.5) / 4)
        assert g.attrs["factor"] == 4
        inside = int(g["counts"][:].sum())
        assert inside > 0
        assert inside + g.attrs["outside"] + g.attrs["off_detector"] == g.attrs["clusters"]
    expect_conformant(subpixel_run)


def test_module_run_file_is_nexus(module_run):
    """The module groups (NXdetector_module) and /entry/clusters/module of a run on modules."""
    with h5py.File(module_run, "r") as f:
        det = f["entry/instrument/detector"]
        assert list(det.attrs["detector_shape"]) == [64, 96]
        assert list(det.attrs["detector_origin"]) == [32, 48]
        assert det.attrs["modules"] == 2
        assert list(det.attrs["module_grid"]) == [1, 2]
        for k, module in enumerate((4, 5)):
            g = det[f"module_{module:02}"]
            assert g.attrs["NX_class"] == "NXdetector_module"
            assert g.attrs["module_id"] == module
            assert list(g["data_origin"][()]) == [0, 24 * k]
            assert list(g["data_size"][()]) == [32, 24]
            assert list(g.attrs["detector_origin"]) == [32, 48 + 24 * k]
            # Module 5 upside down: its native rows run up the image from its last row.
            assert g.attrs["orientation"] == ("normal", "flip_rows")[k]
            fast, slow = g["fast_pixel_direction"], g["slow_pixel_direction"]
            assert fast.attrs["transformation_type"] == "translation"
            assert list(fast.attrs["vector"]) == [1, 0, 0]
            assert list(slow.attrs["vector"]) == [0, (1, -1)[k], 0]
            assert list(slow.attrs["offset"]) == [24 * k, (0, 31)[k], 0]
        c = f["entry/clusters"]
        assert len(c["module"]) == len(c["x"]) > 0
        assert set(np.unique(c["module"][()])) <= {4, 5}
        assert (c["x"][()] < 24).all()
    expect_conformant(module_run)
