"""scripts/find_timeline.py: the GPU finder's per-batch timeline (GLINT_FIND_TIMELINE) summarised."""
import csv
import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "find_timeline.py")


@pytest.fixture(scope="module")
def timeline():
    spec = importlib.util.spec_from_file_location("find_timeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_timeline(path, n=40, period=170.0, partial=()):
    """n full batches of 100 frames on two slots, every 170 us: upload 100 us ending 5 us before
    its find, find 150, result copy 300 from 2 us after the find; the first four batches
    (the warm-up) twice as slow, and a partial batch of 30 frames at the end (and at each seq in
    `partial`)."""
    header = ["seq", "slot", "fb", "frames", "clusters", "up0", "up1", "find0", "find1", "d2h0",
              "d2h1", "host_submit", "host_wait0", "host_wait1"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        t = 1000.0
        for i in range(n + 1):
            slow = 2.0 if i < 4 else 1.0
            frames = 30 if i == n or i in partial else 100
            up1 = t - 5.0
            up0 = up1 - 100.0 * slow
            find1 = t + 150.0 * slow
            d2h0 = find1 + 2.0
            w.writerow([i, i % 2, i % 3, frames, 5 * frames, up0, up1, t, find1,
                        d2h0, d2h0 + 300.0, 50.0 * i, 50.0 * i + 1.0, 50.0 * i + 21.0])
            t += period * slow


def test_the_steps_the_gaps_and_the_latency_in_periods(tmp_path, timeline):
    path = tmp_path / "timeline.csv"
    write_timeline(path)
    s = timeline.summarize(timeline.load(path))
    assert s["batches"] == 36  # 41 rows: the first 4 (a tenth) skipped, the partial one left out
    assert s["frames"] == 100
    assert s["slots"] == 2
    assert s["clusters_per_frame"] == pytest.approx(5.0)
    for key, want in [("upload", 100.0), ("find", 150.0), ("copy", 300.0),
                      ("period", 170.0), ("idle", 20.0), ("after_upload", 5.0),
                      ("host_wait", 20.0)]:
        assert s[key]["median"] == pytest.approx(want), key
        assert s[key]["p10"] == pytest.approx(want), key
        assert s[key]["p90"] == pytest.approx(want), key
    # From the upload's start (105 us before the find) to the copy's end (452 us after it).
    assert s["latency"]["median"] == pytest.approx(557.0)
    assert s["latency_periods"] == pytest.approx(557.0 / 170.0)


def test_skipping_nothing_takes_the_warm_up_in(tmp_path, timeline):
    path = tmp_path / "timeline.csv"
    write_timeline(path)
    s = timeline.summarize(timeline.load(path), skip=0)
    assert s["batches"] == 40
    assert s["find"]["p90"] == pytest.approx(150.0)  # 4 of 40 slow batches: above the 90th
    assert s["find"]["median"] == pytest.approx(150.0)
    assert timeline.spread([300.0] * 4 + [150.0] * 36)["p90"] == pytest.approx(150.0)
    assert timeline.spread([300.0] * 5 + [150.0] * 35)["p90"] == pytest.approx(300.0)


def test_partial_batches_mid_run_leave_the_period_and_the_gaps_as_they_are(tmp_path, timeline):
    # The full batches around a partial one are two periods apart: that pair is not a period.
    # Six of them among 36 batches: more than a tenth, so p90 would show them.
    path = tmp_path / "timeline.csv"
    write_timeline(path, partial=(10, 14, 18, 22, 26, 30))
    s = timeline.summarize(timeline.load(path))
    assert s["batches"] == 30
    for key, want in [("period", 170.0), ("idle", 20.0)]:
        assert s[key]["p10"] == pytest.approx(want), key
        assert s[key]["p90"] == pytest.approx(want), key


def test_the_command_prints_the_table_and_refuses_other_files(tmp_path):
    path = tmp_path / "timeline.csv"
    write_timeline(path)
    out = subprocess.run([sys.executable, SCRIPT, str(path)], capture_output=True, text=True,
                         check=True).stdout
    assert "36 full batches of 100 frames, 5.0 clusters per frame, 2 slot(s)" in out
    assert "latency / period: 3.28 (at most 3 fit with 2 slot(s))" in out
    find_line = next(line for line in out.splitlines() if line.startswith("find "))
    assert find_line.split()[1:] == ["150.0", "150.0", "150.0", "1.500"]
    other = tmp_path / "trace.csv"
    other.write_text("segment,k,g\n0,0,1\n")
    r = subprocess.run([sys.executable, SCRIPT, str(other)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "not a GLINT_FIND_TIMELINE file" in r.stderr
    short = tmp_path / "short.csv"
    write_timeline(short, n=2)
    r = subprocess.run([sys.executable, SCRIPT, str(short)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "too few full batches" in r.stderr
