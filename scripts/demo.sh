#!/usr/bin/env bash
# The main job end to end: set-up, build, then a demo acquisition on the default configuration:
# `glint sim` (an slsReceiver stand-in: 1000 dark + 1000 photon frames of 400 x 400 at 250
# frames/s) streams over loopback into `glintd` (config/glintd.example.yaml), which finds the
# photon clusters (GPU when usable, else the exact CPU backend) and writes the run's HDF5 file;
# the script ends with the run's summary, the file's path (under build/demo/runs/) and PNGs of
# the run's hit map and spectrum next to it (`glint plot`).
#   bash scripts/demo.sh            (as root on a fresh Debian 12 machine for the set-up step)
# GLINT_DEMO_BUILD_DIR=DIR skips the set-up and build steps and uses that build (the tests do);
# GLINT_DEMO_FRAMES and GLINT_DEMO_RATE change the photon frames (1000) and their rate (250/s).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GLINT_DEMO_BUILD_DIR:-}
if [[ -z $build ]]; then
  bash scripts/setup.sh
  bash scripts/build.sh
  build=$PWD/build
fi
bin=$build/bin
demo=$build/demo
rm -rf "$demo/runs"
mkdir -p "$demo/runs"
# The default configuration, except that the run files go under build/ instead of
# /var/lib/glint/runs (a start request may not move them out of output.allowed_roots; the
# configuration file itself chooses the directory).
config=$demo/glintd.yaml
sed -e "s#^  directory: /var/lib/glint/runs#  directory: $demo/runs#" \
    -e "s#^  run_name: run #  run_name: demo #" config/glintd.example.yaml > "$config"

"$bin/glintd" --config "$config" 2> "$demo/glintd.log" &
glintd_pid=$!
trap 'kill "$glintd_pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "$bin/glint" ctl --timeout-ms 200 status > /dev/null 2>&1 && break
  kill -0 "$glintd_pid" 2>/dev/null || { cat "$demo/glintd.log"; exit 1; }
  sleep 0.1
done
echo "demo: glintd is up (control tcp://127.0.0.1:5555, log $demo/glintd.log)"

file=$("$bin/glint" ctl start --json | sed -n 's/.*"file": "\(.*\)".*/\1/p')
echo "demo: run started, writing $file"
"$bin/glint" sim --config "$config" --frames "${GLINT_DEMO_FRAMES:-1000}" \
  --rate "${GLINT_DEMO_RATE:-250}" --seed 1

# The run ends on the end-of-acquisition message; wait for the file to be closed.
ended=
for _ in $(seq 300); do
  if "$bin/glint" ctl status --json | grep -q '"end_reason": "end of acquisition"'; then
    ended=1
    break
  fi
  sleep 0.1
done
[[ -n $ended ]] || { echo "demo: the run did not end"; "$bin/glint" ctl status; exit 1; }
echo
"$bin/glint" ctl stats
echo
"$bin/glint" ctl status
"$bin/glint" ctl shutdown > /dev/null
wait "$glintd_pid"
trap - EXIT
echo
echo "demo: run file $file"
command -v h5ls > /dev/null && h5ls -r "$file" | head -20 || true
echo
for what in hitmap spectrum; do
  png=$("$bin/glint" plot "$file" --what "$what")
  echo "demo: $what plot $png"
done
