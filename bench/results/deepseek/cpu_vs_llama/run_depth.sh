#!/usr/bin/env bash
# Decode at the same context depth: sluice decodes its 16 tokens after its 128-token prompt, llama-bench's tg16
# starts from an empty context; llama-bench -d 128 fills 128 positions first. llama.cpp -fa 0,1, both at depth
# 0 and 128, alternating with sluice (same command as run.sh). GGUF with a Q4_0 lm_head to match sluice's 4-bit one:
#   /usr/bin/python3 tools/synth_gguf_deepseek2.py ds8.json /work/models/ds8-q4_0-lmq4.gguf --output-type q4_0
set -uo pipefail
SLUICE=${SLUICE:-/work/main/build-cuda/bin/sluice}
LLAMA=${LLAMA:-/tmp/llama-cpu/bin/llama-bench}
SM=${SM:-/work/models/ds8}
GM=${GM:-/work/models/ds8-q4_0-lmq4.gguf}
OUT=${OUT:-$(dirname "$0")/raw_depth}
FIRST=${FIRST:-1}
ROUNDS=${ROUNDS:-2}   # rounds FIRST..ROUNDS
mkdir -p "$OUT"
hi() { setsid bash -c 'echo -10 > /proc/self/autogroup; exec "$@"' _ "$@"; }
for round in $(seq "$FIRST" "$ROUNDS"); do
  cat "$GM" > /dev/null
  uptime > "$OUT/load_llama_r$round.txt"
  LD_LIBRARY_PATH=$(dirname "$LLAMA") hi /usr/bin/time -v "$LLAMA" -m "$GM" -t 2 -p 0 -n 16 -d 0,128 -r 2 -fa 0,1 \
    > "$OUT/llama_r$round.txt" 2>&1
  uptime >> "$OUT/load_llama_r$round.txt"
  cat "$SM"/dense.safetensors "$SM"/experts/* > /dev/null
  uptime > "$OUT/load_sluice_r$round.txt"
  hi /usr/bin/time -v "$SLUICE" bench "$SM" --threads 2 --prompt-tokens 128 --gen-tokens 16 --reps 2 --warmup 1 \
    --memory 12G --json "$OUT/sluice_r$round.json" > "$OUT/sluice_r$round.txt" 2>&1
  uptime >> "$OUT/load_sluice_r$round.txt"
done
