#!/usr/bin/env bash
# Installs what ampc needs (Debian packages, only those missing), then configures and builds
# what the main job needs: the libraries, the `ampc` CLI and the Python module (the target
# `ampc_setup`; test.sh builds the rest).
#   ./setup.sh              install + build into build/
#   AMPC_BUILD_DIR=dir ./setup.sh    another build folder
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")"

packages=(
  build-essential cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libabsl-dev libcli11-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libdnnl-dev libgloo-dev zlib1g-dev
  libjemalloc-dev
  pybind11-dev python3-dev python3-numpy python3-pytest libdlpack-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

build_dir="${AMPC_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${AMPC_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target ampc_setup
