#!/usr/bin/env bash
# Builds, on the development machine (nvcc, no GPU), the binaries tools/device_carried.sh runs on the
# device: hybrid and test_layers (or CARRIED_TESTS) for sm_90, stripped and packed (xz) into build-carry/ (git-ignored; the
# two binaries are ~90 MB raw, over the 64 MiB a call carries), with the spdlog and fmt libraries the
# device image lacks, the source path the tests have compiled in and the commit they were built from.
#   tools/build_carried.sh   (JOBS=2 by default; objects stay in build-cuda/ for the next rebuild)
set -euo pipefail
cd "$(dirname "$0")/.."
obj=${CARRIED_OBJ:-build-cuda}
cmake -S . -B "$obj" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYBRID_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
# CARRIED_TESTS: the test executables to carry (default test_layers); each is ~17 MB packed and a call
# carries 64 MiB with the ~15 MB checkout, so at most two.
tests=${CARRIED_TESTS:-test_layers}
ninja -C "$obj" -j "${JOBS:-2}" hybrid $tests
rm -rf build-carry
mkdir -p build-carry/bin build-carry/lib
strip -o build-carry/bin/hybrid "$obj/hybrid"
for t in $tests; do strip -o "build-carry/bin/$t" "$obj/tests/$t"; done
tar -C build-carry -cf - bin | xz -T2 -6 > build-carry/bins.tar.xz
rm -rf build-carry/bin
for lib in $(ldd "$obj/hybrid" | awk '/libspdlog|libfmt/ {print $3}'); do cp -L "$lib" build-carry/lib/; done
pwd > build-carry/source_dir
{ git rev-parse HEAD; git status --porcelain --untracked-files=no; } > build-carry/commit
echo "build_carried: $(du -sh build-carry | cut -f1) in build-carry, from $(head -1 build-carry/commit)"
