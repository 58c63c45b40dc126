#!/usr/bin/env bash
# Set-up, build and the whole test suite. GPU tests skip cleanly where there is no GPU. Warnings
# are errors here (GLINT_WERROR), so that a change that adds one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DGLINT_WERROR=ON
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
