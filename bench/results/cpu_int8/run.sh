#!/usr/bin/env bash
# sluice vs llama.cpp on Qwen3-30B-A3B shapes, all in RAM, 2 threads, alternating engines (A B A B).
# Models: sluice synth ../shared/model-configs/qwen3-30b-a3b.json $M/q30b --bits 4 (MLX affine g64);
#         python3 ../shared/peer/synth_gguf.py ../shared/model-configs/qwen3-30b-a3b.json $M/q30b.gguf (Q4_0).
# llama.cpp: the 2026-09-12 release (../shared/peer/README.md), -DGGML_NATIVE=ON, built here.
# The page cache is dropped before every run.
set -uo pipefail
M=${M:-/work/models}
SLUICE=${SLUICE:-build-cpu/bin/sluice}
LLAMA=${LLAMA:-/tmp/llama-cpu/bin/llama-bench}
OUT=${OUT:-bench/results/cpu_int8}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
for round in 1 2; do
  drop
  /usr/bin/time -v "$LLAMA" -m "$M/q30b.gguf" -t 2 -p 128 -n 32 -r 3 -o json > "$OUT/llama_r$round.json" 2> "$OUT/llama_r$round.txt"
  for act in int8 f32; do
    drop
    /usr/bin/time -v "$SLUICE" bench "$M/q30b" --threads 2 --prompt-tokens 128 --gen-tokens 32 --reps 3 --warmup 2 \
      --memory 18G --cpu-activations $act --json "$OUT/sluice_${act}_r$round.json" > "$OUT/sluice_${act}_r$round.txt" 2>&1
  done
done
