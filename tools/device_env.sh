# Sourced by the device scripts: the carried Debian packages (.deps/root from tools/device_deps.sh)
# for CMake, the compiler and the loader, NCCL from PyTorch's wheels, and NVLink multicast off.
deps=${deps:-$(pwd)/.deps/root/usr}
libdir=$deps/lib/x86_64-linux-gnu
export CMAKE_PREFIX_PATH="$deps${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export CPATH="$deps/include${CPATH:+:$CPATH}"
export LIBRARY_PATH="$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL comes with PyTorch's wheels there; the data-parallel build will point CMake at it.
nccl_root=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
export HYBRID_NCCL_ROOT=$nccl_root
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared hosts
