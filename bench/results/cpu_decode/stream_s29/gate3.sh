#!/bin/bash
# The measured prefetch gate (prefetch_gate.h) against --no-prefetch: 80B at --memory 3G, 64 decode tokens
# (8 blocks of 8 steps), alternated, page cache dropped before each.
M=/work/models/q80.gguf
O=$(dirname "$0")/gate3
mkdir -p $O
one() { n=$1; b=$2; shift 2; sync; echo 3 > /proc/sys/vm/drop_caches; echo "== $n"; $b bench $M --device cpu --threads 2 --prompt-tokens 128 --prefill-chunk 128 --gen-tokens 64 --reps 1 --memory 3G --json $O/$n.json "$@" > $O/$n.txt 2>&1; grep -E "rep 1|prefill:|prefetch  " $O/$n.txt; }
for r in 1 2; do
one gate_r$r /work/main/build-cuda/bin/sluice
one nopf_r$r /work/main/build-cuda/bin/sluice --no-prefetch
done
