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
  libpng-dev
  clang libclang-rt-dev
  python3 python3-h5py python3-numpy python3-zmq python3-pytest python3-venv
  pybind11-dev python3-dev python3-matplotlib python3-pil
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
# The NeXus check of the run files (tests/nexus) uses nexusformat's nxcheck, which ships the
# NXDL definitions and runs offline. Debian has no package of it: it is installed from PyPI into
# a virtual environment of its own, never into Debian's Python.
nexus_venv=${GLINT_NEXUS_VENV:-/opt/glint/nexus}
nexusformat_version=2.1.0
if ! "$nexus_venv/bin/python" -c "import nexusformat, sys; \
    sys.exit(nexusformat.__version__ != '$nexusformat_version')" 2>/dev/null; then
  echo "setup: installing nexusformat $nexusformat_version into $nexus_venv"
  /usr/bin/python3 -m venv "$nexus_venv"
  "$nexus_venv/bin/pip" install --quiet "nexusformat==$nexusformat_version"
else
  echo "setup: nexusformat $nexusformat_version present in $nexus_venv"
fi
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: CUDA toolkit: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
else
  echo "setup: no CUDA toolkit under /usr/local/cuda: building the CPU backends only"
fi
