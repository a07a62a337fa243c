#!/bin/bash
M=/work/models/q80.gguf
O=/work/main/bench/results/cpu_decode/stream_s29/ab
mkdir -p $O
one() { n=$1; b=$2; shift 2; sync; echo 3 > /proc/sys/vm/drop_caches; echo "== $n"; $b bench $M --device cpu --threads 2 --prompt-tokens 128 --prefill-chunk 128 --gen-tokens 16 --reps 1 --memory 3G "$@" > $O/$n.txt 2>&1; grep -E "rep 1|prefill:|measured" $O/$n.txt; }
for r in ${ROUNDS:-1 2 3}; do
one new_r$r /work/main/build-cuda/bin/sluice
one base_r$r /tmp/sluice_base
one new_nopf_r$r /work/main/build-cuda/bin/sluice --no-prefetch
done
