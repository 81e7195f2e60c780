#!/usr/bin/env bash
# Builds everything (via setup.sh) and runs the whole test suite.
# CUDA tests carry the label `gpu` and skip where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
ctest --test-dir "${AMPC_BUILD_DIR:-build}" -j "$(nproc)" --output-on-failure "$@"
