#!/usr/bin/env bash
# sluice vs llama.cpp decode on Qwen3-30B-A3B shapes, all in RAM, 2 threads, alternating engines (A B A B),
# plus the expert kernels alone (matvec_bench BM_DecodeExperts) beside the memory read bandwidth.
# Models: sluice synth ../shared/model-configs/qwen3-30b-a3b.json $M/q30b --bits 4 (MLX affine g64);
#         python3 ../shared/peer/synth_gguf.py ../shared/model-configs/qwen3-30b-a3b.json $M/q30b.gguf (Q4_0).
# llama.cpp: the 2026-09-12 release (../shared/peer/README.md), -DGGML_NATIVE=ON, built here.
# The page cache is dropped before every engine run. Each measurement runs in its own autogroup with a
# higher weight (hi): with the kernel's autogroup scheduling on (/proc/sys/kernel/sched_autogroup_enabled),
# `nice -n 19` builds in another session still get an equal share of the 2 cores.
set -uo pipefail
M=${M:-/work/models}
SLUICE=${SLUICE:-build-prefix/bin/sluice}
BENCH=${BENCH:-build-prefix/bin/matvec_bench}
LLAMA=${LLAMA:-/tmp/llama-cpu/bin/llama-bench}
OUT=${OUT:-bench/results/cpu_decode}
ROUNDS=${ROUNDS:-2}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
hi() { setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ "$@"; }
for round in $(seq 1 "$ROUNDS"); do
  uptime > "$OUT/load_r$round.txt"
  drop
  hi /usr/bin/time -v "$SLUICE" bench "$M/q30b" --threads 2 --prompt-tokens 128 --gen-tokens 32 --reps 3 --warmup 2 \
    --memory 18G --json "$OUT/sluice_r$round.json" > "$OUT/sluice_r$round.txt" 2>&1
  drop
  hi /usr/bin/time -v "$LLAMA" -m "$M/q30b.gguf" -t 2 -p 128 -n 32 -r 3 -o json > "$OUT/llama_r$round.json" \
    2> "$OUT/llama_r$round.txt"
  uptime >> "$OUT/load_r$round.txt"
done
hi "$BENCH" --benchmark_filter='BM_DecodeExperts|BM_MemoryReadBandwidth' --benchmark_repetitions=3 \
  > "$OUT/matvec_bench.txt" 2>&1
