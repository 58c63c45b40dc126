"""RunFile on a run that glintd is still writing (SWMR): every read during the run sees whole,
flushed rows only, each snapshot is a prefix of the closed file, and the rows grow. A reader that
holds the file open across the end of the run costs the run nothing."""
import contextlib
import json
import os
import subprocess
import time

import numpy as np
import pytest

from conftest import free_port, run_glint


@contextlib.contextmanager
def running_glintd(glint_bin, tmp_path):
    """A glintd on a 64 x 64 detector (200 dark frames, flushes every 100 ms), answering on its
    control socket: yields (the config file, the `glint ctl` arguments); shut down cleanly at the
    end (asserted), killed if the test failed."""
    glintd = os.path.join(os.path.dirname(glint_bin), "glintd")
    if not os.access(glintd, os.X_OK):
        pytest.skip(f"no glintd at {glintd}")
    control = f"tcp://127.0.0.1:{free_port()}"
    runs = tmp_path / "runs"
    config = tmp_path / "glintd.yaml"
    config.write_text(f"""
detector: {{rows: 64, cols: 64, ports: [1, 1]}}
ingest:
  endpoints: [tcp://127.0.0.1:{free_port()}]
pedestal: {{dark_frames: 200, window: 200}}
finder: {{backend: cpu, threads: 1}}
output: {{directory: {runs}, flush_interval_ms: 100}}
control: {{endpoint: {control}}}
""")
    log = open(tmp_path / "glintd.log", "w")
    daemon = subprocess.Popen([glintd, "--config", str(config)], stdout=log,
                              stderr=subprocess.STDOUT)
    ctl = ["ctl", "--endpoint", control]
    try:
        for _ in range(100):
            if run_glint(glint_bin, *ctl, "status", check=False).returncode == 0:
                break
            time.sleep(0.1)
        yield config, ctl
        run_glint(glint_bin, *ctl, "shutdown")
        assert daemon.wait(timeout=30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
        log.close()


def wait_for_the_run_to_end(glint_bin, ctl):
    for _ in range(100):
        status = json.loads(run_glint(glint_bin, *ctl, "status", "--json").stdout)
        if status.get("last_run"):
            return status
        time.sleep(0.1)
    raise AssertionError("the run did not end: " + json.dumps(status))


def start_run(glint_bin, ctl, config, frames, rate):
    """Starts a run and `glint sim` sending `frames` data frames at `rate`: (run file, sender)."""
    reply = json.loads(run_glint(glint_bin, *ctl, "start", "--json").stdout)
    sim = subprocess.Popen([glint_bin, "--log-level", "warn", "sim", "--config", str(config),
                            "--frames", str(frames), "--rate", str(rate), "--wait-ms", "10000",
                            "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return reply["file"], sim


def test_reading_a_run_while_glintd_writes_it(glint, glint_bin, tmp_path):
    with running_glintd(glint_bin, tmp_path) as (config, ctl):
        path, sim = start_run(glint_bin, ctl, config, 4000, 1000)
        snapshots = []
        while sim.poll() is None:
            with glint.RunFile(path) as run:
                assert run.swmr
                # Each read takes the rows flushed when it starts; the file grows meanwhile.
                frames = np.concatenate([np.empty(0, run.frame_dtype())] +
                                        list(run.frames(chunk=700)))
                clusters = np.concatenate([np.empty(0, run.cluster_dtype())] +
                                          list(run.clusters(chunk=700)))
            n, m = len(frames), len(clusters)
            if n:
                # A frame's clusters are written before its row: every row's clusters are there.
                last = frames[-1]
                assert last["cluster_offset"] + last["n_clusters"] <= m
            snapshots.append((n, m, frames, clusters))
            time.sleep(0.05)
        assert sim.wait() == 0, sim.stdout.read()
        wait_for_the_run_to_end(glint_bin, ctl)
    with glint.RunFile(path) as run:
        assert run.n_frames == 4200
        final_frames = np.concatenate(list(run.frames()))
        final_clusters = np.concatenate(list(run.clusters()))
    assert len(final_clusters) > 1000
    growing = [s for s in snapshots if 0 < s[0] < 4200]
    assert len(growing) >= 3, f"{len(snapshots)} reads, {len(growing)} during the data frames"
    previous = (0, 0)
    for n, m, frames, clusters in snapshots:
        assert n >= previous[0] and m >= previous[1]
        previous = (n, m)
        assert np.array_equal(frames, final_frames[:n])
        assert np.array_equal(clusters, final_clusters[:m])


def test_a_reader_holding_the_file_at_the_end_of_a_run_loses_nothing(glint_bin, tmp_path):
    """A scientist's h5py session with the run file open (SWMR) while the run ends: glintd still
    writes the end time, the end reason and the products, and the run does not fail."""
    h5py = pytest.importorskip("h5py")
    with running_glintd(glint_bin, tmp_path) as (config, ctl):
        path, sim = start_run(glint_bin, ctl, config, 600, 2000)
        reader = None
        while reader is None and sim.poll() is None:
            try:
                reader = h5py.File(path, "r", libver="latest", swmr=True)
            except OSError:
                time.sleep(0.05)  # not created yet
        assert reader is not None, "the run file never appeared"
        try:
            assert sim.wait() == 0, sim.stdout.read()
            status = wait_for_the_run_to_end(glint_bin, ctl)
        finally:
            reader.close()
        assert status["state"] == "idle", json.dumps(status)
        assert status["last_run"]["error"] == "", json.dumps(status)
        assert status["last_run"]["end_reason"] == "end of acquisition", json.dumps(status)
    with h5py.File(path, "r") as f:
        entry = f["entry"]
        assert "end_time" in entry.attrs
        assert entry.attrs["end_reason"] in (b"end of acquisition", "end of acquisition")
        assert f["entry/frames/frame_number"].shape[0] == 800
        assert int(f["entry/hitmap/counts"][()].sum()) == f["entry/clusters/x"].shape[0]
