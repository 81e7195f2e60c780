#!/usr/bin/env bash
# Builds everything (setup.sh's CLI and libraries, then the tests, the sanitizer builds and the
# benchmarks) and runs the whole test suite.
# CUDA tests carry the label `gpu` and skip where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
cmake --build "${AMPC_BUILD_DIR:-build}" -j "$(nproc)"
ctest --test-dir "${AMPC_BUILD_DIR:-build}" -j "$(nproc)" --output-on-failure "$@"
