#!/usr/bin/env bash
# Configures and builds glint into build/ (executables in build/bin/). Extra arguments go to
# CMake's configure step, e.g. -DCMAKE_CUDA_ARCHITECTURES=80.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"
