#!/usr/bin/env bash
# Issue 24: sluice vs llama.cpp on DeepSeek-V3's real layer shapes, CPU, 2 threads, all in RAM (page cache warm).
# Config ds8.json (this folder): ../shared/model-configs/deepseek-v3-671b.json with num_hidden_layers 8,
# n_routed_experts 16, n_group 1, topk_group 1, num_nextn_predict_layers 0 (3 dense layers, 5 MoE, top-8).
# Models (random weights, both):
#   sluice:    sluice synth ds8.json /work/models/ds8 --bits 4                       (MLX affine 4-bit g64, 4.4 GB)
#   llama.cpp: /usr/bin/python3 tools/synth_gguf_deepseek2.py ds8.json /work/models/ds8-q4_0.gguf
#              (deepseek2, Q4_0 as llama-quantize Q4_0 lays it out, lm_head Q6_K, routers/norms F32; 4.90 GB)
# llama.cpp: the 2026-09-12 release (commit 80fb11a, ../shared/peer/README.md), CPU build, GGML_NATIVE=ON.
# Alternation: odd rounds sluice then llama.cpp, even rounds llama.cpp then sluice. Before every engine run
# the model's files are read through the page cache (both fit in the 23 GB of RAM together) and the load
# average is recorded before and after. Peak RSS by /usr/bin/time -v. Each run in its own autogroup of higher
# weight, as bench/results/cpu_decode/run_gguf.sh does (other engineers compile on this 2-core machine).
set -uo pipefail
SLUICE=${SLUICE:-/work/main/build-cuda/bin/sluice}
LLAMA=${LLAMA:-/tmp/llama-cpu/bin/llama-bench}
SM=${SM:-/work/models/ds8}
GM=${GM:-/work/models/ds8-q4_0.gguf}
OUT=${OUT:-$(dirname "$0")/raw}
FIRST=${FIRST:-1}
ROUNDS=${ROUNDS:-3}   # rounds FIRST..ROUNDS
mkdir -p "$OUT"
hi() { setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ "$@"; }
warm() { cat "$@" > /dev/null; }
sluice_run() {  # name
  warm "$SM"/dense.safetensors "$SM"/experts/*
  uptime > "$OUT/load_$1.txt"
  hi /usr/bin/time -v "$SLUICE" bench "$SM" --threads 2 --prompt-tokens 128 --gen-tokens 16 --reps 2 --warmup 1 \
    --memory 12G --json "$OUT/$1.json" > "$OUT/$1.txt" 2>&1
  uptime >> "$OUT/load_$1.txt"
}
llama_run() {  # name
  warm "$GM"
  uptime > "$OUT/load_$1.txt"
  LD_LIBRARY_PATH=$(dirname "$LLAMA") hi /usr/bin/time -v "$LLAMA" -m "$GM" -t 2 -p 128 -n 16 -r 2 -fa 0,1 \
    > "$OUT/$1.txt" 2>&1
  uptime >> "$OUT/load_$1.txt"
}
for round in $(seq "$FIRST" "$ROUNDS"); do
  if (( round % 2 )); then
    sluice_run "sluice_r$round"; llama_run "llama_r$round"
  else
    llama_run "llama_r$round"; sluice_run "sluice_r$round"
  fi
done
