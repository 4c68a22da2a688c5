#!/usr/bin/env bash
# Builds the flash-attention harness and the wgmma probe for sm_90a into build-dev/ (git-ignored),
# for tools/device_flash.sh to carry. Needs nvcc only.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build-dev
flags=(-O3 -arch=sm_90a -DHYBRID_SM90A -std=c++20 --expt-relaxed-constexpr -lineinfo -I.)
nvcc "${flags[@]}" tools/wgmma_probe.cu -o build-dev/wgmma_probe
nvcc "${flags[@]}" tools/flash_attention_dev.cu -o build-dev/flash_dev
