#!/usr/bin/env bash
# Builds fused_check: the fused chunk kernels (simple_gla_cuda.cu, gated_delta_rule_{forward,backward}.cu,
# gsa_fused_{forward,backward}.cu, nha_fused.cu) compiled for the host with emu_cuda.h, linked with the CPU build's library, to check them without a
# GPU (index math, fragment layouts, barriers). Needs the CUDA headers (cuda_bf16.h), not a GPU.
#   tools/kernel_emu/build.sh [cpu-build-dir (build)] [out-dir (/tmp/kernel_emu)]
#   for s in rr fwd rev; do EMU_SCHED=$s /tmp/kernel_emu/fused_check gdn; done
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-/tmp/kernel_emu}
here="$root/tools/kernel_emu"
mkdir -p "$out/include/layers/softmax_attention"
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
python3 "$here/emulate_sources.py" flash "$root/layers/softmax_attention/flash_attention_device.cuh" \
  "$out/include/layers/softmax_attention/flash_attention_device.cuh"
units=("$here/stubs.cpp" "$here/fused_check.cpp")
for f in layers/mamba2/simple_gla_cuda layers/gated_deltanet/gated_delta_rule_forward layers/gated_deltanet/gated_delta_rule_backward \
         layers/gsa/gsa_fused_forward layers/gsa/gsa_fused_backward layers/nha/nha_fused; do
  python3 "$here/emulate_sources.py" cu "$root/$f.cu" "$out/$(basename "$f").cpp"
  units+=("$out/$(basename "$f").cpp")
done
flags=(-std=c++20 -O2 -fopenmp -w -DSPDLOG_FMT_EXTERNAL -DFMT_SHARED -I"$here" -I"$out/include" -I"$root" -I"$root/tests"
       -isystem "$cuda_inc")
objs=()
for u in "${units[@]}"; do
  o="$out/$(basename "${u%.cpp}").o"
  g++ "${flags[@]}" -c "$u" -o "$o" &
  objs+=("$o")
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
done
wait
g++ -fopenmp -o "$out/fused_check" "${objs[@]}" "$build/libhybrid_lib.a" -lspdlog -lfmt -lpthread
echo "$out/fused_check"
