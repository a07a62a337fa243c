#!/usr/bin/env bash
# The GPU checks, run on a machine with an NVIDIA GPU: every CUDA op against its CPU reference
# (sluice_gpu_tests), the same under compute-sanitizer (memcheck, racecheck), and the whole-model
# goldens on the CUDA backend (fused, and unfused with SLUICE_CUDA_UNFUSED=1). Usage: tools/gpu_check.sh BUILD_DIR [OUT_DIR]
set -uo pipefail
BUILD=${1:-build}
OUT=${2:-.}
status=0
run() {  # name, command...
    local name=$1
    shift
    echo "== $name: $*"
    if "$@" >"$OUT/$name.log" 2>&1; then echo "   ok"; else echo "   FAILED (see $OUT/$name.log)"; status=1; fi
    tail -n 5 "$OUT/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
run gpu_tests "$BUILD/bin/sluice_gpu_tests"
run goldens_cuda "$BUILD/bin/sluice_tests" --gtest_filter='Goldens/Golden.*'
# The same with the fused decode kernels switched off (their reference twins, backend.cpp).
run goldens_cuda_unfused env SLUICE_CUDA_UNFUSED=1 "$BUILD/bin/sluice_tests" --gtest_filter='Goldens/Golden.OnCuda*'
if command -v compute-sanitizer >/dev/null; then
    run memcheck compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/bin/sluice_gpu_tests" \
        --gtest_filter='CudaOps.*'
    run racecheck compute-sanitizer --tool racecheck --error-exitcode 3 "$BUILD/bin/sluice_gpu_tests" \
        --gtest_filter='CudaOps.Attention*:CudaOps.Norms*:CudaOps.GroupedMoe*:CudaOps.DeltaNetFused*'
    run memcheck_golden compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/bin/sluice_tests" \
        --gtest_filter='Goldens/Golden.OnCuda*qwen3_next_mlx_q4*'
else
    echo "compute-sanitizer not found: sanitizer runs skipped"
fi
exit $status
