#!/usr/bin/env bash
# Issue 19, row tiles for Q6_K and Q8_0: decode on the GGUF with the Q6_K lm_head tiled (this tree) against
# the tree before them (BASE: a Release build of 70f14bb), alternating A B A B, short runs (16-token prompt,
# 16 generated tokens: the machine is shared), the load average before and after each, peak RSS by
# /usr/bin/time -v; then the kernels alone (matvec_bench). The page cache is not dropped (other sessions
# share the machine); the file is larger than what the cache can keep beside a run's 17 GB of expert slots.
# Each run in its own autogroup of higher weight (../run.sh says why).
set -uo pipefail
M=${M:-/work/models}
SLUICE=${SLUICE:-build/bin/sluice}
BASE=${BASE:-/tmp/wt3_base/build/bin/sluice}
BENCH=${BENCH:-build/bin/matvec_bench}
OUT=${OUT:-bench/results/cpu_decode/tiles_q6k_q8}
ROUNDS=${ROUNDS:-2}
hi() { setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ "$@"; }
sluice_run() {  # binary, name
  uptime > "$OUT/load_$2.txt"
  hi /usr/bin/time -v "$1" bench "$M/q30b.gguf" --threads 2 --prompt-tokens 16 --gen-tokens 16 --reps 2 --warmup 1 \
    --memory 18G --json "$OUT/$2.json" > "$OUT/$2.txt" 2>&1
  uptime >> "$OUT/load_$2.txt"
}
if [ "${DECODE:-1}" = 1 ]; then
  for round in $(seq 1 "$ROUNDS"); do
    sluice_run "$BASE" "base_r$round"
    sluice_run "$SLUICE" "tiles_r$round"
  done
fi
if [ "${KERNELS:-1}" = 1 ]; then
  uptime > "$OUT/load_matvec_bench.txt"
  # Natural and tiled repetitions interleaved at random, so a change of load hits both alike.
  hi "$BENCH" --benchmark_filter='BM_MatvecGgml|BM_MemoryReadBandwidth' --benchmark_repetitions=5 \
    --benchmark_enable_random_interleaving=true > "$OUT/matvec_bench.txt" 2>&1
  uptime >> "$OUT/load_matvec_bench.txt"
  # The AVX-2 loops on the same machine: one core, the lm_head cold and the L2-hot matrices.
  hi "$BENCH" --isa=avx2 --benchmark_filter='BM_MatvecGgml/(14/151936/2048/1|.*/256/2048)' --benchmark_repetitions=5 \
    --benchmark_enable_random_interleaving=true > "$OUT/matvec_bench_avx2.txt" 2>&1
  uptime >> "$OUT/load_matvec_bench.txt"
fi
