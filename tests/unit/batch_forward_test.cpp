// The batched forward (Engine::evaluate_batch → Backend::forward_batch → Model::forward_batch): for
// N = 1..8 sequences mixing prefill chunks, all-rows chunks and decode tokens, every sequence gets
// exactly — bit for bit — the logits it gets alone, on every golden family (DeltaNet and attention
// models, bf16 and MLX 4-bit) and on a packed model streamed through an expert cache much smaller
// than one layer's expert union. Also: bad batches are refused whole, and a batch that fails
// part-way (a corrupt expert record) leaves every sequence where it was.
#include <gtest/gtest.h>

#include <cstring>

#include "batch_schedule.h"
#include "convert/packer.h"
#include "format/pack.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::ScheduleLogits;

std::shared_ptr<Engine> load(const std::string& dir, uint64_t expert_cache_bytes = 0, int kv_bits = 32) {
    EngineOptions eo;
    eo.kv_bits = kv_bits;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.context_tokens = 64;
    eo.memory_bytes = 2ull << 30;
    eo.expert_cache_bytes = expert_cache_bytes;
    auto e = Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    return e.has_value() ? *e : nullptr;
}

void expect_identical(const ScheduleLogits& r, int n) {
    ASSERT_EQ(r.alone.size(), r.batched.size());
    for (size_t i = 0; i < r.alone.size(); ++i) {
        ASSERT_EQ(r.alone[i].size(), r.batched[i].size()) << "N=" << n << " sequence " << i;
        for (size_t c = 0; c < r.alone[i].size(); ++c) {
            const auto& a = r.alone[i][c];
            const auto& b = r.batched[i][c];
            ASSERT_EQ(a.size(), b.size()) << "N=" << n << " sequence " << i << " chunk " << c;
            ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                << "N=" << n << " sequence " << i << " chunk " << c << ": batched logits differ from alone";
        }
    }
}

class BatchForward : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchForward, EverySequenceGetsItsLogitsAloneBitForBit) {
    auto engine = load(testing::test_data_dir() + "/goldens/" + GetParam());
    ASSERT_NE(engine, nullptr);
    for (int n = 1; n <= 8; ++n) expect_identical(testing::run_schedule(*engine, n), n);
}

// A compressed KV cache batches the same way (each sequence's attention reads its own cache).
TEST(BatchForwardKv, CompressedCachesGiveEverySequenceItsLogitsAlone) {
    for (int bits : {16, 8, 4}) {
        SCOPED_TRACE("kv_bits " + std::to_string(bits));
        auto engine = load(testing::test_data_dir() + "/goldens/qwen3_next_mlx_q4", 0, bits);
        ASSERT_NE(engine, nullptr);
        for (int n : {1, 3, 8}) expect_identical(testing::run_schedule(*engine, n), n);
    }
}

INSTANTIATE_TEST_SUITE_P(Goldens, BatchForward,
                         ::testing::Values("qwen3_next_hf_bf16", "qwen3_next_mlx_q4", "qwen3_moe_hf_bf16",
                                           "qwen3_moe_mlx_q4", "qwen3_5_moe_hf_bf16", "qwen3_5_moe_mlx_q4",
                                           "qwen3_hf_bf16", "qwen3_mlx_q4", "qwen2_hf_bf16", "qwen2_mlx_q4",
                                           "glm4_moe_hf_bf16", "glm4_moe_mlx_q4", "qwen2_moe_hf_bf16",
                                           "qwen2_moe_mlx_q4", "mixtral_hf_bf16", "mixtral_mlx_q4",
                                           "deepseek_v3_hf_bf16", "deepseek_v3_nolora_hf_bf16",
                                           "deepseek_v3_mlx_q4"));

class PackedBatch : public ::testing::Test {
 protected:
    void SetUp() override {
        packed_ = dir_.file("packed");
        ASSERT_TRUE(testing::pack_default_model(packed_));
    }
    testing::TempDir dir_;
    std::string packed_;
};

// The default model packed, through an expert cache of a few slots: one layer's union for a batch
// is larger than the cache, so experts are acquired in rounds and read from disk again and again.
TEST_F(PackedBatch, StreamedThroughASmallCacheEverySequenceGetsItsLogitsAlone) {
    auto probe = load(packed_);
    ASSERT_NE(probe, nullptr);
    const uint64_t slot = probe->memory_plan().slot_bytes;
    const int64_t K = probe->info().experts_per_token;
    probe.reset();
    auto engine = load(packed_, static_cast<uint64_t>(K + 2) * slot);
    ASSERT_NE(engine, nullptr);
    for (int n : {1, 3, 8}) expect_identical(testing::run_schedule(*engine, n), n);
    EXPECT_GT(engine->expert_cache_stats().misses, 0u);
}

// A batch is checked whole before anything runs: a token outside the vocabulary, a session listed
// twice, a session of another engine — each refused with no session moved.
TEST_F(PackedBatch, BadBatchesAreRefusedWhole) {
    auto engine = load(packed_);
    auto other = load(packed_);
    ASSERT_NE(engine, nullptr);
    ASSERT_NE(other, nullptr);
    auto a = engine->new_session(), b = engine->new_session(), c = other->new_session();
    const std::vector<int32_t> good{5, 6, 7}, bad{5, static_cast<int32_t>(engine->info().vocab_size)};
    {
        std::vector<BatchEvaluation> items{{a.get(), good, false, {}}, {b.get(), bad, false, {}}};
        const Status st = engine->evaluate_batch(items);
        EXPECT_FALSE(st.is_ok());
        EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
    }
    {
        std::vector<BatchEvaluation> items{{a.get(), good, false, {}}, {a.get(), good, false, {}}};
        const Status st = engine->evaluate_batch(items);
        EXPECT_NE(st.message().find("same session"), std::string::npos) << st.message();
    }
    {
        std::vector<BatchEvaluation> items{{a.get(), good, false, {}}, {c.get(), good, false, {}}};
        const Status st = engine->evaluate_batch(items);
        EXPECT_NE(st.message().find("not a session of this engine"), std::string::npos) << st.message();
    }
    EXPECT_EQ(a->position(), 0);
    EXPECT_EQ(b->position(), 0);
    EXPECT_EQ(c->position(), 0);
}

// A batch whose forward fails inside a layer (every expert record of layer 5 corrupt, seen by
// verify_reads) moves no sequence; once repaired, the same batch gives each sequence the logits it
// gets alone.
TEST_F(PackedBatch, ABatchThatFailsPartWayMovesNoSequence) {
    auto layout = format::open_packed_dir(packed_);
    ASSERT_TRUE(layout.has_value()) << layout.status().message();
    const format::PackExpertFile* f = layout->for_layer(5);
    ASSERT_NE(f, nullptr);
    const std::string file = packed_ + "/" + f->file;
    const auto records = static_cast<int64_t>(f->record_xxh3.size());

    EngineOptions eo;
    eo.model_dir = packed_;
    eo.threads = 2;
    eo.context_tokens = 64;
    eo.memory_bytes = 2ull << 30;
    eo.expert_cache_bytes = 1;  // one slot: every expert of every layer is a read
    eo.cache_policy = CachePolicy::kLru;
    eo.prefetch = false;
    eo.verify_reads = true;
    auto e = Engine::load(eo);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    Engine& engine = **e;

    const std::vector<int32_t> p0{11, 12, 13, 14}, p1{21}, p2{31, 32, 33}, d0{41}, d1{42}, d2{43, 44};
    auto s0 = engine.new_session(), s1 = engine.new_session(), s2 = engine.new_session();
    std::vector<BatchEvaluation> first{
        {s0.get(), p0, false, {}}, {s1.get(), p1, false, {}}, {s2.get(), p2, true, {}}};
    ASSERT_TRUE(engine.evaluate_batch(first).is_ok());

    ASSERT_TRUE(testing::flip_record_bytes(file, f->record_stride, records));
    std::vector<BatchEvaluation> second{
        {s0.get(), d0, false, {}}, {s1.get(), d1, false, {}}, {s2.get(), d2, true, {}}};
    const Status failed = engine.evaluate_batch(second);
    EXPECT_FALSE(failed.is_ok());
    EXPECT_EQ(s0->position(), 4);
    EXPECT_EQ(s1->position(), 1);
    EXPECT_EQ(s2->position(), 3);
    ASSERT_TRUE(testing::flip_record_bytes(file, f->record_stride, records));  // repaired

    ASSERT_TRUE(engine.evaluate_batch(second).is_ok());
    const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> fed{
        {p0, d0}, {p1, d1}, {p2, d2}};
    for (size_t i = 0; i < fed.size(); ++i) {
        auto alone = engine.new_session();
        ASSERT_TRUE(alone->evaluate(fed[i].first, false, 64).has_value());
        auto l = alone->evaluate(fed[i].second, second[i].all_logits, 64);
        ASSERT_TRUE(l.has_value()) << l.status().message();
        ASSERT_EQ(l->size(), second[i].logits.size());
        EXPECT_EQ(0, std::memcmp(l->data(), second[i].logits.data(), l->size() * sizeof(float)))
            << "sequence " << i << " after the failed batch";
    }
}

}  // namespace
}  // namespace sluice
