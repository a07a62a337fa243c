// Failure atomicity: a forward that fails part-way — here an expert record that fails its checksum
// in layer 5 of the default model, after the DeltaNet layers before it have run — leaves the
// session exactly at its last consistent position. Continuing after the fault is repaired gives
// the same logits, bit for bit, as a fresh session fed the same tokens in the same chunks. Before
// the state was double-buffered, the DeltaNet state of the layers that had run stayed advanced and
// every later token was computed from wrong state.
//
// The fault is a real one (bytes of a packed expert file changed on disk, seen by the store's
// O_DIRECT reads with verify_reads) through the public API; an expert cache of one slot under LRU
// with no prefetch makes every expert of every layer a read.
#include <gtest/gtest.h>

#include "convert/packer.h"
#include "format/pack.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::TempDir;

constexpr int64_t kFaultLayer = 5;  // a DeltaNet layer after three DeltaNet layers and an attention one

class FailureAtomicity : public ::testing::Test {
 protected:
    void SetUp() override {
        const std::string packed = dir_.file("packed");
        ASSERT_TRUE(testing::pack_default_model(packed));
        auto layout = format::open_packed_dir(packed);
        ASSERT_TRUE(layout.has_value()) << layout.status().message();
        const format::PackExpertFile* f = layout->for_layer(kFaultLayer);
        ASSERT_NE(f, nullptr);
        expert_file_ = packed + "/" + f->file;
        stride_ = f->record_stride;
        records_ = static_cast<int64_t>(f->record_xxh3.size());

        EngineOptions eo;
        eo.model_dir = packed;
        eo.threads = 2;
        eo.context_tokens = 256;
        eo.memory_bytes = 2ull << 30;
        eo.expert_cache_bytes = 1;  // one slot
        eo.cache_policy = CachePolicy::kLru;
        eo.prefetch = false;
        eo.verify_reads = true;
        auto e = Engine::load(eo);
        ASSERT_TRUE(e.has_value()) << e.status().message();
        engine_ = *e;
    }

    // Flips one byte in every expert record of the fault layer (again to restore it).
    void flip_records() const {
        ASSERT_TRUE(testing::flip_record_bytes(expert_file_, stride_, records_)) << expert_file_;
    }

    static std::vector<int32_t> ids(int64_t n, int32_t seed) {
        std::vector<int32_t> out;
        for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>((seed + 37 * i) % 8000));
        return out;
    }

    TempDir dir_;
    std::string expert_file_;
    uint64_t stride_ = 0;
    int64_t records_ = 0;
    std::shared_ptr<Engine> engine_;
};

TEST_F(FailureAtomicity, AFailedForwardLeavesTheSessionAtItsLastPosition) {
    const auto prompt = ids(21, 11), chunk = ids(5, 500), more = ids(3, 900);
    auto session = engine_->new_session();
    ASSERT_TRUE(session->evaluate(prompt, false).has_value());
    ASSERT_EQ(session->position(), 21);

    flip_records();
    // A prefill chunk and a decode step, each failing inside layer 5.
    auto failed = session->evaluate(chunk, true);
    ASSERT_FALSE(failed.has_value());
    EXPECT_NE(failed.status().message().find("layer " + std::to_string(kFaultLayer)), std::string::npos)
        << failed.status().message();
    EXPECT_EQ(session->position(), 21);
    EXPECT_EQ(session->tokens(), prompt);
    ASSERT_FALSE(session->evaluate(std::span<const int32_t>(chunk.data(), 1), false).has_value());
    EXPECT_EQ(session->position(), 21);
    flip_records();  // repaired

    auto got_chunk = session->evaluate(chunk, true);
    ASSERT_TRUE(got_chunk.has_value()) << got_chunk.status().message();
    std::vector<float> got_steps;
    for (int32_t t : more) {
        auto step = session->evaluate(std::span<const int32_t>(&t, 1), false);
        ASSERT_TRUE(step.has_value()) << step.status().message();
        got_steps.insert(got_steps.end(), step->begin(), step->end());
    }

    auto fresh = engine_->new_session();
    ASSERT_TRUE(fresh->evaluate(prompt, false).has_value());
    auto want_chunk = fresh->evaluate(chunk, true);
    ASSERT_TRUE(want_chunk.has_value());
    std::vector<float> want_steps;
    for (int32_t t : more) {
        auto step = fresh->evaluate(std::span<const int32_t>(&t, 1), false);
        ASSERT_TRUE(step.has_value());
        want_steps.insert(want_steps.end(), step->begin(), step->end());
    }
    EXPECT_EQ(*got_chunk, *want_chunk) << "the prefill chunk after the failure differs from a fresh session";
    EXPECT_EQ(got_steps, want_steps) << "decode after the failure differs from a fresh session";
}

// A failure in the middle of a multi-chunk evaluate keeps the chunks that completed.
TEST_F(FailureAtomicity, ChunksBeforeTheFailureStay) {
    const auto prompt = ids(12, 3);
    auto session = engine_->new_session();
    ASSERT_TRUE(session->evaluate(std::span<const int32_t>(prompt.data(), 4), false).has_value());
    flip_records();
    ASSERT_FALSE(session->evaluate(std::span<const int32_t>(prompt.data() + 4, 8), false, 4).has_value());
    flip_records();
    EXPECT_EQ(session->position(), 4);
    auto got = session->evaluate(std::span<const int32_t>(prompt.data() + 4, 8), true, 4);
    ASSERT_TRUE(got.has_value());
    auto fresh = engine_->new_session();
    ASSERT_TRUE(fresh->evaluate(std::span<const int32_t>(prompt.data(), 4), false).has_value());
    auto want = fresh->evaluate(std::span<const int32_t>(prompt.data() + 4, 8), true, 4);
    ASSERT_TRUE(want.has_value());
    EXPECT_EQ(*got, *want);
}

}  // namespace
}  // namespace sluice
