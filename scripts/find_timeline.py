#!/usr/bin/env python3
"""What a GPU finder run's batches wait on: reads the CSV that GLINT_FIND_TIMELINE=FILE writes
(docs/tuning.md) and prints each step's time per batch (upload, find, result copy), the
period from one find to the next, how long the compute stream sat idle between a find and the
next and whether that find had waited for its upload, and a batch's latency from the start
of its upload to the end of its result copy, in periods: with S slots a batch's latency must fit
into S + 1 periods (docs/journal.md, 2026-12-07).

    GLINT_FIND_TIMELINE=/tmp/timeline.csv glint bench find --backend gpu --size 400 \\
        --frames 50000 --photons 5000
    python3 scripts/find_timeline.py /tmp/timeline.csv

Device times are microseconds from the finder's start on GPU 0; the first tenth of the batches
(the warm-up, graph captures) is left out unless --skip says otherwise.
"""
import argparse
import csv
import statistics
import sys

FIELDS = ["seq", "slot", "fb", "frames", "clusters", "up0", "up1", "find0", "find1", "d2h0",
          "d2h1", "host_submit", "host_wait0", "host_wait1"]


def load(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [k for k in FIELDS if k not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a GLINT_FIND_TIMELINE file (no {', '.join(missing)})")
        rows = [{k: float(r[k]) for k in FIELDS} for r in reader]
    rows.sort(key=lambda r: r["seq"])
    return rows


def spread(values):
    """Median, 10th and 90th percentile (nearest rank) of a non-empty list."""
    s = sorted(values)
    rank = lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]
    return {"median": statistics.median(s), "p10": rank(0.1), "p90": rank(0.9)}


def summarize(rows, skip=None):
    """The timeline's figures over the full batches after the first `skip` (default: a tenth)."""
    if skip is None:
        skip = len(rows) // 10
    full = max((r["frames"] for r in rows), default=0)
    kept = [r for r in rows[skip:] if r["frames"] == full]
    if len(kept) < 3:
        raise ValueError(f"too few full batches to summarise ({len(kept)} after {skip} skipped)")
    pairs = list(zip(kept, kept[1:]))
    # Consecutive batches only (a partial batch between two full ones breaks the chain).
    pairs = [(a, b) for a, b in pairs if b["seq"] == a["seq"] + 1]
    period = spread([b["find0"] - a["find0"] for a, b in pairs])
    s = {
        "batches": len(kept),
        "frames": full,
        "clusters_per_frame": statistics.median(r["clusters"] for r in kept) / full,
        "slots": len({int(r["slot"]) for r in rows}),
        "upload": spread([r["up1"] - r["up0"] for r in kept]),
        "find": spread([r["find1"] - r["find0"] for r in kept]),
        "copy": spread([r["d2h1"] - r["d2h0"] for r in kept]),
        "period": period,
        # The compute stream between a batch's find and the next batch's.
        "idle": spread([b["find0"] - a["find1"] for a, b in pairs]),
        # How long after its upload ended each find started (about 0: it waited for the upload).
        "after_upload": spread([r["find0"] - r["up1"] for r in kept]),
        "latency": spread([r["d2h1"] - r["up0"] for r in kept]),
        "host_wait": spread([r["host_wait1"] - r["host_wait0"] for r in kept]),
    }
    s["latency_periods"] = s["latency"]["median"] / period["median"]
    return s


def report(s):
    n = s["frames"]
    lines = [f"{s['batches']} full batches of {n:.0f} frames, {s['clusters_per_frame']:.1f} "
             f"clusters per frame, {s['slots']} slot(s)",
             f"{'':24s}{'median us':>12s}{'p10':>10s}{'p90':>10s}{'us/frame':>10s}"]
    for key, name in [("upload", "upload"), ("find", "find"),
                      ("copy", "result copy"), ("period", "period (find to find)"),
                      ("idle", "compute idle before find"),
                      ("after_upload", "find start - upload end"),
                      ("latency", "latency (upload to copy)"), ("host_wait", "host wait")]:
        v = s[key]
        lines.append(f"{name:24s}{v['median']:12.1f}{v['p10']:10.1f}{v['p90']:10.1f}"
                     f"{v['median'] / n:10.3f}")
    lines.append(f"latency / period: {s['latency_periods']:.2f} (at most {s['slots'] + 1} fit "
                 f"with {s['slots']} slot(s))")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("timeline", help="CSV written with GLINT_FIND_TIMELINE")
    ap.add_argument("--skip", type=int, default=None,
                    help="batches left out at the start (default: the first tenth)")
    a = ap.parse_args()
    try:
        print(report(summarize(load(a.timeline), a.skip)))
    except (OSError, ValueError) as e:
        sys.exit(f"find_timeline: {e}")


if __name__ == "__main__":
    main()
