#!/usr/bin/env bash
# Issue 19, session 29: Qwen3-Next-80B-A3B bigger than memory, the same GGUF in both engines (as stream_s28):
# sluice after the in-layer overlap (experts computed as their reads land, acquire_each) against sluice before
# it (BASE: a build of d6c0740) and llama.cpp's mmap path. Page cache dropped before each run, engines
# alternated, each run in its own autogroup of higher weight; load average before and after, peak RSS by
# /usr/bin/time -v. File: GGUF_PY=/tmp/llama.cpp/gguf-py python3 ../shared/peer/synth_gguf.py
# ../shared/model-configs/qwen3-next-80b-a3b.hf.json /work/models/q80.gguf (Q4_0, 45.1 GB, 1.9x RAM).
set -uo pipefail
SLUICE=${SLUICE:-/work/main/build-cuda/bin/sluice}
BASE=${BASE:-/tmp/sluice_base}
LLAMA_BB=${LLAMA_BB:-/tmp/llama-cpu/bin/llama-batched-bench}
MODEL=${MODEL:-/work/models/q80.gguf}
OUT=${OUT:-$(dirname "$0")}
ROUNDS=${ROUNDS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-16}
MEMORY=${MEMORY:-3G}
LLAMA=${LLAMA:-1}
run() {  # name cmd...
    local name=$1
    shift
    sync
    echo 3 >/proc/sys/vm/drop_caches
    uptime >"$OUT/load_$name.txt"
    echo "+ $*" >"$OUT/$name.txt"
    setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ timeout "${TIMEOUT:-900}" /usr/bin/time -v "$@" \
        >>"$OUT/$name.txt" 2>&1
    echo "exit $?" >>"$OUT/$name.txt"
    uptime >>"$OUT/load_$name.txt"
}
sluice_run() {  # name binary extra...
    local name=$1 bin=$2
    shift 2
    run "$name" "$bin" bench "$MODEL" --device cpu --threads 2 --prompt-tokens "$PROMPT" --prefill-chunk "$PROMPT" \
        --gen-tokens "$GEN" --reps 1 --memory "$MEMORY" --json "$OUT/$name.json" "$@"
}
llama_run() {
    LD_LIBRARY_PATH=$(dirname "$LLAMA_BB") run "$1" "$LLAMA_BB" -m "$MODEL" -t 2 -fa 1 -c 512 -b 2048 -ub 512 \
        -npp "$PROMPT" -ntg "$GEN" -npl 1 -nr
}
for round in $(seq 1 "$ROUNDS"); do
    sluice_run "sluice_r$round" "$SLUICE"
    [ -x "$BASE" ] && sluice_run "base_r$round" "$BASE"
    [ "$LLAMA" = 1 ] && llama_run "llama_r$round"
done
sluice_run sluice_noprefetch "$SLUICE" --no-prefetch
true
