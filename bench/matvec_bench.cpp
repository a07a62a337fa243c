// Decode/prefill linear kernels on the Qwen3-Next-80B shapes, next to the machine's measured
// memory read bandwidth, so the result reads as a share of the speed of light.
//
// Weights are MLX affine Q4/Q8, group size 64, bf16 scales/biases, random codes. "cold" runs
// rotate through enough copies of the matrix to touch >= 1 GiB per round (far beyond the LLC),
// as in decode where every weight comes from DRAM; "hot" reuses one copy (cache-resident when it
// fits). The last argument picks the activations (kernels.h): 0 f32 (exact), 1 int8 (integer dot
// products). Counters: GB/s of weight bytes (codes + scales + biases) read, GFLOP/s for matmul. All
// cores through one ThreadPool, like the engine. BM_MemoryReadBandwidth streams a 1 GiB buffer
// with every core (the bar: Q4 matvec on a larger-than-LLC matrix reaches >= 70% of it).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/ggml_tiles.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kernels/weight_format.h"

namespace {

using namespace sluice;
using namespace sluice::kernels;

constexpr size_t kColdBytes = size_t{1} << 30;

ThreadPool& pool() {
    static ThreadPool p(0);
    return p;
}

// A 1-thread pool: per-core numbers, which stay meaningful when the machine is shared.
ThreadPool& single() {
    static ThreadPool p(1);
    return p;
}

ThreadPool& pool_for(int64_t threads_arg) {
    return threads_arg == 1 ? single() : pool();
}

void fill_random(void* dst, size_t bytes, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    auto* p = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        std::memcpy(p + i, &s, 8);
    }
}

// `copies` back-to-back quantized matrices [rows, cols] sharing nothing.
struct QuantSet {
    std::vector<uint32_t> words;
    std::vector<uint16_t> scales, biases;
    std::vector<WeightView> views;
    size_t bytes_per_matrix = 0;

    QuantSet(int bits, int64_t rows, int64_t cols, int32_t gs, bool cold, bool int8 = false) {
        const size_t words_per = static_cast<size_t>(rows * cols * bits / 32);
        const size_t groups_per = static_cast<size_t>(rows * (cols / gs));
        bytes_per_matrix = words_per * 4 + groups_per * 4;
        const size_t copies =
            cold ? std::max<size_t>(1, (kColdBytes + bytes_per_matrix - 1) / bytes_per_matrix) : 1;
        words.resize(words_per * copies);
        scales.resize(groups_per * copies);
        biases.resize(groups_per * copies);
        fill_random(words.data(), words.size() * 4, 1);
        for (size_t g = 0; g < scales.size(); ++g) {
            scales[g] = f32_to_bf16(0.01f + 0.001f * static_cast<float>(g % 7));
            biases[g] = f32_to_bf16(-0.05f + 0.01f * static_cast<float>(g % 11));
        }
        for (size_t c = 0; c < copies; ++c) {
            WeightView w;
            w.type = bits == 4 ? WeightType::kQ4 : WeightType::kQ8;
            w.rows = rows;
            w.cols = cols;
            w.data = words.data() + c * words_per;
            w.scales = scales.data() + c * groups_per;
            w.biases = biases.data() + c * groups_per;
            w.scale_type = ScaleType::kBF16;
            w.group_size = gs;
            w.activations = int8 ? Activations::kInt8 : Activations::kF32;
            views.push_back(w);
        }
    }
};

// Args: in (cols), out (rows), bits, cold, threads (1 = one core, 0 = all cores), int8.
void BM_Matvec(benchmark::State& state) {
    const int64_t cols = state.range(0), rows = state.range(1);
    const int bits = static_cast<int>(state.range(2));
    const bool cold = state.range(3) != 0;
    ThreadPool& tp = pool_for(state.range(4));
    const bool int8 = state.range(5) != 0;
    QuantSet set(bits, rows, cols, 64, cold, int8);
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    for (int64_t i = 0; i < cols; ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    size_t next = 0;
    for (auto _ : state) {
        matvec(set.views[next], x.data(), y.data(), &tp);
        benchmark::DoNotOptimize(y.data());
        next = next + 1 == set.views.size() ? 0 : next + 1;
    }
    const double bytes = static_cast<double>(set.bytes_per_matrix) * static_cast<double>(state.iterations());
    state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
    state.counters["copies"] = static_cast<double>(set.views.size());
    state.counters["threads"] = tp.size();
    state.SetLabel(
        std::string(bits == 4 ? "Q4" : "Q8") + (cold ? " cold" : " hot") + " " +
        (int8 ? std::string("int8 ") + cpu_int8_kernel_isa() : std::string("f32 ") + cpu_kernel_isa()));
}

void matvec_shapes(benchmark::internal::Benchmark* b) {
    const int64_t shapes[][2] = {{2048, 512}, {512, 2048}, {2048, 12288}, {4096, 2048}, {2048, 151936}};
    for (int int8 : {0, 1}) {
        for (int bits : {4, 8})
            for (const auto& s : shapes) b->Args({s[0], s[1], bits, 1, 0, int8});
        for (int bits : {4, 8}) b->Args({2048, 512, bits, 0, 0, int8});
        // One core: the per-core share of the bandwidth (compare with BM_MemoryReadBandwidth/1).
        for (int bits : {4, 8}) b->Args({2048, 12288, bits, 1, 1, int8});
        for (int bits : {4, 8}) b->Args({2048, 768, bits, 0, 1, int8});  // a 30B-A3B expert, hot, one core
        b->Args({2048, 151936, 4, 1, 1, int8});
    }
}
BENCHMARK(BM_Matvec)->Apply(matvec_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// A decode step of n sequences through one cold 4-bit matrix [12288, 2048] (the 80B's DeltaNet input
// shape): arg 0 = n matvec calls, arg 1 = one matvec_batch (each weight row read once for all n).
// Counter: vectors per second, the batch's decode throughput on this matrix.
void BM_MatvecBatch(benchmark::State& state) {
    const int64_t n = state.range(0), cols = 2048, rows = 12288;
    const bool batched = state.range(1) != 0;
    QuantSet set(4, rows, cols, 64, true);
    std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    size_t next = 0;
    for (auto _ : state) {
        if (batched) {
            matvec_batch(set.views[next], x.data(), n, y.data(), &pool());
        } else {
            for (int64_t v = 0; v < n; ++v)
                matvec(set.views[next], x.data() + v * cols, y.data() + v * rows, &pool());
        }
        benchmark::DoNotOptimize(y.data());
        next = next + 1 == set.views.size() ? 0 : next + 1;
    }
    state.counters["vectors/s"] = benchmark::Counter(
        static_cast<double>(n) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.SetLabel(batched ? "matvec_batch" : "n × matvec");
}
BENCHMARK(BM_MatvecBatch)->ArgsProduct({{1, 2, 4, 8}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

// n activation rows through one weight on one core — the k + 1 rows of a speculative verification, a
// batched decode step — as n matvec calls (mode 0: the weight read n times; with `cold`, from DRAM the
// first time and from the last-level cache after) or one matvec_batch (mode 1: the row kernels take up to
// 8 vectors per load of a weight chunk, each vector's result bit for bit its matvec). Args: in (cols), out
// (rows), bits, int8, n, mode, cold. Counters: rows/s (vectors per second) and the weight GB/s of the
// call (weight bytes once per call). The machine this was written on is shared: compare the minimum of
// repetitions (--benchmark_repetitions=5).
void BM_RowVectors(benchmark::State& state) {
    const int64_t cols = state.range(0), rows = state.range(1), n = state.range(4);
    const int bits = static_cast<int>(state.range(2));
    const bool int8 = state.range(3) != 0, batched = state.range(5) != 0, cold = state.range(6) != 0;
    QuantSet set(bits, rows, cols, 64, cold, int8);
    std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i * 7) % 13) - 0.05f;
    size_t next = 0;
    for (auto _ : state) {
        if (batched) {
            matvec_batch(set.views[next], x.data(), n, y.data(), &single());
        } else {
            for (int64_t v = 0; v < n; ++v)
                matvec(set.views[next], x.data() + v * cols, y.data() + v * rows, &single());
        }
        benchmark::DoNotOptimize(y.data());
        next = next + 1 == set.views.size() ? 0 : next + 1;
    }
    state.counters["rows/s"] = benchmark::Counter(
        static_cast<double>(n) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["GB/s"] = benchmark::Counter(
        static_cast<double>(set.bytes_per_matrix) * static_cast<double>(state.iterations()) / 1e9,
        benchmark::Counter::kIsRate);
    state.SetLabel(
        std::string(bits == 4 ? "Q4" : "Q8") + (cold ? " cold " : " hot ") +
        (int8 ? std::string("int8 ") + cpu_int8_kernel_isa() : std::string("f32 ") + cpu_kernel_isa()) +
        (batched ? " matvec_batch" : " n x matvec"));
}
void row_vector_shapes(benchmark::internal::Benchmark* b) {
    // A 30B/80B-class projection 2048 × 2048 from DRAM, the default model's (tiny-next) 256 × 256 and its
    // lm_head 8192 × 256 in cache; 4-bit g64, int8 activations (the CPU default), then f32 activations on
    // the large one.
    for (int64_t n : {1, 2, 3, 4, 5, 8})
        for (int mode : {0, 1}) {
            b->Args({2048, 2048, 4, 1, n, mode, 1});
            b->Args({256, 256, 4, 1, n, mode, 0});
            b->Args({256, 8192, 4, 1, n, mode, 0});
            b->Args({2048, 2048, 4, 0, n, mode, 1});
        }
}
BENCHMARK(BM_RowVectors)->Apply(row_vector_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// One MoE layer of a decode step on Qwen3-30B-A3B's shapes (hidden 2048, expert 768, top-8), the
// experts cold: every routed expert's gate and up [768, 2048] in one matvec_jobs over the token's one x,
// then every down [2048, 768] in another over its own x, as model/moe.cpp's routed_decode runs them.
// Arg: threads (1 = one core, 0 = all cores). Counter: the weight GB/s (codes, scales, biases) — the
// number to read against BM_MemoryReadBandwidth, since a decode of this model is mostly this.
void BM_DecodeExperts(benchmark::State& state) {
    constexpr int64_t kHidden = 2048, kExpert = 768, kTopK = 8;
    ThreadPool& tp = pool_for(state.range(0));
    QuantSet gate(4, kExpert, kHidden, 64, true, true), up(4, kExpert, kHidden, 64, true, true),
        down(4, kHidden, kExpert, 64, true, true);
    std::vector<float> x(static_cast<size_t>(kHidden)), act(static_cast<size_t>(kTopK * kExpert));
    std::vector<float> gu(static_cast<size_t>(2 * kTopK * kExpert)), y(static_cast<size_t>(kTopK * kHidden));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    for (size_t i = 0; i < act.size(); ++i) act[i] = 0.01f * static_cast<float>((i * 7) % 13) - 0.05f;
    std::vector<MatvecJob> jobs(2 * kTopK);
    const size_t copies = std::min({gate.views.size(), up.views.size(), down.views.size()});
    size_t next = 0;
    for (auto _ : state) {
        for (int64_t e = 0; e < kTopK; ++e) {
            const size_t c = (next + static_cast<size_t>(e)) % copies;
            jobs[2 * e] = MatvecJob{&gate.views[c], x.data(), 1, gu.data() + 2 * e * kExpert};
            jobs[2 * e + 1] = MatvecJob{&up.views[c], x.data(), 1, gu.data() + (2 * e + 1) * kExpert};
        }
        matvec_jobs(jobs.data(), 2 * kTopK, &tp);
        for (int64_t e = 0; e < kTopK; ++e)
            jobs[e] = MatvecJob{&down.views[(next + static_cast<size_t>(e)) % copies],
                                act.data() + e * kExpert, 1, y.data() + e * kHidden};
        matvec_jobs(jobs.data(), kTopK, &tp);
        benchmark::DoNotOptimize(y.data());
        next = (next + kTopK) % copies;
    }
    const double bytes =
        static_cast<double>(kTopK) *
        static_cast<double>(gate.bytes_per_matrix + up.bytes_per_matrix + down.bytes_per_matrix);
    state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
    state.counters["threads"] = tp.size();
    state.SetLabel(std::string("Q4 cold int8 ") + cpu_int8_kernel_isa());
}
BENCHMARK(BM_DecodeExperts)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// `copies` (cold: >= 1 GiB) back-to-back GGUF matrices [rows, cols] of `type` (Q4_0, Q6_K, Q8_0 or MXFP4) of
// random blocks (f16 scales near 0.01; MXFP4's e8m0 scales 2^-8 .. 2^-1), in the natural layout or as row
// tiles (kernels/ggml_tiles.h), int8 activations.
struct GgmlSet {
    std::vector<uint8_t> bytes;
    std::vector<WeightView> views;
    size_t bytes_per_matrix = 0;

    GgmlSet(WeightType type, int64_t rows, int64_t cols, bool cold, bool tiled) {
        const WeightFormat& f = weight_format(type);
        bytes_per_matrix = static_cast<size_t>(rows) * f.data_row_bytes(cols);
        const size_t copies =
            cold ? std::max<size_t>(1, (kColdBytes + bytes_per_matrix - 1) / bytes_per_matrix) : 1;
        bytes.resize(bytes_per_matrix * copies);
        fill_random(bytes.data(), bytes.size(), 3);
        const size_t block = static_cast<size_t>(f.block_bytes);
        const size_t d_at = f.ggml == GgmlType::kQ6_K ? 208 : 0;  // the block's f16 scale
        for (size_t b = 0; b < bytes.size(); b += block) {
            if (f.ggml == GgmlType::kMXFP4) {
                bytes[b] = static_cast<uint8_t>(120 + (b / block) % 8);
                continue;
            }
            const uint16_t d = f32_to_f16(0.01f + 0.001f * static_cast<float>((b / block) % 7));
            std::memcpy(bytes.data() + b + d_at, &d, 2);
        }
        std::vector<uint8_t> scratch(tiled ? ggml_tile_scratch_bytes(type, cols) : 0);
        for (size_t c = 0; c < copies; ++c) {
            WeightView w;
            w.type = type;
            w.rows = rows;
            w.cols = cols;
            w.data = bytes.data() + c * bytes_per_matrix;
            w.activations = Activations::kInt8;
            if (tiled) {
                ggml_tile_in_place(w.type, bytes.data() + c * bytes_per_matrix, rows, cols, scratch.data());
                w.type = tiled_type(w);
            }
            views.push_back(w);
        }
    }
};

// One MoE layer's routed experts of a decode step (top_k experts of `type`, gate and up [expert, hidden],
// down [hidden, expert], all cold), as model/moe.cpp's routed_decode runs them.
void decode_experts_ggml(benchmark::State& state, WeightType type, int64_t kHidden, int64_t kExpert,
                         int64_t kTopK) {
    ThreadPool& tp = pool_for(state.range(0));
    const bool tiled = state.range(1) != 0;
    GgmlSet gate(type, kExpert, kHidden, true, tiled), up(type, kExpert, kHidden, true, tiled),
        down(type, kHidden, kExpert, true, tiled);
    std::vector<float> x(static_cast<size_t>(kHidden)), act(static_cast<size_t>(kTopK * kExpert));
    std::vector<float> gu(static_cast<size_t>(2 * kTopK * kExpert)), y(static_cast<size_t>(kTopK * kHidden));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    for (size_t i = 0; i < act.size(); ++i) act[i] = 0.01f * static_cast<float>((i * 7) % 13) - 0.05f;
    std::vector<MatvecJob> jobs(2 * kTopK);
    const size_t copies = std::min({gate.views.size(), up.views.size(), down.views.size()});
    size_t next = 0;
    for (auto _ : state) {
        for (int64_t e = 0; e < kTopK; ++e) {
            const size_t c = (next + static_cast<size_t>(e)) % copies;
            jobs[2 * e] = MatvecJob{&gate.views[c], x.data(), 1, gu.data() + 2 * e * kExpert};
            jobs[2 * e + 1] = MatvecJob{&up.views[c], x.data(), 1, gu.data() + (2 * e + 1) * kExpert};
        }
        matvec_jobs(jobs.data(), 2 * kTopK, &tp);
        for (int64_t e = 0; e < kTopK; ++e)
            jobs[e] = MatvecJob{&down.views[(next + static_cast<size_t>(e)) % copies],
                                act.data() + e * kExpert, 1, y.data() + e * kHidden};
        matvec_jobs(jobs.data(), kTopK, &tp);
        benchmark::DoNotOptimize(y.data());
        next = (next + kTopK) % copies;
    }
    const double bytes =
        static_cast<double>(kTopK) *
        static_cast<double>(gate.bytes_per_matrix + up.bytes_per_matrix + down.bytes_per_matrix);
    state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
    state.counters["threads"] = tp.size();
    state.SetLabel(std::string(weight_type_name(gate.views[0].type)) + " cold int8 " + cpu_int8_kernel_isa());
}

// BM_DecodeExperts on a GGUF's Q4_0 experts (Qwen3-30B-A3B: 8 of hidden 2048, expert width 768). Args:
// threads (1 = one core, 0 = all cores), row tiles (0: the natural layout, 1: Q4_0x16).
void BM_DecodeExpertsGgml(benchmark::State& state) {
    decode_experts_ggml(state, WeightType::kGgmlQ4_0, 2048, 768, 8);
}
BENCHMARK(BM_DecodeExpertsGgml)->ArgsProduct({{0, 1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same on gpt-oss-20b's MXFP4 experts (4 of hidden 2880, expert width 2880: 13.2 MB a layer). Args:
// threads, row tiles (1: MXFP4x16).
void BM_DecodeExpertsMxfp4(benchmark::State& state) {
    decode_experts_ggml(state, WeightType::kGgmlMXFP4, 2880, 2880, 4);
}
BENCHMARK(BM_DecodeExpertsMxfp4)->ArgsProduct({{0, 1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

// A prefill chunk through one GGUF Q4_0 matrix, hot (the expert-sized products of a 128-token prefill:
// each routed expert sees ~8 tokens), or an MXFP4 one of gpt-oss-20b's expert shape. Args: tokens, in,
// out, row tiles, ggml type (2 Q4_0, 39 MXFP4).
void BM_MatmulGgml(benchmark::State& state) {
    const int64_t n = state.range(0), cols = state.range(1), rows = state.range(2);
    const WeightType type = ggml_weight_format(static_cast<uint32_t>(state.range(4)))->type;
    GgmlSet set(type, rows, cols, false, state.range(3) != 0);
    std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    for (auto _ : state) {
        matmul(set.views[0], x.data(), n, y.data(), &pool());
        benchmark::DoNotOptimize(y.data());
    }
    const double flops = 2.0 * static_cast<double>(n * rows * cols) * static_cast<double>(state.iterations());
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
    state.SetLabel(std::string(weight_type_name(set.views[0].type)) + " int8 " + cpu_int8_kernel_isa());
}
BENCHMARK(BM_MatmulGgml)
    ->ArgsProduct({{1, 8, 128}, {2048}, {768}, {0, 1}, {2}})
    ->ArgsProduct({{8, 128}, {2880}, {2880}, {0, 1}, {39}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// One cold decode matvec of a GGUF matrix, natural or row-tiled: the Q6_K lm_head of Qwen3-30B-A3B
// (151936 × 2048: 255 MB, ~12% of a decode token), its Q8_0 attention projections where a file has them
// (q 4096 × 2048, o 2048 × 4096), and a Q6_K expert down (2048 × 768, as Q4_K_M files store some).
// Hot (a 256 × 2048 matrix that stays in L2, one core): the kernel's arithmetic alone, its ceiling.
// MXFP4: a gpt-oss-20b expert projection (2880 × 2880, 4.4 MB; gate, up and down alike).
// Args: ggml type (2 Q4_0, 8 Q8_0, 14 Q6_K, 39 MXFP4), rows, cols, threads (1 = one core, 0 = all), row
// tiles, cold.
// Counter: the weight GB/s, to read against BM_MemoryReadBandwidth.
void BM_MatvecGgml(benchmark::State& state) {
    const WeightType type = ggml_weight_format(static_cast<uint32_t>(state.range(0)))->type;
    const int64_t rows = state.range(1), cols = state.range(2);
    ThreadPool& tp = pool_for(state.range(3));
    const bool tiled = state.range(4) != 0;
    GgmlSet set(type, rows, cols, state.range(5) != 0, tiled);
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    size_t next = 0;
    for (auto _ : state) {
        matvec(set.views[next], x.data(), y.data(), &tp);
        benchmark::DoNotOptimize(y.data());
        next = (next + 1) % set.views.size();
    }
    state.counters["GB/s"] = benchmark::Counter(
        static_cast<double>(set.bytes_per_matrix) * static_cast<double>(state.iterations()) / 1e9,
        benchmark::Counter::kIsRate);
    state.counters["threads"] = tp.size();
    state.SetLabel(std::string(weight_type_name(set.views[0].type)) + (state.range(5) ? " cold" : " hot") +
                   " int8 " + cpu_int8_kernel_isa());
}
BENCHMARK(BM_MatvecGgml)
    ->ArgsProduct({{14}, {151936}, {2048}, {0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{14}, {2048}, {768}, {0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{8}, {4096}, {2048}, {0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{8}, {2048}, {4096}, {0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{39}, {2880}, {2880}, {0, 1}, {0, 1}, {1}})
    ->ArgsProduct({{2, 8, 14, 39}, {256}, {2048}, {1}, {0, 1}, {0}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Args: tokens, in, out, bits, int8.
void BM_Matmul(benchmark::State& state) {
    const int64_t n = state.range(0), cols = state.range(1), rows = state.range(2);
    const int bits = static_cast<int>(state.range(3));
    const bool int8 = state.range(4) != 0;
    QuantSet set(bits, rows, cols, 64, false, int8);
    std::vector<float> x(static_cast<size_t>(n * cols)), y(static_cast<size_t>(n * rows));
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
    for (auto _ : state) {
        matmul(set.views[0], x.data(), n, y.data(), &pool());
        benchmark::DoNotOptimize(y.data());
    }
    const double flops = 2.0 * static_cast<double>(n * rows * cols) * static_cast<double>(state.iterations());
    state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
    state.SetLabel(
        std::string(bits == 4 ? "Q4" : "Q8") + " " +
        (int8 ? std::string("int8 ") + cpu_int8_kernel_isa() : std::string("f32 ") + cpu_kernel_isa()));
}
BENCHMARK(BM_Matmul)
    ->ArgsProduct({{128}, {2048}, {512}, {4, 8}, {0, 1}})
    ->ArgsProduct({{128}, {2048}, {12288}, {4}, {0, 1}})
    ->ArgsProduct({{512}, {2048}, {512}, {4}, {0, 1}})
    ->ArgsProduct({{16}, {2048}, {768}, {4}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Every core streams its contiguous share of a 1 GiB buffer (8 independent accumulators so the
// loop is bound by loads, not by add latency).
// Arg: threads (1 = one core, 0 = all cores).
void BM_MemoryReadBandwidth(benchmark::State& state) {
    ThreadPool& tp = pool_for(state.range(0));
    const size_t n = kColdBytes / 8;
    std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
    fill_random(buf.get(), n * 8, 2);
    for (auto _ : state) {
        tp.parallel_for(
            static_cast<int64_t>(n),
            [&](int64_t b, int64_t e) {
                uint64_t acc[8] = {};
                for (int64_t i = b; i + 8 <= e; i += 8)
                    for (int l = 0; l < 8; ++l) acc[l] += buf[i + l];
                uint64_t s = 0;
                for (uint64_t a : acc) s += a;
                benchmark::DoNotOptimize(s);
            },
            1 << 20);
    }
    state.counters["GB/s"] =
        benchmark::Counter(static_cast<double>(n * 8) * static_cast<double>(state.iterations()) / 1e9,
                           benchmark::Counter::kIsRate);
    state.counters["threads"] = tp.size();
}
BENCHMARK(BM_MemoryReadBandwidth)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);

// GGUF Q4_0 (arg 0) / Q8_0 (1) into the MLX affine rows they exactly are (kernels/quantize.h), one
// GLM-4.5-Air expert projection (1408 x 4096) on one core: the CUDA upload converts every resident expert
// of such a file this way. GB/s of GGUF bytes converted.
void BM_GgmlAsMlxAffine(benchmark::State& state) {
    const bool q8 = state.range(0) == 1;
    const int64_t rows = 1408, cols = 4096, block_bytes = q8 ? 34 : 18;
    std::vector<uint8_t> data(static_cast<size_t>(rows * cols / 32 * block_bytes));
    uint32_t seed = 1;
    for (auto& b : data) b = static_cast<uint8_t>((seed = seed * 1664525u + 1013904223u) >> 24);
    for (int64_t i = 0; i < rows * cols / 32; ++i) {  // d = 1/16 in every block: a bias that fits f16
        data[static_cast<size_t>(i * block_bytes)] = 0x00;
        data[static_cast<size_t>(i * block_bytes + 1)] = 0x2c;
    }
    WeightView w;
    w.type = q8 ? WeightType::kGgmlQ8_0 : WeightType::kGgmlQ4_0;
    w.rows = rows;
    w.cols = cols;
    w.data = data.data();
    MlxAffineRows out;
    for (auto _ : state) {
        if (!ggml_as_mlx_affine(w, &out)) state.SkipWithError("not converted");
        benchmark::DoNotOptimize(out.words.data());
    }
    state.counters["GB/s"] = benchmark::Counter(static_cast<double>(data.size()) * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GgmlAsMlxAffine)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
    int kept = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg.rfind("--isa=", 0) == 0) {
            if (!sluice::kernels::testing::force_isa(arg.substr(6))) {
                std::fprintf(stderr, "matvec_bench: unknown or unsupported ISA '%s'\n", arg.c_str() + 6);
                return 1;
            }
            continue;
        }
        argv[kept++] = argv[i];
    }
    argc = kept;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
