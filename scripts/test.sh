#!/usr/bin/env bash
# Set-up, build and the whole test suite: the C++ tests (ctest), a bounded fuzzing run of every
# fuzz target (GLINT_FUZZ_SECONDS each, default 20; 0 skips it) and the Python tests (pytest: the
# soak test in its short form, GLINT_SOAK_MINUTES; the NeXus check of run files; the Python
# package as built in build/python). GPU tests skip cleanly where there is no GPU.
# Warnings are errors here (GLINT_WERROR), so that a change that adds one fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DGLINT_WERROR=ON
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
if (( ${GLINT_FUZZ_SECONDS:-20} > 0 )); then
  bash scripts/fuzz.sh "${GLINT_FUZZ_SECONDS:-20}"
fi
# Debian's interpreter, which has the python3-* packages setup.sh installs; the NeXus check
# uses the validator setup.sh installs, and fails without it. The package under test is the
# build's (build/python: the pure-Python modules and the extension).
GLINT_BIN="$PWD/build/bin" GLINT_SOAK_MINUTES="${GLINT_SOAK_MINUTES:-2}" GLINT_NEXUS_REQUIRED=1 \
  PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/soak tests/nexus tests/python
