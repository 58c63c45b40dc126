#!/usr/bin/env bash
# Installs everything glint needs on Debian 12 (run as root). The CUDA toolkit (nvcc, cuFFT) is
# expected under /usr/local/cuda; without it glint builds with the CPU backends only.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake pkg-config git
  libzmq3-dev cppzmq-dev
  libhdf5-dev hdf5-tools
  libspdlog-dev libfmt-dev
  libyaml-cpp-dev
  libgtest-dev libgmock-dev libssl-dev
  libcli11-dev
  nlohmann-json3-dev libsimdjson-dev
  libfftw3-dev
  libsystemd-dev systemd
  libmicrohttpd-dev
  clang libclang-rt-dev
  python3 python3-h5py python3-numpy python3-zmq python3-pytest
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA toolkit: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
else
  echo "setup: no CUDA toolkit under /usr/local/cuda: building the CPU backends only"
fi
