#!/usr/bin/env bash
# The main job end to end: set-up, build, a small synthetic frame file, `glint find` on it.
#   bash scripts/demo.sh            (as root on a fresh Debian 12 machine for the set-up step)
# Writes build/demo/frames.h5 (1000 dark + 1000 photon frames of 128 x 128), then
# build/demo/run.h5 (frames, clusters, pedestal; see docs) and build/demo/run.clust (aare format).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
demo=build/demo
mkdir -p "$demo"
./build/bin/glint synth --output "$demo/frames.h5" --overwrite \
  --rows 128 --cols 128 --dark 1000 --frames 1000 --photons 60 --seed 1
./build/bin/glint find --input "$demo/frames.h5" --dataset /data --dark 1000 --n-sigma 5 \
  --cluster-size 3 --backend auto --output "$demo/run.h5" --clust "$demo/run.clust" --overwrite
echo "demo: clusters in $demo/run.h5 (h5ls -r $demo/run.h5) and $demo/run.clust"
