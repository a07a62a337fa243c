#!/bin/bash
M=/work/models/q80.gguf
O=/work/main/bench/results/cpu_decode/stream_s29/gate
one() { n=$1; b=$2; shift 2; sync; echo 3 > /proc/sys/vm/drop_caches; echo "== $n"; $b bench $M --device cpu --threads 2 --prompt-tokens 128 --prefill-chunk 128 --gen-tokens 32 --reps 1 --memory 3G --json $O/$n.json "$@" > $O/$n.txt 2>&1; grep -E "rep 1|prefill:" $O/$n.txt; }
for r in 3 4; do
one nopf_r$r /work/main/build-cuda/bin/sluice --no-prefetch
one gated_r$r /work/main/build-cuda/bin/sluice
done
