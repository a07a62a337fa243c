#!/usr/bin/env bash
# llama.cpp's logits for every GGUF fixture llama.cpp loads (tests/data/gguf/weights/*.gguf), at every
# position of its checkpoint's prompt, on the CPU: tests/data/gguf/weights/llama/NAME.cpu.npy, which
# tests/unit/gguf_llama_test.cpp (GgufLlamaCpp.*) compares sluice's logits of the same file with. The
# prompt: index.json's "source" for the file (under tests/data) — a golden's golden.safetensors input_ids,
# or the prompt.json of tools/make_glm4_moe_checkpoints.py's and make_qwen2_moe_checkpoints.py's checkpoints.
# The Qwen3-Next / 3.5 fixtures are skipped: llama.cpp requires their DeltaNet key and value head dims
# to be equal, and the goldens' are 16 and 24 (bench/results/gguf compares those families on full-width
# files instead).
#
# Usage: tools/llama_logits/make_fixture_logits.sh LLAMA_SLUICE_LOGITS [PATTERN]
#   LLAMA_SLUICE_LOGITS: the llama-sluice-logits binary (tools/llama_logits/llama_logits.cpp built in
#   llama.cpp's tree: ../shared/peer/README.md gets and builds llama.cpp; copy this folder to its
#   tools/sluice-logits and add `add_subdirectory(sluice-logits)` to its tools/CMakeLists.txt).
#   PATTERN: only the fixtures whose name (without .gguf) matches this shell pattern (e.g. 'glm4_moe_*').
set -euo pipefail
LL=${1:?usage: make_fixture_logits.sh LLAMA_SLUICE_LOGITS [PATTERN]}
PATTERN=${2:-*}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/tests/data/gguf/weights/llama
mkdir -p "$OUT"
for f in "$ROOT"/tests/data/gguf/weights/*.gguf; do
    n=$(basename "$f" .gguf)
    # shellcheck disable=SC2053
    [[ $n == $PATTERN ]] || continue
    g=${n%.*}
    case $g in qwen3_next* | qwen3_5_moe*) continue ;; esac
    ids=$(python3 - "$ROOT" "$n.gguf" <<'PY'
import json, os, struct, sys
root, name = sys.argv[1], sys.argv[2]
src = os.path.join(root, "tests/data", json.load(open(os.path.join(root, "tests/data/gguf/weights/index.json")))["files"][name]["source"])
golden = os.path.join(src, "golden.safetensors")
if os.path.isfile(golden):
    b = open(golden, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); s, e = h["input_ids"]["data_offsets"]
    ids = struct.unpack("<%di" % ((e - s) // 4), b[8 + n + s:8 + n + e])
else:
    ids = json.load(open(os.path.join(src, "prompt.json")))["input_ids"]
print(",".join(str(v) for v in ids))
PY
)
    "$LL" "$f" "$ids" "$OUT/$n.cpu.npy" 0
    echo "$OUT/$n.cpu.npy"
done
