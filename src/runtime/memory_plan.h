// Helpers of the memory plan (include/sluice/engine.h MemoryPlan).
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "sluice/engine.h"

namespace sluice {
std::string human_bytes(uint64_t bytes);  // "1.23 GB" / "45.6 MB"
}

namespace sluice::runtime {

// MemAvailable from /proc/meminfo (0 when unknown).
uint64_t available_memory_bytes();

// Turn checkpoints of DeltaNet state a session keeps (session.h: the latest ones survive).
constexpr size_t kSessionCheckpoints = 4;
// The context a session gets when none is asked for (EngineOptions::context_tokens 0): the
// model's max_position_embeddings up to this many tokens.
constexpr int64_t kDefaultContext = 8192;

// Workspace bytes of a forward over `chunk_tokens` tokens (an upper estimate).
uint64_t scratch_bytes_estimate(const model::ModelConfig& config, int64_t chunk_tokens);

}  // namespace sluice::runtime
