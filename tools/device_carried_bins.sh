# Sourced (from the repository root) by the device scripts that run the binaries of
# tools/build_carried.sh without building: unpacks build-carry/ into /tmp/hybrid-carried, puts its
# libraries, the toolkit's and those of PyTorch's wheels (cuBLAS, NCCL) on the loader path, sets h to
# the carried hybrid (CARRIED_BUILD: another carried folder than build-carry/), and tokenizes the bundled Tiny Shakespeare once. Also the device environment
# (tools/device_env.sh: NCCL_NVLS_ENABLE=0) and OUT (default device-out/), created.
export OUT=${OUT:-$(pwd)/device-out}
mkdir -p "$OUT" /tmp/hybrid-carried
source tools/device_env.sh
python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "${CARRIED_BUILD:-build-carry}/bins.tar.xz" /tmp/hybrid-carried
wheel_libs=$(python3 -c 'import glob, nvidia; print(":".join(d for p in nvidia.__path__ for d in glob.glob(p + "/*/lib")))' 2>/dev/null)
export LD_LIBRARY_PATH="$(pwd)/${CARRIED_BUILD:-build-carry}/lib:${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64${wheel_libs:+:$wheel_libs}"
h=/tmp/hybrid-carried/bin/hybrid
[ -f data/ts/ts.train.bin ] || $h tokenize --preset tinyshakespeare --tokenizer gpt2 --out data/ts > /dev/null
