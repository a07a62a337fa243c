#!/usr/bin/env bash
# The KV cache types on this machine: held-out perplexity of the default model per --kv-bits (windows of
# 1024 tokens, second half of each scored), without and with the f16 window of recent positions, and one
# decode token's attention over a cache of the 80B's attention shapes at 4K and 32K depth per type
# (bench/matvec_bench.cpp, BM_AttentionDecodeKv).
# Usage: bench/results/kv/run.sh BUILD_DIR (default build); writes next to itself.
set -euo pipefail
B=${1:-build}/bin
HERE=$(cd "$(dirname "$0")" && pwd)
for bits in 32 16 8 4 3; do
    "$B/sluice" perplexity models/tiny-next models/tiny-next/heldout.txt --kv-bits "$bits" --kv-window 0 \
        --ctx-size 1024 2>&1 | tail -n 1 | tee "$HERE/perplexity_kv$bits.txt"
done
for bits in 8 4 3; do
    for window in 64 256; do
        "$B/sluice" perplexity models/tiny-next models/tiny-next/heldout.txt --kv-bits "$bits" \
            --kv-window "$window" --ctx-size 1024 2>&1 | tail -n 1 | tee "$HERE/perplexity_kv${bits}_window$window.txt"
    done
done
"$B/matvec_bench" --benchmark_filter=AttentionDecodeKv --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$HERE/attention_decode_kv.json" \
    --benchmark_out_format=json | tee "$HERE/attention_decode_kv.txt"
