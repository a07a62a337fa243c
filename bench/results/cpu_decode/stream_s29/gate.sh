#!/bin/bash
M=/work/models/q80.gguf
O=/work/main/bench/results/cpu_decode/stream_s29/gate
mkdir -p $O
one() { n=$1; b=$2; shift 2; sync; echo 3 > /proc/sys/vm/drop_caches; echo "== $n"; $b bench $M --device cpu --threads 2 --prompt-tokens 128 --prefill-chunk 128 --gen-tokens 32 --reps 1 --memory 3G --json $O/$n.json "$@" > $O/$n.txt 2>&1; grep -E "rep 1|prefill:|prefetch  " $O/$n.txt; }
for r in 1 2; do
one gated_r$r /work/main/build-cuda/bin/sluice
one nopf_r$r /work/main/build-cuda/bin/sluice --no-prefetch
done
