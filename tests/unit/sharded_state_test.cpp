// ShardedState (runtime/sharded_state.h): a sequence held as equal parts, as an expert-parallel group holds
// one per rank. On the CPU backend, with a hybrid golden (DeltaNet state, so snapshots matter): each part
// advanced by its own forward, the whole kept in step through snapshots, rewinds, session files and the
// prefix cache's copies, against one plain sequence doing the same.
#include "runtime/sharded_state.h"

#include <gtest/gtest.h>

#include "model/model.h"
#include "runtime/backend.h"
#include "test_util.h"

namespace sluice::runtime {
namespace {

class ShardedStateTest : public ::testing::Test {
 protected:
    void SetUp() override {
        auto loaded = model::Model::load(sluice::testing::test_data_dir() + "/goldens/qwen3_next_mlx_q4");
        ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
        model_ = *loaded;
        backend_ = make_cpu_backend(model_, nullptr);
    }
    std::unique_ptr<ShardedState> sharded(int parts) {
        std::vector<std::unique_ptr<SequenceState>> p;
        for (int i = 0; i < parts; ++i) {
            auto s = backend_->new_sequence(128, 4);
            EXPECT_TRUE(s.has_value());
            p.push_back(std::move(*s));
        }
        return std::make_unique<ShardedState>(backend_.get(), std::move(p));
    }
    // What the group's forward does: parts aligned, each part's own forward, then committed. Returns part
    // 0's logits; every part's must be the same bits.
    std::vector<float> forward(ShardedState& s, const std::vector<int32_t>& tokens) {
        const int64_t V = model_->config().vocab;
        s.align();
        std::vector<std::vector<float>> logits(s.parts(), std::vector<float>(static_cast<size_t>(V)));
        const int64_t before = s.position();
        for (size_t i = 0; i < s.parts(); ++i)
            EXPECT_TRUE(backend_->forward(s.part(i), tokens, logits[i].data(), false).is_ok());
        for (size_t i = 1; i < s.parts(); ++i) EXPECT_EQ(logits[i], logits[0]) << "part " << i;
        s.committed(s.part(0).position() - before);
        return logits[0];
    }
    std::vector<float> forward(SequenceState& s, const std::vector<int32_t>& tokens) {
        std::vector<float> logits(static_cast<size_t>(model_->config().vocab));
        EXPECT_TRUE(backend_->forward(s, tokens, logits.data(), false).is_ok());
        return logits;
    }

    std::shared_ptr<const model::Model> model_;
    std::unique_ptr<Backend> backend_;
};

std::vector<int32_t> ids(int64_t n, int32_t salt) {
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>((i * 31 + salt) % 200 + 3));
    return out;
}

TEST_F(ShardedStateTest, PartsStayInStepThroughSnapshotsRewindsAndSessionFiles) {
    auto s = sharded(3);
    auto plain = backend_->new_sequence(128, 4);
    ASSERT_TRUE(plain.has_value());
    SequenceState& p = **plain;
    EXPECT_EQ(forward(*s, ids(20, 1)), forward(p, ids(20, 1)));
    ASSERT_TRUE(s->snapshot().is_ok());
    ASSERT_TRUE(p.snapshot().is_ok());
    for (int32_t t : {5, 9, 13}) EXPECT_EQ(forward(*s, {t}), forward(p, {t}));
    // Back to the snapshot: every part's recurrent state restored from its own slot.
    auto at = s->truncate(20);
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(*at, 20);
    ASSERT_TRUE(p.truncate(20).has_value());
    EXPECT_EQ(forward(*s, ids(4, 7)), forward(p, ids(4, 7)));

    // The session file: the same bytes as the plain sequence's, and loading it sets every part.
    std::string a, b;
    ASSERT_TRUE(s->write(a).is_ok());
    ASSERT_TRUE(p.write(b).is_ok());
    EXPECT_EQ(a, b);
    auto t = sharded(2);
    size_t pos = 0;
    ASSERT_TRUE(t->read(a, &pos, s->position()).is_ok());
    EXPECT_EQ(forward(*t, {17}), forward(p, {17}));

    // The prefix cache's copies: rows and running state into a fresh one.
    std::vector<std::string> blocks;
    ASSERT_TRUE(p.read_position_blocks(0, 2, 8, blocks).is_ok());
    std::string running;
    auto q = backend_->new_sequence(128, 4);
    ASSERT_TRUE(q.has_value());
    ASSERT_TRUE(forward(**q, ids(16, 3)).size() > 0);
    ASSERT_TRUE((*q)->append_running(running).is_ok());
    std::vector<std::string> qblocks;
    ASSERT_TRUE((*q)->read_position_blocks(0, 2, 8, qblocks).is_ok());
    std::vector<std::string_view> views(qblocks.begin(), qblocks.end());
    auto u = sharded(2);
    ASSERT_TRUE(u->assign_prefix(views, 8, running, 16).is_ok());
    EXPECT_EQ(forward(*u, {42}), forward(**q, {42}));
}

}  // namespace
}  // namespace sluice::runtime
