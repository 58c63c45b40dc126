#!/usr/bin/env bash
# Set-up, build and the whole test suite. GPU tests skip cleanly where there is no GPU. Then a
# bounded fuzzing run of every fuzz target (GLINT_FUZZ_SECONDS each, default 20; 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
if (( ${GLINT_FUZZ_SECONDS:-20} > 0 )); then
  bash scripts/fuzz.sh "${GLINT_FUZZ_SECONDS:-20}"
fi
