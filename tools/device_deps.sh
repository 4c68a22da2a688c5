#!/usr/bin/env bash
# Run here, on a Debian machine with apt: downloads the Debian packages the device image lacks (JSON,
# logging, formatting, Catch2) into the git-ignored .deps/ and unpacks them under .deps/root, which
# tools/device_check.sh hands to CMake and the loader on the device. Nothing is installed here.
# Usage: tools/device_deps.sh   (then carry .deps with the device call)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(nlohmann-json3-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 catch2)
rm -rf .deps/debs .deps/root
mkdir -p .deps/debs .deps/root
apt-get update -qq
(cd .deps/debs && apt-get download -qq "${pkgs[@]}")
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps/root; done
echo "device_deps: unpacked ${#pkgs[@]} packages into .deps/root ($(du -sh .deps | cut -f1) in .deps)"
