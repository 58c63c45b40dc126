#!/usr/bin/env python3
"""Runs the README's command sequences as they are written.

Every ```sh block preceded by the line `<!-- readme-test -->` is run by bash (-euo pipefail), in
order, in a fresh directory that looks like the repository root after a build: `build/bin` and
`config` there are links to the build's executables and the source's configuration, and `glint`
is on PATH (the examples that call it without a path). A block fails when a command fails, when
something it started in the background does not exit 0, or when it takes more than two minutes.
The daemon example is also checked for what it should have produced: one run of 6000 frames.

    python3 tests/docs/readme_examples.py --readme README.md --bin build/bin --source .
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARKER = "<!-- readme-test -->"


def marked_blocks(text):
    """The marked ```sh blocks of `text`, as (line number, script)."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
            raise SystemExit(f"README line {i + 1}: {MARKER} must come right before a ```sh block")
        body = []
        for j in range(i + 2, len(lines)):
            if lines[j].strip() == "```":
                break
            body.append(lines[j])
        else:
            raise SystemExit(f"README line {i + 2}: the block is not closed")
        blocks.append((i + 2, "\n".join(body) + "\n"))
    return blocks


def run_block(line, script, bin_dir, source, work):
    os.makedirs(os.path.join(work, "build"), exist_ok=True)
    os.symlink(bin_dir, os.path.join(work, "build", "bin"))
    os.symlink(os.path.join(source, "config"), os.path.join(work, "config"))
    # Background jobs must exit by themselves (glint ctl shutdown) and exit 0; one left running
    # when the block fails is ended.
    wrapped = (
        "trap 'kill $(jobs -p) 2>/dev/null || true' ERR\n" + script +
        'for job in $(jobs -p); do wait "$job"; done\n')
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    try:
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", wrapped], cwd=work, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return False, f"README block at line {line}: still running after 120 s\n{out}"
    ok = p.returncode == 0
    return ok, f"README block at line {line}: exit status {p.returncode}\n{p.stdout}"


def check_daemon_run(work, output):
    """The daemon example: one run file of 1000 dark + 5000 frames, and the sender's summary."""
    problems = []
    if "glint sim: 6000 images (1000 dark)" not in output:
        problems.append("no glint sim summary of 6000 images (1000 dark)")
    run = os.path.join(work, "runs", "run_000001.h5")
    if not os.path.exists(run):
        problems.append(f"no run file {run}")
    elif shutil.which("h5ls"):
        listing = subprocess.run(["h5ls", "-r", run], stdout=subprocess.PIPE, text=True).stdout
        if not re.search(r"/entry/frames/frame_number\s+Dataset \{6000/", listing):
            problems.append(f"the run file does not hold 6000 frames:\n{listing}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--readme", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    with open(a.readme) as f:
        blocks = marked_blocks(f.read())
    if not blocks:
        raise SystemExit(f"{a.readme}: no block marked {MARKER}")
    failures = []
    for line, script in blocks:
        work = tempfile.mkdtemp(prefix="glint_readme_")
        ok, output = run_block(line, script, os.path.abspath(a.bin), os.path.abspath(a.source),
                               work)
        print(output)
        if not ok:
            failures.append(output)
        elif "glintd --config my.yaml &" in script:
            problems = check_daemon_run(work, output)
            if problems:
                failures.append(f"README block at line {line}: " + "; ".join(problems))
        if ok:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(blocks) - len(failures)} of {len(blocks)} README blocks ran as written")
    for f in failures:
        print("FAILED:", f.splitlines()[0], file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
