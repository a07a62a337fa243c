#!/usr/bin/env bash
# sluice vs llama.cpp on gpt-oss-20b's real shapes, CPU, 2 threads, everything in RAM (page cache warm).
# Config gpt-oss-20b.json (this folder): ../shared/model-configs/gpt-oss-120b.json with num_hidden_layers 24,
# num_local_experts 32 and layer_types cut to 24 (gpt-oss-20b's published config: hidden 2880, 64 heads, 8 kv
# heads, head_dim 64, intermediate 2880, top-4, vocab 201088, sliding window 128 on even layers, YaRN x32).
# Models (random weights, both; 12.1 GB each):
#   sluice:    sluice synth gpt-oss-20b.json /work/models/gptoss20b/sluice-q8 --bits 8 --group-size 64
#              (dense MLX affine 8-bit g64 = 8.5 bits a weight, router 8-bit; experts ggml MXFP4)
#   llama.cpp: /usr/bin/python3 tools/synth_gguf_gptoss.py gpt-oss-20b.json /work/models/gptoss20b/gptoss20b-q8-mxfp4.gguf
#              (gpt-oss, Q8_0 dense as convert_hf_to_gguf --outtype q8_0 writes it, router/biases/sinks F32,
#              experts MXFP4)
# llama.cpp: the 2026-09-12 release (commit 80fb11a, ../shared/peer/README.md), CPU build, GGML_NATIVE=ON.
# Alternation: odd rounds sluice then llama.cpp, even rounds llama.cpp then sluice. The two models do not fit in
# the page cache together (24 GB, 23 GB RAM): before every engine run its files are read through the page
# cache (cat); the load average is recorded before and after. Peak RSS by /usr/bin/time -v. Each run in its own
# autogroup of higher weight, as bench/results/deepseek/cpu_vs_llama/run.sh (others compile on this machine).
set -uo pipefail
SLUICE=${SLUICE:-/work/wt4/build/bin/sluice}
LLAMA=${LLAMA:-/tmp/llama-cpu/bin/llama-bench}
SM=${SM:-/work/models/gptoss20b/sluice-q8}
GM=${GM:-/work/models/gptoss20b/gptoss20b-q8-mxfp4.gguf}
OUT=${OUT:-$(dirname "$0")/raw}
FIRST=${FIRST:-1}
ROUNDS=${ROUNDS:-3}   # rounds FIRST..ROUNDS
REPS=${REPS:-3}
mkdir -p "$OUT"
hi() { setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ "$@"; }
warm() { cat "$@" > /dev/null; }
sluice_run() {  # name
  warm "$SM"/dense.safetensors "$SM"/experts/*
  uptime > "$OUT/load_$1.txt"
  hi /usr/bin/time -v "$SLUICE" bench "$SM" --threads 2 -p 128,512 -n 32 --prefill-chunk 512 --reps "$REPS" \
    --warmup 1 --memory 18G --fixed-memory --json "$OUT/$1.json" > "$OUT/$1.txt" 2>&1
  uptime >> "$OUT/load_$1.txt"
}
llama_run() {  # name
  warm "$GM"
  uptime > "$OUT/load_$1.txt"
  LD_LIBRARY_PATH=$(dirname "$LLAMA") hi /usr/bin/time -v "$LLAMA" -m "$GM" -t 2 -fa 1 -p 128,512 -n 32 \
    -r "$REPS" -o md > "$OUT/$1.txt" 2>&1
  LD_LIBRARY_PATH=$(dirname "$LLAMA") hi /usr/bin/time -v "$LLAMA" -m "$GM" -t 2 -fa 1 -p 0 -n 32 -d 128 \
    -r "$REPS" -o md > "$OUT/$1_d128.txt" 2>&1
  uptime >> "$OUT/load_$1.txt"
}
for round in $(seq "$FIRST" "$ROUNDS"); do
  if (( round % 2 )); then
    sluice_run "sluice_r$round"; llama_run "llama_r$round"
  else
    llama_run "llama_r$round"; sluice_run "sluice_r$round"
  fi
done
