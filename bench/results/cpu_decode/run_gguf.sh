#!/usr/bin/env bash
# Issue 19 on the GGUF: sluice (this tree) vs sluice before the row tiles (BASE, a build of 5385fba) vs
# llama.cpp on the same Q4_0 file, all in RAM, 2 threads, alternating A B C A B C, the page cache dropped
# before every engine run, the load average before and after each, peak RSS by /usr/bin/time -v.
# Model: python3 ../shared/peer/synth_gguf.py ../shared/model-configs/qwen3-30b-a3b.json $M/q30b.gguf (Q4_0,
# lm_head Q6_K, routers F32; 17.3 GB). llama.cpp: the 2026-09-12 release (../shared/peer/README.md),
# -DGGML_NATIVE=ON, built here. Each run in its own autogroup of higher weight (run.sh says why).
set -uo pipefail
M=${M:-/work/models}
SLUICE=${SLUICE:-build/bin/sluice}
BASE=${BASE:-/tmp/cd19/sluice_base}
LLAMA=${LLAMA:-/tmp/llama-cpu/bin/llama-bench}
BENCH=${BENCH:-build/bin/matvec_bench}
OUT=${OUT:-bench/results/cpu_decode/gguf}
ROUNDS=${ROUNDS:-2}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
hi() { setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ "$@"; }
sluice_run() {  # binary, name
  uptime > "$OUT/load_$2.txt"
  drop
  hi /usr/bin/time -v "$1" bench "$M/q30b.gguf" --threads 2 --prompt-tokens 128 --gen-tokens 32 --reps 2 --warmup 1 \
    --memory 18G --json "$OUT/$2.json" > "$OUT/$2.txt" 2>&1
  uptime >> "$OUT/load_$2.txt"
}
for round in $(seq 1 "$ROUNDS"); do
  sluice_run "$SLUICE" "sluice_r$round"
  uptime > "$OUT/load_llama_r$round.txt"
  drop
  LD_LIBRARY_PATH=$(dirname "$LLAMA") hi /usr/bin/time -v "$LLAMA" -m "$M/q30b.gguf" -t 2 -p 128 -n 32 -r 2 \
    > "$OUT/llama_r$round.txt" 2>&1
  uptime >> "$OUT/load_llama_r$round.txt"
  [ -x "$BASE" ] && sluice_run "$BASE" "base_r$round"  # BASE=none: sluice against llama.cpp only
done
[ -x "$BENCH" ] && hi "$BENCH" --benchmark_filter='BM_DecodeExpertsGgml|BM_MatmulGgml|BM_MemoryReadBandwidth' \
  --benchmark_repetitions=3 > "$OUT/matvec_bench.txt" 2>&1
true
