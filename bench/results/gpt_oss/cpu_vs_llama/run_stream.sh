#!/usr/bin/env bash
# The same two models (run.sh) under a memory limit smaller than either: each run in a cgroup v1 memory
# controller whose limit (LIMIT, default 8G) holds the process and its page cache, so what does not fit is read
# from disk; page cache dropped before each run (cold). sluice streams its experts (--memory 7G: the dense core
# held, the rest an expert cache); llama.cpp cannot load the model with its default repacked CPU buffer under
# this limit (the anonymous copy alone is ~11 GB), so it runs from its mmap with llama-batched-bench -nr (no
# repack), as ../shared/peer/README.md did for Qwen. Alternated, odd rounds sluice first.
set -uo pipefail
SLUICE=${SLUICE:-/work/wt4/build/bin/sluice}
LLAMA_BB=${LLAMA_BB:-/tmp/llama-cpu/bin/llama-batched-bench}
SM=${SM:-/work/models/gptoss20b/sluice-q8}
GM=${GM:-/work/models/gptoss20b/gptoss20b-q8-mxfp4.gguf}
OUT=${OUT:-$(dirname "$0")/raw_stream}
LIMIT=${LIMIT:-8G}
FIRST=${FIRST:-1}
ROUNDS=${ROUNDS:-2}
CG=/sys/fs/cgroup/memory/sluice-gptoss-stream
mkdir -p "$OUT" "$CG"
incg() {  # name cmd...: cold page cache, the limit, load average before/after, /usr/bin/time -v
  local name=$1; shift
  sync; echo 1 > /proc/sys/vm/drop_caches
  echo "$LIMIT" > "$CG/memory.limit_in_bytes"
  echo 0 > "$CG/memory.max_usage_in_bytes" 2>/dev/null || true
  uptime > "$OUT/load_$name.txt"
  echo "+ cgroup limit $LIMIT: $*" > "$OUT/$name.txt"
  setsid bash -c 'echo -10 > /proc/self/autogroup; echo $$ > '"$CG"'/cgroup.procs; exec "$@"' _ \
    timeout "${TIMEOUT:-300}" /usr/bin/time -v "$@" >> "$OUT/$name.txt" 2>&1; echo "exit $?" >> "$OUT/$name.txt"
  echo "cgroup max usage $(cat "$CG/memory.max_usage_in_bytes") bytes" >> "$OUT/$name.txt"
  uptime >> "$OUT/load_$name.txt"
}
sluice_run() { incg "$1" "$SLUICE" bench "$SM" --threads 2 -p 128 -n 16 --reps 2 --warmup 1 --memory 7G; }
llama_run() {
  LD_LIBRARY_PATH=$(dirname "$LLAMA_BB") incg "$1" "$LLAMA_BB" -m "$GM" -t 2 -fa 1 -c 1024 -b 2048 -ub 512 \
    -npp 128 -ntg 16 -npl 1 -nr
}
for round in $(seq "$FIRST" "$ROUNDS"); do
  if (( round % 2 )); then sluice_run "sluice_r$round"; llama_run "llama_r$round"
  else llama_run "llama_r$round"; sluice_run "sluice_r$round"; fi
done
# Once, to show it: llama-bench's default path (repacked CPU buffer) under the same limit.
if [[ "${LLAMA_DEFAULT:-0}" == 1 ]]; then
  LD_LIBRARY_PATH=/tmp/llama-cpu/bin incg llama_default /tmp/llama-cpu/bin/llama-bench -m "$GM" -t 2 -fa 1 -p 128 -n 16 -r 1
fi
