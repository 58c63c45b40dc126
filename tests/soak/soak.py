#!/usr/bin/python3
"""Soak and fault test of glintd: many acquisitions back to back at a sustained rate, with
faults injected, checking that memory and descriptors stay flat and that every frame sent is
accounted for in the run files.

Each cycle is one acquisition that `glint sim` streams to a running glintd (auto_start on), with
one fault kind chosen in turn:
  clean      - no fault
  malformed  - malformed messages among the parts (`--fault malformed:N`): counted as bad input
  restart    - the sender stops mid-acquisition and a new sender continues the stream (`--skip`)
  storm      - a control-socket storm during the run: many clients at once, valid requests and
               garbage (bare words, bad JSON, oversized and deeply nested requests)
  reload     - SIGHUP during the run with a new valid configuration, then with a broken one (which
               must be refused and the old one kept)
  disk_low   - the run writes to a small tmpfs that fills up (root only; skipped otherwise): the
               run ends with reason disk_low and its file still opens with every row flushed

After every cycle the run file is opened with h5py: its frame numbers are exactly the images sent
(first..last, each once); rows flagged missing/incomplete/dropped are allowed only where the
fault explains them. glintd's resident memory and open descriptors are sampled after every cycle;
at the end the later half of the samples must not grow beyond a tolerance over the earlier half.

Usage: soak.py --bin build/bin --minutes 30 --rate 2000 [--workdir DIR] [--report FILE]
Exit status 0 when every check held; the report (JSON) has the figures.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import h5py
import numpy as np
import zmq

FLAG_INCOMPLETE = 1
FLAG_DARK = 2
FLAG_MISSING = 8
FLAG_DROPPED = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Control:
    """A REQ client of glintd's control socket (a fresh socket per request: a REQ socket whose
    request went unanswered cannot send again)."""

    def __init__(self, ctx, endpoint):
        self.ctx = ctx
        self.endpoint = endpoint

    def request(self, payload, timeout_ms=3000):
        s = self.ctx.socket(zmq.REQ)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVTIMEO, timeout_ms)
        s.connect(self.endpoint)
        try:
            s.send(payload if isinstance(payload, bytes) else payload.encode())
            return s.recv()
        except zmq.Again:
            return None
        finally:
            s.close()

    def json(self, command, **kw):
        reply = self.request(json.dumps(dict(command=command, **kw)))
        if reply is None:
            raise RuntimeError(f"glintd did not answer '{command}'")
        return json.loads(reply)


def proc_sample(pid):
    rss_kb = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    # Descriptors open in each of three looks 50 ms apart: a leaked one stays open and counts in
    # all of them; one open for a moment (seen once after a disk_low cycle, gone at the next
    # sample) does not.
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    for _ in range(2):
        time.sleep(0.05)
        fds = min(fds, len(os.listdir(f"/proc/{pid}/fd")))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    return rss_kb, fds, threads


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.work = args.workdir or tempfile.mkdtemp(prefix="glint_soak_")
        os.makedirs(self.work, exist_ok=True)
        self.runs_dir = os.path.join(self.work, "runs")
        os.makedirs(self.runs_dir, exist_ok=True)
        self.ports = [free_port(), free_port()]
        self.control_ep = f"tcp://127.0.0.1:{free_port()}"
        self.config = os.path.join(self.work, "glintd.yaml")
        self.ctx = zmq.Context()
        self.ctl = Control(self.ctx, self.control_ep)
        self.failures = []
        self.cycles = []
        self.samples = []
        self.tmpfs = None
        self.last_index = {}  # the last run checked, per run-name prefix (indices only grow)

    # -- configuration -----------------------------------------------------------------------
    def write_config(self, n_sigma=5.0, directory=None, broken=False):
        a = self.args
        text = f"""
detector: {{rows: {a.rows}, cols: {a.cols}, ports: [1, 2]}}
ingest:
  endpoints: [tcp://127.0.0.1:{self.ports[0]}, tcp://127.0.0.1:{self.ports[1]}]
  queue_frames: 1024
pedestal: {{dark_frames: {a.dark}, window: {a.dark}}}
finder: {{backend: {a.backend}, threads: {a.threads}, n_sigma: {n_sigma}}}
output: {{directory: {directory or self.runs_dir}, flush_interval_ms: 200}}
run: {{auto_start: true}}
control: {{endpoint: {self.control_ep}}}
preview: {{endpoint: "tcp://127.0.0.1:*"}}
logging: {{level: info}}
"""
        if broken:
            text += "finder_typo: {n_sigma: 3}\n"
        with open(self.config + ".tmp", "w") as f:
            f.write(text)
        os.replace(self.config + ".tmp", self.config)

    # -- processes ---------------------------------------------------------------------------
    def start_daemon(self):
        self.write_config()
        self.log = open(os.path.join(self.work, "glintd.log"), "w")
        self.daemon = subprocess.Popen([f"{self.bin}/glintd", "--config", self.config],
                                       stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                self.ctl.json("status")
                return
            except RuntimeError:
                time.sleep(0.2)
        raise RuntimeError("glintd did not come up")

    def sim(self, frames, dark, extra=(), no_end=False, skip=None):
        cmd = [f"{self.bin}/glint", "--log-level", "warn", "sim", "--rows", str(self.args.rows),
               "--cols", str(self.args.cols), "--ports", "1", "2",
               "--endpoint", f"tcp://127.0.0.1:{self.ports[0]}",
               "--endpoint", f"tcp://127.0.0.1:{self.ports[1]}",
               "--dark", str(dark), "--frames", str(frames), "--rate", str(self.args.rate),
               "--pool", "64", "--no-drop", "--wait-ms", "10000", "-q", *extra]
        if no_end:
            cmd.append("--no-end")
        if skip is not None:
            cmd += ["--skip", str(skip)]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_run(self, index, timeout):
        """Waits until run `index` has ended; returns its last_run record."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.ctl.json("status")
            last = s.get("last_run")
            if last and last.get("run_index", 0) >= index:
                if last["run_index"] != index:
                    raise RuntimeError(f"waited for run {index}, but run {last['run_index']} ended")
                self.last_index[last["file"][:-10]] = index
                return s, last
            time.sleep(0.1)
        raise RuntimeError(f"run {index} did not end within {timeout} s")

    def wait_current(self):
        """The index of the run glintd is taking now (auto_start), once it listens."""
        deadline = time.time() + 20
        while time.time() < deadline:
            s = self.ctl.json("status")
            if (s.get("state") in ("pedestal", "acquiring") and
                    s.get("run_index", 0) > self.last_index.get(s.get("file", "")[:-10], 0)):
                return s["run_index"]
            time.sleep(0.05)
        raise RuntimeError("no run started (auto_start)")

    # -- faults ------------------------------------------------------------------------------
    def storm(self, stop):
        """Many clients at once with valid and hostile requests until `stop` is set."""
        bad = [b"", b"\x00\xff\xfe", b"{", b'{"command": 5}', b"status" * 2000,
               b'{"command": "start", "overrides": ' + b"[" * 5000 + b"]" * 5000 + b"}",
               b'{"command": "frobnicate"}', b'{"command": "stats"}', b'"status"']
        answered = [0]

        def client(k):
            i = 0
            while not stop.is_set():
                reply = self.ctl.request(bad[(i + k) % len(bad)], timeout_ms=2000)
                if reply is not None:
                    answered[0] += 1
                i += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(self.args.storm_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return answered[0]

    def mount_tmpfs(self, mb):
        d = os.path.join(self.work, "small")
        os.makedirs(d, exist_ok=True)
        if subprocess.call(["mount", "-t", "tmpfs", "-o", f"size={mb}m", "tmpfs", d],
                           stderr=subprocess.DEVNULL) != 0:
            return None
        self.tmpfs = d
        return d

    def unmount_tmpfs(self):
        if self.tmpfs:
            subprocess.call(["umount", "-l", self.tmpfs])
            # A fresh tmpfs numbers its runs from 1 again.
            self.last_index = {k: v for k, v in self.last_index.items()
                               if not k.startswith(self.tmpfs + "/")}
            self.tmpfs = None

    # -- checks ------------------------------------------------------------------------------
    def check_file(self, path, first, count, kind, last):
        """Every image sent is one row; flags only where the fault explains them."""
        problems = []
        try:
            f = h5py.File(path, "r", locking=False)
        except OSError:
            # A file the writer could not close cleanly is opened after h5clear (docs/file-layout).
            subprocess.call(["h5clear", "-s", path], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
            f = h5py.File(path, "r", locking=False)
        with f:
            fn = f["/entry/frames/frame_number"][:]
            flags = f["/entry/frames/flags"][:]
            n_clusters = f["/entry/frames/n_clusters"][:]
            n_rows_clusters = f["/entry/clusters/frame_number"].shape[0]
        rows = len(fn)
        info = dict(rows=rows, clusters=int(n_clusters.sum()))
        info["flags"] = {k: int(((flags & v) != 0).sum()) for k, v in
                         (("dark", FLAG_DARK), ("incomplete", FLAG_INCOMPLETE),
                          ("missing", FLAG_MISSING), ("dropped", FLAG_DROPPED))}
        if int(n_clusters.sum()) != n_rows_clusters:
            problems.append(f"{path}: n_clusters sum {n_clusters.sum()} != {n_rows_clusters} rows")
        if kind == "disk_low":
            # Ends early: rows are a prefix of the images sent, every one of them present.
            expect = np.arange(first, first + rows, dtype=np.uint64)
            if rows == 0 or not np.array_equal(fn, expect):
                problems.append(f"{path}: rows are not a gap-free prefix of the stream")
            if last.get("end_reason") != "disk_low":
                problems.append(f"{path}: end reason {last.get('end_reason')!r}, not disk_low")
            return info, problems
        expect = np.arange(first, first + count, dtype=np.uint64)
        if not np.array_equal(fn, expect):
            problems.append(f"{path}: frame numbers are not {first}..{first + count - 1} "
                            f"once each ({rows} rows)")
        lossy = info["flags"]["incomplete"] + info["flags"]["missing"] + info["flags"]["dropped"]
        if kind in ("clean", "restart", "storm", "reload") and lossy:
            problems.append(f"{path}: {lossy} rows flagged lost in a '{kind}' cycle")
        if kind == "malformed" and lossy == 0:
            problems.append(f"{path}: malformed parts were sent but no row says so")
        return info, problems

    # -- the cycles --------------------------------------------------------------------------
    def cycle(self, n, kind):
        a = self.args
        frames, dark = a.frames, a.dark
        count = dark + frames
        if kind == "disk_low":
            d = self.mount_tmpfs(a.tmpfs_mb)
            if d is None:
                kind = "clean"
            else:
                self.write_config(directory=d)
                self.daemon.send_signal(signal.SIGHUP)
                time.sleep(0.5)
                # The reload applies from the next run: end the current one first.
                idx = self.wait_current()
                self.ctl.json("stop")
                self.wait_run(idx, 30)
                # A stream long enough to fill the tmpfs.
                frames = a.frames * 3
                count = dark + frames
        index = self.wait_current()
        # Sampled at the same moment of every cycle: a run has just started and listens.
        time.sleep(0.2)
        rss, fds, threads = proc_sample(self.daemon.pid)
        self.samples.append(dict(t=time.time(), rss_kb=rss, fds=fds, threads=threads))
        t0 = time.time()
        stop = threading.Event()
        extra_threads = []
        storm_answered = [0]
        if kind == "malformed":
            p = self.sim(frames, dark, extra=["--fault", "malformed:97"])
            out = p.communicate()[0]
        elif kind == "restart":
            half = count // 2
            p = self.sim(half - dark, dark, no_end=True)
            p.communicate()
            time.sleep(0.3)
            p = self.sim(frames, dark, skip=half)  # the same stream from image `half` on
            out = p.communicate()[0]
        else:
            if kind == "storm":
                t = threading.Thread(target=lambda: storm_answered.__setitem__(0, self.storm(stop)))
                t.start()
                extra_threads.append(t)
            if kind == "reload":
                def reloads():
                    time.sleep(0.2)
                    self.write_config(n_sigma=5.5)
                    self.daemon.send_signal(signal.SIGHUP)
                    time.sleep(0.3)
                    self.write_config(broken=True)
                    self.daemon.send_signal(signal.SIGHUP)
                    time.sleep(0.3)
                    self.write_config()
                    self.daemon.send_signal(signal.SIGHUP)
                t = threading.Thread(target=reloads)
                t.start()
                extra_threads.append(t)
            p = self.sim(frames, dark)
            out = p.communicate()[0]
        # A run that ends on disk_low stops listening while the stream goes on: glint sim
        # reports the images that reached no subscriber and exits 1, as it should.
        lost_after_disk_low = (kind == "disk_low" and p.returncode == 1 and
                               "had no subscriber and are lost" in out)
        if p.returncode != 0 and not lost_after_disk_low:
            self.failures.append(f"cycle {n}: glint sim exited {p.returncode}: {out.strip()}")
        stop.set()
        for t in extra_threads:
            t.join()
        status, last = self.wait_run(index, 60)
        info, problems = self.check_file(last["file"], 1, count, kind, last)
        if self.daemon.poll() is not None:
            problems.append(f"glintd exited with {self.daemon.returncode}")
        if kind == "disk_low":
            os.remove(last["file"])  # the tmpfs is unmounted below
            self.write_config()
            self.daemon.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            idx = self.wait_current()
            self.ctl.json("stop")
            self.wait_run(idx, 30)
            self.unmount_tmpfs()
        else:
            # Emptied, not removed, so that the disk does not fill over a long soak: glintd takes
            # the next run index from the names in the directory.
            os.truncate(last["file"], 0)
        rec = dict(cycle=n, kind=kind, run=index, sent=count, seconds=round(time.time() - t0, 2),
                   end_reason=last.get("end_reason"), rss_kb=rss, fds=fds, **info)
        if kind == "storm":
            rec["storm_replies"] = storm_answered[0]
        self.cycles.append(rec)
        for pr in problems:
            self.failures.append(f"cycle {n} ({kind}): {pr}")
        print(json.dumps(rec), flush=True)

    def run(self):
        kinds = ["clean", "malformed", "restart", "storm", "reload", "disk_low"]
        self.start_daemon()
        end = time.time() + self.args.minutes * 60
        n = 0
        try:
            while time.time() < end or n < len(kinds):
                self.cycle(n, kinds[n % len(kinds)])
                n += 1
        finally:
            stats = None
            try:
                stats = self.ctl.json("stats")
                self.ctl.json("shutdown")
            except RuntimeError as e:
                self.failures.append(str(e))
            try:
                rc = self.daemon.wait(timeout=30)
                if rc != 0:
                    self.failures.append(f"glintd exited {rc} after shutdown")
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.failures.append("glintd did not exit within 30 s of shutdown")
            self.unmount_tmpfs()
        self.check_flat()
        return stats

    def check_flat(self):
        """Later samples may not grow beyond the earlier ones (after a warm-up cycle)."""
        s = self.samples[1:]
        if len(s) < 4:
            return
        half = len(s) // 2
        early, late = s[:half], s[half:]
        rss_early = max(x["rss_kb"] for x in early)
        rss_late = max(x["rss_kb"] for x in late)
        tol = rss_early * self.args.rss_tolerance + 16 * 1024
        if rss_late > rss_early + tol:
            self.failures.append(f"resident memory grew: {rss_early} kB early, {rss_late} kB late")
        fds_early = max(x["fds"] for x in early)
        fds_late = max(x["fds"] for x in late)
        if fds_late > fds_early:
            self.failures.append(f"descriptors grew: {fds_early} early, {fds_late} late")
        thr_early = max(x["threads"] for x in early)
        thr_late = max(x["threads"] for x in late)
        if thr_late > thr_early:
            self.failures.append(f"threads grew: {thr_early} early, {thr_late} late")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin", help="folder with glint and glintd")
    ap.add_argument("--minutes", type=float, default=2.0, help="soak duration (at least one "
                    "cycle of every fault kind runs)")
    ap.add_argument("--rate", type=float, default=1000, help="images per second sent")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--frames", type=int, default=2000, help="data frames per acquisition")
    ap.add_argument("--dark", type=int, default=100, help="dark frames (= pedestal window)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--storm-clients", type=int, default=24)
    ap.add_argument("--tmpfs-mb", type=int, default=12)
    ap.add_argument("--rss-tolerance", type=float, default=0.10,
                    help="allowed growth of the late peak RSS over the early one (fraction; "
                    "plus 16 MiB)")
    ap.add_argument("--workdir")
    ap.add_argument("--report", help="write the JSON report here")
    args = ap.parse_args()
    soak = Soak(args)
    t0 = time.time()
    stats = soak.run()
    report = dict(minutes=round((time.time() - t0) / 60, 2), rate=args.rate,
                  shape=[args.rows, args.cols], cycles=soak.cycles, samples=soak.samples,
                  failures=soak.failures, final_stats=stats)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    sent = sum(c["sent"] for c in soak.cycles)
    print(f"soak: {len(soak.cycles)} acquisitions, {sent} images sent in "
          f"{report['minutes']} min; rss {soak.samples[0]['rss_kb']} -> "
          f"{soak.samples[-1]['rss_kb']} kB, fds {soak.samples[0]['fds']} -> "
          f"{soak.samples[-1]['fds']}; {len(soak.failures)} failure(s)")
    for f in soak.failures:
        print("FAIL:", f)
    if not args.workdir:
        shutil.rmtree(soak.work, ignore_errors=True)
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
