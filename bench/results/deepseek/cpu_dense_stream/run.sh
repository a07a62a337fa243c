#!/usr/bin/env bash
# Streaming the dense core on the CPU (issue 24): DeepSeek-V3's real layer shapes truncated to 8 layers (3 dense,
# 5 MoE; 16 routed experts instead of 256 — the dense core's shapes are V3's, the expert count only sizes the
# expert files), 4-bit g64, synthesized by `sluice synth`. Each run in a memory cgroup (v1) whose limit holds the
# process and its page cache, so what does not fit is really read from disk; page cache dropped before each run.
# Usage: bench/results/deepseek/cpu_dense_stream/run.sh [MODEL_DIR] (default /work/models/ds8, made from
# ../shared/model-configs/deepseek-v3-671b.json with num_hidden_layers 8, n_routed_experts 16, n_group 1,
# topk_group 1, num_nextn_predict_layers 0: `sluice synth ds8.json /work/models/ds8 --bits 4`).
set -euo pipefail
B=${B:-build-cuda/bin/sluice}
M=${1:-/work/models/ds8}
OUT=$(dirname "$0")
CG=/sys/fs/cgroup/memory/sluice-dense-stream
mkdir -p "$CG"
run() {  # name cgroup_limit sluice-args...
    local name=$1 limit=$2
    shift 2
    sync
    echo 1 > /proc/sys/vm/drop_caches
    echo "$limit" > "$CG/memory.limit_in_bytes"
    echo 0 > "$CG/memory.max_usage_in_bytes" 2>/dev/null || true
    uptime > "$OUT/$name.txt"
    echo "+ cgroup limit $limit: $B bench $M $*" >> "$OUT/$name.txt"
    sh -c "echo \$\$ > $CG/cgroup.procs; exec $B bench $M $*" >> "$OUT/$name.txt" 2>&1
    echo "cgroup max usage $(cat "$CG/memory.max_usage_in_bytes") bytes" >> "$OUT/$name.txt"
}
ARGS="--threads 2 --prompt-tokens 16 --gen-tokens 8 --reps 2"
run held_8g 8G --memory 7G --stream-dense off $ARGS
run streamed_8g 8G --memory 7G --stream-dense on $ARGS
run streamed_3g 3G --memory 2700M $ARGS
run held_3g_nostream 3G --memory 2700M --stream-dense off $ARGS || true
