#!/bin/bash
# Issue 21's bytes-per-token question on a trained router: the default model (models/tiny-next: 64 experts,
# 8 a token, trained on text) packed 4-bit (`sluice pack models/tiny-next /work/models/tn4 --bits 4`), 1 and 8
# concurrent greedy clients, each with an expert cache of about a quarter of the 576 experts (the budgets
# differ by the 8 sessions' state and batched scratch: 84M -> 131 slots, 166M -> 148 slots), --fixed-memory,
# --no-preload, prefix cache off, alternated twice. The model's files stay in the page cache (22 MB): what
# is counted is the expert cache's reads, not the disk's speed.
S=${S:-/work/main/build-cuda/bin/sluice}
M=${M:-/work/models/tn4}
for r in 1 2; do
  for c in 1 8; do
    mem=84M; [ $c = 8 ] && mem=166M
    $S bench $M --memory $mem --fixed-memory --no-preload --prefix-cache 0 --clients $c --prompt-tokens 32 \
      --gen-tokens 64 --reps 2 --warmup 1 --json c${c}_r$r.json > c${c}_r$r.txt 2>&1
  done
done
