#!/usr/bin/env bash
# Packs what tools/gpu_run.sh needs on the GPU machine into the git-ignored .devcarry/: the
# Release binaries of BUILD_DIR (stripped) with their non-system shared libraries as
# .devcarry/c/carry.tar.xz (the device call's tree is limited to 64 MiB), and the real model configs
# from ../shared/model-configs. Usage: tools/gpu_carry.sh [BUILD_DIR]; then call the device with
# carry [".devcarry/c", ".devcarry/model-configs"] and `bash tools/gpu_run.sh STEP...`.
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$ROOT/.devcarry/c" "$ROOT/.devcarry/model-configs"
cp "$BUILD/bin/sluice" "$BUILD/bin/sluice_tests" "$BUILD/bin/sluice_gpu_tests" "$STAGE/bin/"
strip "$STAGE"/bin/*
for b in "$STAGE"/bin/*; do ldd "$b" | awk '/=>/{print $3}'; done | sort -u |
    grep -v -E 'libc\.so|libm\.so|ld-linux|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so' |
    xargs -I{} cp -L {} "$STAGE/lib/"
tar cf - -C "$STAGE" bin lib | xz -T2 -6 >"$ROOT/.devcarry/c/carry.tar.xz"
cp "$ROOT"/../shared/model-configs/*.json "$ROOT/.devcarry/model-configs/"
ls -la "$ROOT/.devcarry/c"
