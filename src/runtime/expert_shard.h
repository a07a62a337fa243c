// ExpertShard: which part of a MoE model one rank of an expert-parallel group holds and computes
// (runtime/cuda/expert_parallel.cpp). The routed experts are dealt out round-robin by id — rank r of
// R holds experts r, r + R, r + 2R, … of every MoE layer — so each token's k experts spread over the
// ranks whatever the router favours locally (DeepSeek-V3's group-limited routing picks experts of
// neighbouring ids, which contiguous blocks would pile onto one rank). The dense core is replicated;
// of each layer's shared expert, only rank (layer mod R) computes its output, so the ranks share that
// work too and the sum over ranks counts it once.
#pragma once

#include <cstdint>

namespace sluice::runtime {

struct ExpertShard {
    int rank = 0;
    int ranks = 1;

    bool whole() const { return ranks <= 1; }
    bool owns_expert(int64_t expert) const { return ranks <= 1 || expert % ranks == rank; }
    bool owns_shared(int64_t layer) const { return ranks <= 1 || layer % ranks == rank; }
    // How many of n_experts ids this rank holds.
    int64_t owned_experts(int64_t n_experts) const {
        if (ranks <= 1) return n_experts;
        return n_experts / ranks + (rank < n_experts % ranks ? 1 : 0);
    }
};

}  // namespace sluice::runtime
