#!/usr/bin/env bash
# Packs what tools/gpu_run.sh needs on the GPU machine into the git-ignored .devcarry/: the
# Release binaries of BUILD_DIR (stripped) with their non-system shared libraries as
# .devcarry/c/carry.tar.xz (the device call's tree is limited to 64 MiB), and the real model configs
# from ../shared/model-configs. Usage: tools/gpu_carry.sh [BUILD_DIR [NAME [BINARY...]]]; then call the
# device with carry [".devcarry/c", ".devcarry/model-configs"] and `bash tools/gpu_run.sh STEP...`.
# When the tracked tree leaves too little room for all three binaries, pack them apart
# (NAME c1, c2, … each with some of sluice, sluice_tests, sluice_gpu_tests) and carry one per call:
# gpu_run.sh unpacks every .devcarry/c*/carry.tar.xz it finds, and a warm machine keeps what an
# earlier call unpacked.
# FIXTURES=GLOB also packs the generated GGUF test fixtures tests/data/gguf/weights/GLOB (git-ignored, so
# not in the device call's tree; scripts/gguf-fixtures.sh makes them) as .devcarry/fixtures/gguf-fixtures.tar
# (xz hardly shrinks them): carry ".devcarry/fixtures". gpu_run.sh's gguftests reads the F16 files
# (FIXTURES='*.f16.gguf', 6.0 MB); llamalogits every file ('*.gguf', 10.1 MB).
set -euo pipefail
BUILD=${1:-build}
NAME=${2:-c}
shift $(($# > 2 ? 2 : $#))
BINS=("$@")
[ ${#BINS[@]} -eq 0 ] && BINS=(sluice sluice_tests sluice_gpu_tests)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$ROOT/.devcarry/$NAME" "$ROOT/.devcarry/model-configs"
for b in "${BINS[@]}"; do cp "$BUILD/bin/$b" "$STAGE/bin/"; done
strip "$STAGE"/bin/*
if [ -z "${NOLIBS:-}" ]; then  # NOLIBS=1: the libraries came with an earlier call's pack
    for b in "$STAGE"/bin/*; do ldd "$b" | awk '/=>/{print $3}'; done | sort -u |
        grep -v -E 'libc\.so|libm\.so|ld-linux|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so' |
        xargs -I{} cp -L {} "$STAGE/lib/"
fi
tar cf - -C "$STAGE" bin lib | xz -T2 -6 >"$ROOT/.devcarry/$NAME/carry.tar.xz"
cp "$ROOT"/../shared/model-configs/*.json "$ROOT/.devcarry/model-configs/"
if [ -n "${FIXTURES:-}" ]; then
    "$ROOT/scripts/gguf-fixtures.sh"
    mkdir -p "$ROOT/.devcarry/fixtures"
    (cd "$ROOT" && tar cf .devcarry/fixtures/gguf-fixtures.tar tests/data/gguf/weights/$FIXTURES)
    ls -la "$ROOT/.devcarry/fixtures"
fi
ls -la "$ROOT/.devcarry/$NAME"
