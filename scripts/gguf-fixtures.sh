#!/usr/bin/env bash
# Makes the generated GGUF test fixtures and checks them against the committed index, idempotently.
#
# What it makes (git-ignored, at the paths the tests read):
#   tests/data/gguf/hf/*/model.safetensors  tiny Hugging Face checkpoints drawn with numpy
#                                           (tools/make_glm4_moe_checkpoints.py, make_qwen2_moe_checkpoints.py)
#   tests/data/gguf/weights/*.gguf          those and the goldens' checkpoints run through llama.cpp's own
#                                           converter (tools/make_gguf_weight_fixtures.py)
# Every one is deterministic byte for byte, so it is generated rather than committed (12.6 MB of a tree
# that must stay small enough to carry to the GPU machine). What stays committed is what a reviewer reads:
# the checkpoints' config.json and prompt.json, and tests/data/gguf/weights/index.json, which records
# each GGUF's size and SHA-256, the SHA-256 of the checkpoint it was converted from (source_sha256) and of
# the converter's files; llama.cpp's logits (weights/llama/*.npy) stay committed too (CI cannot build it).
#
# Usage: scripts/gguf-fixtures.sh [--fetch | --verify]
#   (none)    verify; if anything is missing or differs: fetch llama.cpp's source (cached), regenerate,
#             verify again. A second run costs one hash of 13 MB. `make test` runs this.
#   --fetch   only fetch llama.cpp's source into the cache (scripts/install-deps.sh runs this).
#   --verify  only verify, writing nothing (the ctest test gguf_fixtures): every fixture present with the
#             SHA-256 index.json records; each one that is not is named.
# llama.cpp's source comes from the npm package node-llama-cpp (its package/llama/gitRelease.bundle is a
# git bundle of a llama.cpp release; the npm registry is reachable from CI, GitHub is not), unpacked once
# into $SLUICE_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/sluice), only the converter's folders
# (conversion/, gguf-py/). SLUICE_LLAMA_CPP=DIR uses a llama.cpp tree of one's own instead; either way the
# converter's files must hash as index.json's "converter" records. Generation needs numpy
# (Debian's python3-numpy, hence /usr/bin/python3; PYTHON=... to override).
# Rejected: a CMake custom target that generates at build time (a build then needs the network once, and
# the GPU machine, which builds offline, has none); committing the files (they outgrew the carry limit).
set -euo pipefail
cd "$(dirname "$0")/.."

NPM_PACKAGE=node-llama-cpp@3.21.1
LLAMA_COMMIT=80fb11ac73e66d89eae2c6a91d8a77428fa733ed  # the bundle's HEAD (llama.cpp's 2026-09-12 release)
CACHE=${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
LLAMA=${SLUICE_LLAMA_CPP:-$CACHE/llama.cpp-$LLAMA_COMMIT}
INDEX=tests/data/gguf/weights/index.json
if [[ -n ${PYTHON:-} ]]; then PY=$PYTHON; elif [[ -x /usr/bin/python3 ]]; then PY=/usr/bin/python3; else PY=python3; fi

mode=${1:-}
case $mode in "" | --fetch | --verify) ;; *) echo "usage: $0 [--fetch | --verify]" >&2; exit 2 ;; esac

die() { echo "gguf-fixtures: error: $*" >&2; exit 1; }
scratch=()  # removed on exit, however it comes
trap 'rm -rf "${scratch[@]}"' EXIT

# "SHA256  PATH" for every file the fixtures stand on, from the committed index: the GGUFs, and the
# checkpoints they were converted from: generated ones under tests/data/gguf/hf and the committed goldens'
# (a golden regenerated without rerunning tools/make_gguf_weight_fixtures.py fails here, locally, rather
# than only where CI regenerates the GGUFs from scratch).
expected_sums() {
    "$PY" - "$INDEX" <<'EOF'
import json, sys
files = json.load(open(sys.argv[1]))["files"]
sources = {}
for name, e in files.items():
    print(f"{e['sha256']}  tests/data/gguf/weights/{name}")
    sources[f"tests/data/{e['source']}/model.safetensors"] = e["source_sha256"]
for path, sha in sorted(sources.items()):
    print(f"{sha}  {path}")
EOF
}

# Verifies the files of `sums` (default: all); prints one line per bad file ("PATH: FAILED" or
# "PATH: missing"). Returns 1 when any is bad.
verify() {
    local sums=$1 bad=0 sha path
    while read -r sha path; do
        if [[ ! -f $path ]]; then
            echo "  $path: missing"
            bad=1
        elif [[ $(sha256sum "$path" | cut -d' ' -f1) != "$sha" ]]; then
            echo "  $path: SHA-256 $(sha256sum "$path" | cut -c1-16)… differs from index.json's ${sha:0:16}…"
            bad=1
        fi
    done <"$sums"
    return $bad
}

# llama.cpp's converter source ($LLAMA/conversion, $LLAMA/gguf-py), from the npm package unless present.
fetch_llama() {
    [[ -f $LLAMA/gguf-py/gguf/__init__.py && -d $LLAMA/conversion ]] && return 0
    [[ -n ${SLUICE_LLAMA_CPP:-} ]] && die "SLUICE_LLAMA_CPP=$SLUICE_LLAMA_CPP holds no conversion/ and gguf-py/"
    command -v npm >/dev/null || die "npm not found (scripts/install-deps.sh installs it)"
    mkdir -p "$CACHE"
    local tmp
    tmp=$(mktemp -d "$CACHE/fetch.XXXXXX")
    scratch+=("$tmp")
    echo "gguf-fixtures: fetching llama.cpp's source ($NPM_PACKAGE) into $LLAMA"
    (cd "$tmp" && npm pack --silent --no-audit --no-fund "$NPM_PACKAGE" >/dev/null) ||
        die "npm pack $NPM_PACKAGE failed"
    tar xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle
    git clone -q --bare "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.git"
    local head
    head=$(git --git-dir "$tmp/llama.git" rev-parse HEAD)
    [[ $head == "$LLAMA_COMMIT" ]] || die "$NPM_PACKAGE's llama.cpp is at $head, expected $LLAMA_COMMIT"
    mkdir -p "$tmp/src"
    git --git-dir "$tmp/llama.git" archive HEAD conversion gguf-py LICENSE | tar x -C "$tmp/src"
    echo "$LLAMA_COMMIT" >"$tmp/src/COMMIT"
    rm -rf "$LLAMA" && mv "$tmp/src" "$LLAMA"  # whole or not at all: a cut-off fetch leaves only $tmp
}

# The converter files that decide the output must be those index.json was made with.
check_converter() {
    "$PY" - "$INDEX" "$LLAMA" <<'EOF' || die "llama.cpp's converter at $LLAMA differs from the one $INDEX was made with"
import hashlib, json, sys
from pathlib import Path
conv, llama, bad = json.load(open(sys.argv[1]))["converter"], Path(sys.argv[2]), 0
for key, sha in conv.items():
    if key.endswith(" sha256"):
        f = llama / key[: -len(" sha256")]
        got = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "missing"
        if got != sha:
            print(f"  {f}: {got[:16]} (index.json: {sha[:16]})", file=sys.stderr)
            bad = 1
sys.exit(bad)
EOF
}

[[ -f $INDEX ]] || die "$INDEX not found"
if [[ $mode == --fetch ]]; then
    fetch_llama
    exit 0
fi

sums=$(mktemp)
scratch+=("$sums" "$sums.hf" "$sums.gguf")
expected_sums >"$sums"
n=$(wc -l <"$sums")
if report=$(verify "$sums"); then
    echo "gguf-fixtures: $n files verified"
    exit 0
fi
if [[ $mode == --verify ]]; then
    echo "gguf-fixtures: generated test fixtures missing or stale (make them with scripts/gguf-fixtures.sh):" >&2
    echo "$report" >&2
    exit 1
fi

start=$SECONDS
echo "gguf-fixtures: generating the GGUF test fixtures (tools/make_*.py):"
echo "$report"
"$PY" -c 'import numpy' 2>/dev/null || die "$PY has no numpy (apt-get install python3-numpy, or PYTHON=...)"
fetch_llama
check_converter

# The checkpoints first (written in place; their committed config.json and prompt.json are rewritten with
# the same bytes), checked before anything is converted from them.
"$PY" tools/make_glm4_moe_checkpoints.py
"$PY" tools/make_qwen2_moe_checkpoints.py
grep ' tests/data/gguf/hf/' "$sums" >"$sums.hf" || true
if ! report=$(verify "$sums.hf"); then
    die "the checkpoints generated differ from those $INDEX was converted from:"$'\n'"$report"
fi

# The GGUFs into a scratch folder beside the real one (same file system: the moves are renames), checked
# there against the committed index, then moved into place; the committed index.json is never rewritten.
out=$(mktemp -d tests/data/gguf/weights/.gen.XXXXXX)
scratch+=("$out")
"$PY" tools/make_gguf_weight_fixtures.py --llama "$LLAMA" --out "$out" >/dev/null
if ! cmp -s "$out/index.json" "$INDEX"; then
    echo "gguf-fixtures: error: the regenerated index differs from $INDEX: the generator or its inputs" \
        "changed (to accept that, rerun tools/make_gguf_weight_fixtures.py --llama $LLAMA and the logits):" >&2
    diff "$INDEX" "$out/index.json" | head -n 20 >&2
    exit 1
fi
sed "s| tests/data/gguf/weights/| $out/|" "$sums" | grep " $out/" >"$sums.gguf"
if ! report=$(verify "$sums.gguf"); then
    die "GGUFs generated differ from $INDEX:"$'\n'"$report"
fi
for f in "$out"/*.gguf; do mv -f "$f" tests/data/gguf/weights/; done

report=$(verify "$sums") || die "after generation:"$'\n'"$report"
echo "gguf-fixtures: $n files generated and verified in $((SECONDS - start)) s"
