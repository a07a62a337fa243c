#!/usr/bin/env bash
# gpt-oss-120b and GLM-4.5-Air on this machine's CPU (2 cores, 23 GB RAM), streamed: one synthetic GGUF of the
# real shapes (63.4 / 62.4 GB, 2.7x RAM) read by both engines — sluice streams the routed experts out of the
# file through its expert cache (--memory), llama.cpp runs from its mmap (llama-batched-bench -nr: its
# default repacked CPU buffer cannot hold a model larger than RAM, ../shared/peer/README.md). The files:
#   GGUF_PY=/tmp/llama.cpp/gguf-py /usr/bin/python3 tools/synth_gguf_gptoss.py \
#       ../shared/model-configs/gpt-oss-120b.json /work/models/goss120.gguf
#   GGUF_PY=/tmp/llama.cpp/gguf-py /usr/bin/python3 tools/synth_gguf_glm4moe.py \
#       ../shared/model-configs/glm-4.5-air.json /work/models/glmair.gguf --attention-bias --rope-theta 1e6
# (the disk holds one at a time here). Page cache dropped before each run (cold), engines alternated, each run
# in its own autogroup of higher weight; load average before and after, peak RSS by /usr/bin/time -v.
# Usage: MODEL=/work/models/goss120.gguf NAME=goss120 bench/results/families_cpu/run.sh
set -uo pipefail
SLUICE=${SLUICE:-/work/main/build-cuda/bin/sluice}
LLAMA_BB=${LLAMA_BB:-/tmp/llama-cpu/bin/llama-batched-bench}
MODEL=${MODEL:?the GGUF file}
NAME=${NAME:?a name for the results}
OUT=${OUT:-$(dirname "$0")/raw}
ROUNDS=${ROUNDS:-2}
PROMPT=${PROMPT:-64}
GEN=${GEN:-16}
MEMORY=${MEMORY:-16G}
mkdir -p "$OUT"
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
sluice_run() {
    run "$1" "$SLUICE" bench "$MODEL" --device cpu --threads 2 --prompt-tokens "$PROMPT" --prefill-chunk "$PROMPT" \
        --gen-tokens "$GEN" --reps 1 --memory "$MEMORY" --json "$OUT/$1.json"
}
llama_run() {
    LD_LIBRARY_PATH=$(dirname "$LLAMA_BB") run "$1" "$LLAMA_BB" -m "$MODEL" -t 2 -fa 1 -c 512 -b 2048 -ub 512 \
        -npp "$PROMPT" -ntg "$GEN" -npl 1 -nr
}
for round in $(seq 1 "$ROUNDS"); do
    if ((round % 2)); then
        sluice_run "${NAME}_sluice_r$round"
        llama_run "${NAME}_llama_r$round"
    else
        llama_run "${NAME}_llama_r$round"
        sluice_run "${NAME}_sluice_r$round"
    fi
done
