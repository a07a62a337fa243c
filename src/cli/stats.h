// Run statistics shared by `generate` and `bench`: the machine-readable --stats-json record and
// the measurements behind the speed-of-light bound (disk and memory read bandwidth).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::cli {

uint64_t peak_rss_bytes();

// The --stats-json record of one generation.
nlohmann::json stats_json(const Engine& engine, const GenerationStats& gen, const ExpertCacheStats& cache);

// Random 4 KiB-aligned reads of an expert record's size from a packed model's expert files (or a
// GGUF file, or a folder of split GGUF files) with O_DIRECT at `queue_depth` for about `seconds`: the
// disk bandwidth streaming actually sees. 0 when there is no such file.
double measure_expert_read_gb_s(const std::string& model_dir, uint64_t record_bytes, int queue_depth,
                                double seconds);

// Multi-threaded streaming read over a buffer far larger than the caches.
double measure_memory_read_gb_s(int threads);

}  // namespace sluice::cli
