#!/usr/bin/env python3
"""Where the GPU find kernel's frames spend their time: reads the trace that GLINT_FIND_TRACE=FILE
writes (docs/tuning.md) and prints the frame period, each step's time per segment, what every
segment's frame start waited for, and the critical path through segments and frames.

    GLINT_FIND_TRACE=/tmp/trace.csv glint bench find --backend gpu --size 400 --frames 20000
    python3 scripts/find_trace.py /tmp/trace.csv

A frame starts in a segment when three things have happened: the segment has finished its
previous frame (emission included), and the segments before and after have released the previous
frame. A neighbour bound the start when the segment's poll of its flag took longer than a poll of
a flag set long before; otherwise the segment's own previous frame did. Following these binding
events back from the last frame gives the critical path, and its length split by step says what
sets the period.
"""
import argparse
import sys

import numpy as np

FIELDS = ["g", "ready", "above", "below", "go", "loop1", "loop2", "resolve", "release0",
          "release1", "end", "undecided", "rounds", "waited_above", "stored", "above_wait"]


def load(path):
    data = np.genfromtxt(path, delimiter=",", names=True, dtype=np.int64)
    if data.size == 0:
        sys.exit(f"{path}: no trace records")
    seg = data["segment"]
    k = data["k"]
    base = data["g"] - k
    # One launch: the base that the most records share (every segment, every traced frame).
    bases, counts = np.unique(base, return_counts=True)
    b0 = bases[np.argmax(counts)]
    keep = base == b0
    nseg = int(seg[keep].max()) + 1
    nk = int(k[keep].max()) + 1
    t = {f: np.zeros((nseg, nk), dtype=np.int64) for f in FIELDS}
    for f in FIELDS:
        t[f][seg[keep], k[keep]] = data[f][keep]
    return t, nseg, nk, int(b0), int(k[keep].min())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="CSV written with GLINT_FIND_TRACE")
    ap.add_argument("--skip", type=int, default=8,
                    help="frames left out at the start of the launch (fill)")
    a = ap.parse_args()
    t, nseg, nk, g0, k0 = load(a.trace)
    s = k0 + a.skip
    if s + 2 >= nk:
        sys.exit(f"{a.trace}: too few frames traced")
    ks = slice(s, nk)
    f = {name: t[name].astype(np.float64) for name in FIELDS}
    go = f["go"]
    print(f"launch at frame {g0}: {nseg} segments, frames {s}..{nk - 1} analysed")
    period = (go[:, nk - 1] - go[:, s]) / (nk - 1 - s)
    print(f"frame period: {period.mean():.1f} ns (segments' spread {period.min():.1f} .. "
          f"{period.max():.1f})")

    def steps(sel):
        tt = {name: f[name][sel][:, ks] for name in FIELDS}
        prev_end = f["end"][sel][:, s - 1:nk - 1]
        return {
            "ready after previous end": tt["ready"] - prev_end,
            "wait": tt["go"] - tt["ready"],
            "loop1": tt["loop1"] - tt["go"],
            "loop2": tt["loop2"] - tt["loop1"],
            "resolve": tt["resolve"] - tt["loop2"],
            "release start": tt["release0"] - tt["resolve"],
            "release fence": tt["release1"] - tt["release0"],
            "emission (from resolve)": tt["end"] - tt["resolve"],
            "go to release issued": tt["release1"] - tt["go"],
            "go to end": tt["end"] - tt["go"],
        }

    everyone = steps(slice(0, nseg))
    picks = [0, 1, nseg // 2, nseg - 2, nseg - 1]
    print("\nstep, ns per frame: mean over segments and frames | segments " +
          " | ".join(str(p) for p in picks) + " | the slowest segment's mean")
    per = {p: steps(slice(p, p + 1)) for p in picks}
    for name, v in everyone.items():
        seg_means = v.mean(axis=1)
        cells = " | ".join(f"{per[p][name].mean():7.1f}" for p in picks)
        print(f"  {name:26s} {v.mean():7.1f} | {cells} | {seg_means.max():7.1f} "
              f"(segment {int(seg_means.argmax())})")

    und = t["undecided"][:, ks]
    sto = t["stored"][:, ks]
    print(f"\nundecided pixels per segment and frame: mean {und.mean():.3f}, segment-frames with "
          f"any {100 * (und > 0).mean():.2f} %; clusters per segment and frame {sto.mean():.2f}")
    for name, sel in (("no undecided", und == 0), ("some undecided", und > 0)):
        if sel.any():
            print(f"  with {name}: go to release issued {everyone['go to release issued'][sel].mean():.1f}"
                  f" ns, resolve {everyone['resolve'][sel].mean():.1f}, go to end "
                  f"{everyone['go to end'][sel].mean():.1f}")
    rounds = t["rounds"][:, ks]
    waited = t["waited_above"][:, ks]
    sel = und > 0
    if sel.any():
        aw = t["above_wait"][:, ks]
        wsel = waited > 0
        print(f"  where undecided: rounds {rounds[sel].mean():.2f} (mean), pixels that waited for "
              f"the segment above in {100 * wsel.sum() / sel.sum():.1f} % of them")
        if wsel.any():
            print(f"  such a wait ended {np.median((aw - t['loop2'][:, ks])[wsel]):.0f} ns after "
                  f"loop 2 (median), resolve with a wait {everyone['resolve'][wsel].mean():.0f} ns,"
                  f" without {everyone['resolve'][sel & ~wsel].mean():.0f} ns")
    for c in range(0, 6):
        sel = sto == c
        if sel.any():
            print(f"  with {c} clusters: emission {everyone['emission (from resolve)'][sel].mean():.1f}"
                  f" ns ({100 * sel.mean():.1f} % of segment-frames)")

    # What each start waited for: the last of its own previous end and the neighbours' flags.
    inf = np.full((1, nk), -np.inf)
    above_rel = np.vstack([inf, f["release1"][:-1]])[:, s - 1:nk - 1]
    below_rel = np.vstack([f["release1"][1:], inf])[:, s - 1:nk - 1]
    own_end = f["end"][:, s - 1:nk - 1]
    # A neighbour bound the start when this segment's poll of its flag took longer than a poll
    # of a flag issued long before (the later of the two if both did); else the segment's own
    # previous frame did.
    ready = f["ready"][:, ks]
    seen_above = f["above"][:, ks] - ready
    seen_below = f["below"][:, ks] - ready
    settled = above_rel < ready - 2000
    quick = float(np.median(seen_above[settled])) if settled.any() else 0.0
    threshold = quick + 64
    w_above = seen_above > threshold
    w_below = seen_below > threshold
    which = np.where(~(w_above | w_below), 0,
                     np.where(w_above & (~w_below | (seen_above >= seen_below)), 1, 2))
    print(f"\na poll of a flag issued long before takes {quick:.0f} ns (median)")
    print(f"\nframe starts bound by: own previous frame "
          f"{100 * (which == 0).mean():.1f} %, segment above {100 * (which == 1).mean():.1f} %, "
          f"segment below {100 * (which == 2).mean():.1f} %")
    last = np.where(which == 0, own_end, np.where(which == 1, above_rel, below_rel))
    lag = go[:, ks] - last
    for i, name in ((0, "own end"), (1, "flag above issued"), (2, "flag below issued")):
        sel = which == i
        if sel.any():
            print(f"  {name} to go: median {np.median(lag[sel]):.0f} ns, p90 "
                  f"{np.percentile(lag[sel], 90):.0f}")

    # Critical path: from the frame start that came last, back through the binding events.
    parts = {k: 0.0 for k in ("start after binding event", "loop1", "loop2", "resolve",
                              "release start", "release fence", "emission (own chain)")}
    k = nk - 1
    b = int(np.argmax(go[:, k]))
    visits = np.zeros(nseg, dtype=np.int64)
    length = 0
    while k > s:
        visits[b] += 1
        w = which[b, k - s]
        parts["start after binding event"] += lag[b, k - s]
        nb = b if w == 0 else (b - 1 if w == 1 else b + 1)
        q = {name: f[name][nb, k - 1] for name in FIELDS}
        parts["loop1"] += q["loop1"] - q["go"]
        parts["loop2"] += q["loop2"] - q["loop1"]
        parts["resolve"] += q["resolve"] - q["loop2"]
        if w == 0:
            parts["emission (own chain)"] += q["end"] - q["resolve"]
        else:
            parts["release start"] += q["release0"] - q["resolve"]
            parts["release fence"] += q["release1"] - q["release0"]
        b = nb
        k -= 1
        length += 1
    total = sum(parts.values())
    print(f"\ncritical path over {length} frames: {total / length:.1f} ns per frame")
    for name, v in parts.items():
        print(f"  {name:28s} {v / length:8.1f} ns per frame ({100 * v / total:.1f} %)")
    top = np.argsort(visits)[::-1][:10]
    print("  segments on it most often: " +
          ", ".join(f"{int(i)} ({int(visits[i])})" for i in top if visits[i] > 0))


if __name__ == "__main__":
    main()
