#!/usr/bin/env bash
# MXFP4 row tiles (MXFP4x16) against the natural MXFP4 kernels: the kernel benchmark (both layouts in one
# binary, repetitions interleaved at random), then `sluice bench` on a 4-layer gpt-oss-20b of random weights,
# base (this tree with MXFP4's tiles turned off: SLUICE_BASE) and tiles (SLUICE) alternated. The load average
# before and after every run goes beside its output.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-bench/results/cpu_decode/tiles_mxfp4}
SLUICE=${SLUICE:-build/bin/sluice}
SLUICE_BASE=${SLUICE_BASE:-/tmp/sluice-base}
MODEL=${MODEL:-/tmp/gptoss4l}
ROUNDS=${ROUNDS:-2}
KERNELS=${KERNELS:-1}
DECODE=${DECODE:-1}
if (( KERNELS )); then
  for isa in "" avx2; do
    f=$OUT/matvec_bench${isa:+_$isa}.txt
    uptime > "$OUT/load_$(basename "$f")"
    build/bin/matvec_bench --benchmark_filter='BM_MatvecGgml/39/|BM_DecodeExpertsMxfp4|BM_MemoryReadBandwidth' \
      --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true ${isa:+--isa=$isa} > "$f" 2>&1
    uptime >> "$OUT/load_$(basename "$f")"
  done
fi
if (( DECODE )); then
  # The model: sluice synth gpt-oss-20b-4l.json /tmp/gptoss4l --bits 8 --group-size 64 (this folder's config:
  # gpt-oss-20b's widths, 4 layers; dense MLX 8-bit, experts MXFP4; 1.35 GB dense + 1.69 GB experts).
  for round in $(seq 1 "$ROUNDS"); do
    for who in base tiles; do
      [[ $(( round % 2 )) == 0 ]] && who=$([[ $who == base ]] && echo tiles || echo base)
      bin=$([[ $who == base ]] && echo "$SLUICE_BASE" || echo "$SLUICE")
      cat "$MODEL"/dense.safetensors "$MODEL"/experts/* > /dev/null
      uptime > "$OUT/load_decode_${who}_r$round.txt"
      "$bin" bench "$MODEL" --threads 2 -p 16 -n 32 --reps 3 --warmup 1 --memory 6G --fixed-memory \
        --json "$OUT/decode_${who}_r$round.json" > "$OUT/decode_${who}_r$round.txt" 2>&1
      uptime >> "$OUT/load_decode_${who}_r$round.txt"
    done
  done
fi
