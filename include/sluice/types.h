// sluice's public API: small option types shared by the engine's options and the layers below it
// (the expert cache, the CUDA backend) — plain values, no engine knowledge.
#pragma once

#include <string>

#include "sluice/export.h"
#include "sluice/status.h"

namespace sluice {

// How the expert cache picks a victim: least frequently used with recency as tie-break (the
// default; frequency history kept for evicted experts) or least recently used (for comparison).
enum class CachePolicy { kLfu, kLru };
SLUICE_API const char* cache_policy_name(CachePolicy policy);  // "lfu", "lru"
// "lfu" / "lru" → the policy; anything else is an error naming the value.
SLUICE_API Expected<CachePolicy> parse_cache_policy(const std::string& name);

// Diagnostic switches of the CUDA backend, to bisect a device mismatch or take a kernel apart;
// no setting changes what is computed, only which kernels compute it. The CLI reads them from the
// environment in one place (cuda_diagnostics_from_env) and the backend logs the ones set at start.
struct CudaDiagnostics {
    bool unfused = false;      // SLUICE_CUDA_UNFUSED=1: the fused kernels' reference sequences
    bool simt_matmul = false;  // SLUICE_CUDA_MATMUL=simt: prefill products without tensor cores
    int matvec_split = 0;      // SLUICE_CUDA_MATVEC_SPLIT=1|2|4|8: one column split for every decode product
    bool timing = false;       // SLUICE_CUDA_TIMING=1: GPU time per decode step, logged at close
    bool no_dependent_launch = false;  // SLUICE_CUDA_PDL=0: no programmatic dependent launch
};
SLUICE_API CudaDiagnostics cuda_diagnostics_from_env();

}  // namespace sluice
