#!/usr/bin/env bash
# Times CI's work phase by phase: clones HEAD of this repository into DIR (default /tmp/sluice-ci-phases,
# replaced) and runs what .ci/run runs, one make target at a time, writing "phase rc seconds" lines to
# DIR.times (and each phase's log to DIR.PHASE.log). CI has 5400 s on a 2-core machine; the README's
# "Tests and CI" section quotes the last measurement.   usage: tools/ci_phases.sh [DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/sluice-ci-phases}
rm -rf "$dir" && git clone -q "$root" "$dir" || exit 1
cd "$dir" || exit 1
times=$dir.times
: >"$times"
t0=$(date +%s)
phase() {  # name, command...
    local name=$1 start rc
    shift
    start=$(date +%s)
    "$@" >"$dir.$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - start)) s (at $(($(date +%s) - t0)) s)" | tee -a "$times"
    return $rc
}
phase deps scripts/install-deps.sh &&
    phase format make format-check &&
    phase build make build WERROR=ON &&
    phase asan make asan WERROR=ON &&
    phase tsan make tsan WERROR=ON &&
    phase fuzzbuild make fuzz-build &&
    phase fixtures make fixtures &&
    phase test make test WERROR=ON
rc=$?
echo "total $(($(date +%s) - t0)) s, rc $rc" | tee -a "$times"
exit $rc
