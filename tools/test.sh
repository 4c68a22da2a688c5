#!/usr/bin/env bash
# Sets up, configures, builds and runs the whole test suite. CUDA is auto-detected; tests tagged
# [gpu] skip themselves when no GPU is visible. Usage: tools/test.sh [build-dir] [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
tools/setup.sh
jobs=$(nproc)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs"
