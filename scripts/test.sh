#!/usr/bin/env bash
# Set-up, build and the whole test suite. GPU tests skip cleanly where there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
