#!/bin/bash
# Issue 21's streamed row: Qwen3-Next-80B shapes (q80.gguf, Q4_0, 45 GB: 1.9x RAM) on the 2-core VM, 1 and 8
# concurrent greedy clients, expert bytes read per generated token. The budgets give both the same expert
# cache (~1.0 GB: 548 and 563 slots): 8 sessions' state (DeltaNet state and snapshots) takes 3.3 GB more than
# one's and their batched scratch 0.8 GB more. Page cache dropped before each run. (wait2ms/ and wait5pct/ ran
# 8 clients at 6420M, an expert cache of 364 MB.)
S=${S:-/work/main/build-cuda/bin/sluice}
M=/work/models/q80.gguf
for r in ${ROUNDS:-1 2}; do
  for c in ${CLIENTS:-1 8}; do
    mem=3G; [ $c = 8 ] && mem=7030M
    sync; echo 3 > /proc/sys/vm/drop_caches
    $S bench $M --memory $mem --prefix-cache 0 --clients $c --prompt-tokens 8 --gen-tokens 8 --reps 1 --warmup 0 \
       --json c${c}_r$r.json > c${c}_r$r.txt 2>&1
  done
done
