#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build for SECONDS each, JOBS targets at a time (each target is
# one process on one core, so on N cores N targets get their full time in 1/N of the wall clock). Each
# target runs on its corpus (BUILD/corpus/NAME, kept between runs) plus the committed seeds
# (tests/fuzz/seeds/NAME); a finding is written to BUILD/artifacts/ and fails the run with the end of the
# target's log.   usage: scripts/fuzz.sh BUILD SECONDS [JOBS]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD SECONDS [JOBS]}
seconds=${2:?usage: scripts/fuzz.sh BUILD SECONDS [JOBS]}
jobs=${3:-$(nproc)}
mkdir -p "$build/artifacts" "$build/logs"

run_one() {  # target binary; prints its summary, returns its status
  local f=$1 name
  name=$(basename "$f")
  mkdir -p "$build/corpus/$name" "tests/fuzz/seeds/$name"
  "$f" -max_total_time="$seconds" -timeout=25 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" \
    "$build/corpus/$name" "tests/fuzz/seeds/$name" > "$build/logs/$name.log" 2>&1
  local rc=$?
  if ((rc != 0)); then
    tail -n 60 "$build/logs/$name.log"
    echo "fuzz: $name FAILED (log: $build/logs/$name.log)"
    return 1
  fi
  grep -E '^stat::number_of_executed_units' "$build/logs/$name.log" | sed "s/^/fuzz: $name /"
}

targets=("$build"/bin/*_fuzz)
[[ -x ${targets[0]} ]] || { echo "fuzz: no targets in $build/bin (make fuzz-build)"; exit 1; }
echo "fuzz: ${#targets[@]} targets for ${seconds}s each, $jobs at a time"
failed=0
for f in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || failed=1; done
  run_one "$f" &
done
while (($(jobs -rp | wc -l) > 0)); do wait -n || failed=1; done
exit $failed
