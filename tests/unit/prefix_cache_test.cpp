// The prefix cache shared by an engine's sessions (runtime/prefix_cache.h, issue 21).
//
// The tree itself with fake state (hits, misses, partial prefixes, the restore-point rules, layouts
// that never mix, LRU eviction of leaves within the budget, blocks a restore pins); then through
// sessions on real models: a prompt that restores a prefix another session computed gives the logits
// of a cold prefill of the whole prompt bit for bit — on the default model (hybrid DeltaNet +
// attention) in f32, f16, q8 and q4 KV with its f16 window, on a hybrid and an attention-only
// golden, whatever the prefill chunk — and counts what it restored; KV types never mix; eviction
// keeps the cache within its budget; the plan reserves its share; concurrent sessions restore and
// store the same prefixes.
#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "sluice/chat_template.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

using runtime::PrefixCache;
constexpr int64_t B = PrefixCache::kBlockTokens;

// ---- the tree, with fake state -----------------------------------------------------------------

std::vector<int32_t> seq_tokens(int64_t n, int32_t first) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + static_cast<int32_t>(i % 1000);
    return t;
}

// Rows read back as their positions (8 bytes a row); the running state names the position.
struct FakeSequence {
    int64_t position = 0;
    int reads = 0;
    int64_t blocks_read = 0;
    Status store(PrefixCache& cache, std::span<const int32_t> tokens, uint64_t layout, bool running) {
        position = static_cast<int64_t>(tokens.size());
        PrefixCache::StateReader reader;
        reader.block_bytes = B * 8;
        reader.running_bytes = running ? 16 : 0;
        reader.read_blocks = [&](int64_t first, int64_t count, std::vector<std::string>& out) {
            ++reads;
            blocks_read += count;
            out.assign(static_cast<size_t>(count), std::string());
            for (int64_t r = first * B; r < (first + count) * B; ++r)
                out[static_cast<size_t>(r / B - first)].append(reinterpret_cast<const char*>(&r), sizeof r);
            return Status::ok();
        };
        reader.read_running = [&](std::string& out) {
            out = "running@" + std::to_string(position);
            return Status::ok();
        };
        return cache.store(tokens, layout, reader);
    }
};

PrefixCache::Query query(std::span<const int32_t> prompt, uint64_t layout, bool running, int64_t held = 0,
                         int64_t chunk = 256) {
    PrefixCache::Query q;
    q.prompt = prompt;
    q.layout = layout;
    q.needs_running = running;
    q.held_tokens = held;
    q.chunk_tokens = chunk;
    return q;
}

TEST(PrefixCache, TreeHitsMissesAndPartialPrefixes) {
    PrefixCache cache(64 << 20);
    FakeSequence seq;
    const std::vector<int32_t> a = seq_tokens(1000, 1);
    // A prefill that stored its state after forwards ending at 256 and 320 (running states there).
    ASSERT_TRUE(seq.store(cache, std::span(a).first(256), 7, true).is_ok());
    ASSERT_TRUE(seq.store(cache, std::span(a).first(320), 7, true).is_ok());
    EXPECT_EQ(cache.stats().blocks, 5);
    EXPECT_EQ(cache.stats().inserted_blocks, 5u);

    int64_t matched = 0;
    auto m = cache.lookup(query(std::span(a).first(600), 7, true), &matched);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 320);
    EXPECT_EQ(matched, 320);
    EXPECT_EQ(m->running(), "running@320");
    const auto blocks = m->position_blocks();
    ASSERT_EQ(blocks.size(), 5u);
    for (size_t i = 0; i < blocks.size(); ++i) {
        ASSERT_EQ(blocks[i].size(), static_cast<size_t>(B * 8));
        int64_t first = 0;
        std::memcpy(&first, blocks[i].data(), 8);
        EXPECT_EQ(first, static_cast<int64_t>(i) * B);  // block i holds rows [64 i, 64 i + 64)
    }
    m.reset();

    // A prompt that leaves the stored blocks inside block 4: the blocks before match, and only a
    // boundary with a running state can be restored (256), unless the layout has none (192).
    std::vector<int32_t> b = seq_tokens(300, 1);
    b[200] = 99999;
    EXPECT_FALSE(cache.lookup(query(b, 7, true), &matched).has_value());  // no running state at 192 or before
    EXPECT_EQ(matched, 192);
    std::vector<int32_t> c = seq_tokens(400, 1);
    c[300] = 99999;  // diverges inside block 4, after the running state at 256
    m = cache.lookup(query(c, 7, true), &matched);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 256);
    EXPECT_EQ(matched, 256);
    m.reset();
    m = cache.lookup(query(b, 7, false), &matched);  // an attention-only layout resumes anywhere
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 192);
    m.reset();

    // Nothing longer than what the session holds; never the last token; another layout: a miss.
    EXPECT_FALSE(cache.lookup(query(std::span(a).first(600), 7, true, /*held=*/320), &matched).has_value());
    EXPECT_FALSE(cache.lookup(query(std::span(a).first(600), 8, true), &matched).has_value());
    EXPECT_EQ(matched, 0);
    m = cache.lookup(query(std::span(a).first(320), 7, true), &matched);  // the whole prompt is cached
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 256);
    m.reset();
    // Off the chunk grid, a restore point within 16 tokens of the end is skipped: the forward after it
    // would take the recurrent DeltaNet form where a cold prefill takes the chunked one.
    m = cache.lookup(query(std::span(a).first(330), 7, true, 0, /*chunk=*/192), &matched);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 256);
    m.reset();
    m = cache.lookup(query(std::span(a).first(330), 7, true, 0, /*chunk=*/64), &matched);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 320);  // on the grid of 64-token chunks: a cold prefill has a forward there too
    m.reset();

    const PrefixCacheStats s = cache.stats();
    EXPECT_EQ(s.lookups, s.hits + s.misses);
    EXPECT_EQ(s.misses, 3u);
    EXPECT_GT(s.hit_tokens, 0u);

    // Storing what is there reads nothing; a running state added to a held block reads only it.
    seq.reads = 0;
    ASSERT_TRUE(seq.store(cache, std::span(a).first(320), 7, true).is_ok());
    ASSERT_TRUE(seq.store(cache, std::span(a).first(192), 7, true).is_ok());
    EXPECT_EQ(seq.reads, 0);
    m = cache.lookup(query(b, 7, true), &matched);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->tokens(), 192);
    EXPECT_EQ(m->running(), "running@192");
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesAndNeverWhatARestoreCopies) {
    FakeSequence seq;
    // Each block: 64 rows × 8 bytes + bookkeeping; a budget of about 12 blocks.
    PrefixCache probe(1 << 30);
    const std::vector<int32_t> one = seq_tokens(B, 1);
    ASSERT_TRUE(seq.store(probe, one, 1, false).is_ok());
    const uint64_t block_bytes = probe.stats().bytes;
    PrefixCache cache(12 * block_bytes);

    const std::vector<int32_t> a = seq_tokens(8 * B, 1), b = seq_tokens(8 * B, 5000),
                               c = seq_tokens(8 * B, 9000);
    ASSERT_TRUE(seq.store(cache, a, 1, false).is_ok());
    ASSERT_TRUE(seq.store(cache, b, 1, false).is_ok());  // 16 blocks: a's last 4 go (the least recent)
    PrefixCacheStats s = cache.stats();
    EXPECT_LE(s.bytes, 12 * block_bytes);
    EXPECT_EQ(s.evictions, 4u);
    int64_t matched = 0;
    auto ma = cache.lookup(query(a, 1, false), &matched);
    ASSERT_TRUE(ma.has_value());
    EXPECT_EQ(matched, 4 * B);  // a's leading blocks stay, its leaves went
    auto mb = cache.lookup(query(b, 1, false), &matched);
    ASSERT_TRUE(mb.has_value());
    EXPECT_EQ(matched, 8 * B);
    EXPECT_EQ(mb->tokens(), 7 * B);  // never the last token: b's first 7 blocks are pinned
    // With those chains pinned by restores in progress, storing c can evict only what they do not
    // copy: b's last block, then c's own from its end.
    ASSERT_TRUE(seq.store(cache, c, 1, false).is_ok());
    EXPECT_EQ(cache.stats().blocks, 12);
    auto still = cache.lookup(query(b, 1, false), &matched);
    EXPECT_EQ(matched, 7 * B);
    ASSERT_TRUE(still.has_value());
    cache.lookup(query(c, 1, false), &matched);
    EXPECT_EQ(matched, B);
    EXPECT_EQ(ma->position_blocks().size(), 4u);
    std::string first_row(ma->position_blocks()[0]);
    EXPECT_EQ(first_row.size(), static_cast<size_t>(B * 8));
    // Released, the cache comes back within its budget.
    ma.reset();
    mb.reset();
    still.reset();
    s = cache.stats();
    EXPECT_LE(s.bytes, 12 * block_bytes);
    cache.clear();
    s = cache.stats();
    EXPECT_EQ(s.blocks, 0);
    EXPECT_EQ(s.bytes, 0u);
    EXPECT_EQ(s.lookups, 0u);
}

// A prompt longer than the budget holds: each forward of its prefill stores again, and the blocks
// the budget cannot keep are never read (reading them only for the store's own eviction to drop them
// made a long prefill's copies grow with the square of its length). Without a running state the
// leading blocks that fit are kept; with one, whose restore point would be past the budget, nothing
// beyond what is held.
TEST(PrefixCache, APromptLongerThanTheBudgetReadsOnlyWhatItKeeps) {
    FakeSequence seq;
    PrefixCache probe(1 << 30);
    const std::vector<int32_t> one = seq_tokens(B, 1);
    ASSERT_TRUE(seq.store(probe, one, 1, false).is_ok());
    const uint64_t block_bytes = probe.stats().bytes;
    const std::vector<int32_t> a = seq_tokens(64 * B, 1);

    for (bool running : {false, true}) {
        SCOPED_TRACE(running ? "with a running state" : "rows only");
        PrefixCache cache(10 * block_bytes + 100);
        seq.blocks_read = 0;
        for (int64_t n = 4; n <= 64; n += 4)  // forwards of 4 blocks
            ASSERT_TRUE(seq.store(cache, std::span(a).first(static_cast<size_t>(n * B)), 1, running).is_ok());
        const PrefixCacheStats s = cache.stats();
        EXPECT_LE(s.bytes, 10 * block_bytes + 100);
        EXPECT_EQ(s.evictions, 0u);  // nothing read was dropped again
        // Rows only: the first 10 blocks, read once. With a running state: the chains of the forwards
        // that fit whole (8 blocks, the running states at 4 and 8).
        EXPECT_EQ(seq.blocks_read, running ? 8 : 10);
        EXPECT_EQ(s.blocks, running ? 8 : 10);
        int64_t matched = 0;
        auto m = cache.lookup(query(a, 1, running), &matched);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(matched, (running ? 8 : 10) * B);
        EXPECT_EQ(m->tokens(), (running ? 8 : 10) * B);
        if (running) {
            EXPECT_EQ(m->running(), "running@512");
        }
        std::string row(m->position_blocks().back());
        int64_t r = 0;
        std::memcpy(&r, row.data(), sizeof r);
        EXPECT_EQ(r, (running ? 7 : 9) * B);  // each block holds its own rows
        EXPECT_GT(s.skipped_blocks, 0u);
    }
}

// ---- through sessions -------------------------------------------------------------------------

std::string tiny_next() {
    return std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
}

std::shared_ptr<Engine> load(const std::string& dir, int kv_bits = 32, int64_t ctx = 2048,
                             std::optional<uint64_t> prefix_cache = std::nullopt, int sessions = 1) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.context_tokens = ctx;
    eo.memory_bytes = 2ull << 30;
    eo.kv_bits = kv_bits;
    eo.prefix_cache_bytes = prefix_cache;
    eo.max_sessions = sessions;
    auto e = Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    return e.has_value() ? *e : nullptr;
}

// What a generation gave: its tokens and, per token, the log-probabilities of the 8 most likely ones
// (functions of the logits: equal bits for equal logits).
struct GenRun {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    GenerationStats stats;
};

GenRun generate(Engine& engine, std::span<const int32_t> prompt, bool use_cache, int64_t chunk = 256,
                Session* session = nullptr, int kv_bits = 0) {
    std::unique_ptr<Session> own;
    if (session == nullptr) {
        SessionOptions so;
        so.kv_bits = kv_bits;
        auto made = engine.new_session(so);
        EXPECT_TRUE(made.has_value()) << made.status().message();
        if (!made.has_value()) return {};
        own = std::move(made).value();
        session = own.get();
    }
    GenerateOptions o;
    o.max_tokens = 6;
    o.sampling.temperature = 0.0f;
    o.ignore_eos = true;
    o.top_logprobs = 8;
    o.prefill_chunk_tokens = chunk;
    o.prefix_cache = use_cache;
    GenRun run;
    auto r = session->generate(prompt, o, [&](const TokenEvent& e) {
        run.logprobs.push_back(e.logprob);
        for (const auto& [id, lp] : e.top_logprobs) {
            run.logprobs.push_back(static_cast<float>(id));
            run.logprobs.push_back(lp);
        }
        return true;
    });
    EXPECT_TRUE(r.has_value()) << r.status().message();
    if (!r.has_value()) return run;
    run.tokens = r->tokens;
    run.stats = r->stats;
    return run;
}

void expect_same(const GenRun& got, const GenRun& want, const std::string& what) {
    EXPECT_EQ(got.tokens, want.tokens) << what;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
    size_t differ = 0;
    for (size_t i = 0; i < got.logprobs.size(); ++i) differ += got.logprobs[i] != want.logprobs[i];
    EXPECT_EQ(differ, 0u) << what << ": log-probabilities differ from a cold prefill's";
}

std::vector<int32_t> concat(std::span<const int32_t> a, std::span<const int32_t> b) {
    std::vector<int32_t> out(a.begin(), a.end());
    out.insert(out.end(), b.begin(), b.end());
    return out;
}

std::vector<int32_t> random_ids(size_t n, int64_t vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
}

// Conversations sharing a 700-token prefix (a system prompt) in fresh sessions, each against a cold
// prefill of its whole prompt in the same chunking:
//   1. the first stores its prefill (a miss: nothing cached yet);
//   2. the second restores the prefix at the last chunk boundary the first stored a running state at
//      (512) and stores a state where its prompt leaves the first one's blocks (640);
//   3. the third restores 640; a regenerate of the second's prompt restores its end (the last block
//      boundary more than 16 tokens before it);
//   4. a session holding another conversation whose new prompt diverges from it early restores the
//      shared prefix from the cache; a prefill in 128-token chunks restores what 256-token ones stored.
void check_restores_are_cold_prefills(Engine& engine, std::span<const int32_t> shared,
                                      const std::vector<std::vector<int32_t>>& tails, int kv_bits = 0) {
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& t : tails) prompts.push_back(concat(shared, t));
    std::vector<GenRun> cold;
    for (const auto& p : prompts) cold.push_back(generate(engine, p, false, 256, nullptr, kv_bits));

    const GenRun first = generate(engine, prompts[0], true, 256, nullptr, kv_bits);
    expect_same(first, cold[0], "first conversation");
    EXPECT_EQ(first.stats.prefix_cache_tokens, 0);
    EXPECT_EQ(first.stats.prefilled_tokens, static_cast<int64_t>(prompts[0].size()));

    const GenRun second = generate(engine, prompts[1], true, 256, nullptr, kv_bits);
    expect_same(second, cold[1], "second conversation");
    EXPECT_GE(second.stats.prefix_cache_tokens, 512);
    EXPECT_EQ(second.stats.prefilled_tokens,
              static_cast<int64_t>(prompts[1].size()) - second.stats.prefix_cache_tokens);

    const GenRun third = generate(engine, prompts[2], true, 256, nullptr, kv_bits);
    expect_same(third, cold[2], "third conversation");
    EXPECT_EQ(third.stats.prefix_cache_tokens, static_cast<int64_t>(shared.size()) / B * B);

    const GenRun again = generate(engine, prompts[1], true, 256, nullptr, kv_bits);
    expect_same(again, cold[1], "a regenerate");
    const auto L = static_cast<int64_t>(prompts[1].size());
    EXPECT_EQ(again.stats.prefix_cache_tokens, (L - 17) / B * B);

    // A session that holds the first conversation (and its reply) gets the third's prompt: its own
    // state can be cut back only to a turn checkpoint, the cache has the shared prefix.
    SessionOptions so;
    so.kv_bits = kv_bits;
    auto made = engine.new_session(so);
    ASSERT_TRUE(made.has_value());
    std::unique_ptr<Session> held = std::move(made).value();
    const GenRun mine = generate(engine, prompts[0], true, 256, held.get());
    expect_same(mine, cold[0], "a session's first turn");
    const GenRun diverged = generate(engine, prompts[2], true, 256, held.get());
    expect_same(diverged, cold[2], "a session whose prompt diverges from what it holds");
    // A hybrid model's session goes back to its last checkpoint before the divergence (none: 0) and
    // restores the shared prefix from the cache; an attention-only one cuts its own state back there.
    EXPECT_GE(diverged.stats.prompt_tokens - diverged.stats.prefilled_tokens,
              static_cast<int64_t>(shared.size()) / B * B);

    const GenRun cold128 = generate(engine, prompts[3], false, 128, nullptr, kv_bits);
    const GenRun warm128 = generate(engine, prompts[3], true, 128, nullptr, kv_bits);
    expect_same(warm128, cold128, "128-token chunks");
    EXPECT_EQ(warm128.stats.prefix_cache_tokens, static_cast<int64_t>(shared.size()) / B * B);

    const PrefixCacheStats s = engine.prefix_cache_stats();
    EXPECT_GE(s.hits, 5u);
    EXPECT_GT(s.bytes, 0u);
    EXPECT_LE(s.bytes, s.budget_bytes);
    EXPECT_EQ(s.evictions, 0u);
}

class PrefixCacheOnTheDefaultModel : public ::testing::TestWithParam<int> {};

TEST_P(PrefixCacheOnTheDefaultModel, RestoredPrefixesGiveTheLogitsOfAColdPrefill) {
    auto engine = load(tiny_next(), GetParam());
    ASSERT_TRUE(engine);
    const std::vector<int32_t> text = testing::heldout_ids(*engine, 2400);
    ASSERT_EQ(text.size(), 2400u);
    const auto shared = std::span(text).first(700);
    std::vector<std::vector<int32_t>> tails;
    for (size_t i = 0; i < 4; ++i)
        tails.emplace_back(text.begin() + 1000 + 300 * i, text.begin() + 1040 + 300 * i + 7 * i);
    check_restores_are_cold_prefills(*engine, shared, tails);
}

// f32 (exact, the default), f16, q8 and q4 (the last 256 positions in an f16 ring besides).
INSTANTIATE_TEST_SUITE_P(KvTypes, PrefixCacheOnTheDefaultModel, ::testing::Values(32, 16, 8, 4));

class PrefixCacheOnGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheOnGoldens, RestoredPrefixesGiveTheLogitsOfAColdPrefill) {
    auto engine = load(testing::test_data_dir() + "/goldens/" + GetParam());
    ASSERT_TRUE(engine);
    const int64_t vocab = engine->info().vocab_size;
    const std::vector<int32_t> shared = random_ids(700, vocab, 11);
    std::vector<std::vector<int32_t>> tails;
    for (uint32_t i = 0; i < 4; ++i) tails.push_back(random_ids(40 + 7 * i, vocab, 100 + i));
    check_restores_are_cold_prefills(*engine, shared, tails);
}

// A hybrid and an attention-only family, 4-bit (int8 activations on the CPU) and bf16.
INSTANTIATE_TEST_SUITE_P(Families, PrefixCacheOnGoldens,
                         ::testing::Values("qwen3_next_mlx_q4", "qwen3_next_hf_bf16", "qwen3_5_moe_mlx_q4",
                                           "qwen3_moe_mlx_q4", "qwen3_moe_hf_bf16"));

// Chat prompts: a prefill also keeps a state at the block boundary before each of its last special
// tokens (the template's turn markers), so a second conversation with the same system prompt and
// another question resumes within a block of where the two part, however long the first question.
// Where the routed experts stream, the prefix cache makes no regenerate cut: that cut splits the last chunk
// into two forwards, each reading its tokens' expert union (Qwen3-Next-80B at --memory 3G, a 128-token prompt
// cut at 64: 60.3 GB read against 39.0, bench/results/cpu_decode/stream_s28). So a streamed generation of a
// 256-token prompt reads the same expert bytes with the cache as without it, in one forward, and the cache
// still stores its four blocks.
TEST(PrefixCache, AStreamedPrefillReadsNoMoreExpertBytesThanWithoutTheCache) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    ASSERT_TRUE(testing::pack_default_model(packed));
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 256; ++i) prompt.push_back((5 + 37 * i) % 8000 + 3);
    auto run = [&](bool use_cache, uint64_t* inserted) -> uint64_t {
        EngineOptions eo;
        eo.model_dir = packed;
        eo.threads = 2;
        eo.context_tokens = 512;
        eo.memory_bytes = 2ull << 30;
        eo.expert_cache_bytes = 4ull << 20;  // a fraction of the experts: they stream
        eo.prefetch = false;
        eo.preload_experts = false;
        eo.prefix_cache_bytes = 64ull << 20;
        auto e = Engine::load(eo);
        EXPECT_TRUE(e.has_value()) << e.status().message();
        if (!e.has_value()) return 0;
        const GenRun g = generate(**e, prompt, use_cache, 256);
        EXPECT_EQ(g.tokens.size(), 6u);
        if (inserted != nullptr) *inserted = (*e)->prefix_cache_stats().inserted_blocks;
        return (*e)->expert_cache_stats().bytes_read;
    };
    uint64_t inserted = 0;
    const uint64_t without = run(false, nullptr);
    const uint64_t with = run(true, &inserted);
    EXPECT_GT(without, 0u);
    EXPECT_EQ(with, without) << "expert bytes read with the prefix cache against without it";
    EXPECT_EQ(inserted, 4u) << "the prompt's four 64-token blocks, stored after its one forward";
}

TEST(PrefixCache, ASecondConversationResumesAtTheTurnMarkerBeforeItsQuestion) {
    auto engine = load(tiny_next());
    ASSERT_TRUE(engine && engine->chat_template() && engine->tokenizer());
    const std::vector<int32_t> text = testing::heldout_ids(*engine, 2000);
    const std::string system = engine->tokenizer()->decode(std::span(text).first(900));
    const std::string long_question = engine->tokenizer()->decode(std::span(text).subspan(1200, 150));
    auto chat = [&](const std::string& question) {
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        messages.push_back({{"role", "system"}, {"content", system}});
        messages.push_back({{"role", "user"}, {"content", question}});
        auto rendered =
            engine->chat_template()->render(messages, nullptr, true, nlohmann::ordered_json::object());
        EXPECT_TRUE(rendered.has_value());
        return engine->tokenizer()->encode(rendered.has_value() ? *rendered : std::string());
    };
    const std::vector<int32_t> first = chat(long_question), second = chat("What is this text about?");
    size_t shared = 0;
    while (shared < first.size() && shared < second.size() && first[shared] == second[shared]) ++shared;
    ASSERT_GT(shared, 800u);
    const GenRun a = generate(*engine, first, true);
    EXPECT_EQ(a.stats.prefix_cache_tokens, 0);
    const GenRun b = generate(*engine, second, true);
    EXPECT_EQ(b.stats.prefix_cache_tokens, static_cast<int64_t>(shared) / B * B)
        << "shared " << shared << " of " << first.size() << " and " << second.size();
    expect_same(b, generate(*engine, second, false), "the second conversation");
}

TEST(PrefixCache, SessionsOfAnotherKvTypeNeverRestoreEachOthersPrefixes) {
    auto engine = load(tiny_next());
    ASSERT_TRUE(engine);
    const std::vector<int32_t> text = testing::heldout_ids(*engine, 1200);
    const auto shared = std::span(text).first(600);
    const auto p1 = concat(shared, std::span(text).subspan(800, 30));
    const auto p2 = concat(shared, std::span(text).subspan(900, 30));
    const GenRun q8 = generate(*engine, p1, true, 256, nullptr, 8);
    EXPECT_EQ(q8.stats.prefix_cache_tokens, 0);
    const GenRun f32 = generate(*engine, p2, true);
    EXPECT_EQ(f32.stats.prefix_cache_tokens, 0) << "an f32 session restored a q8 session's prefix";
    expect_same(f32, generate(*engine, p2, false), "f32");
    const GenRun q8_again = generate(*engine, p2, true, 256, nullptr, 8);
    EXPECT_GT(q8_again.stats.prefix_cache_tokens, 0);
    expect_same(q8_again, generate(*engine, p2, false, 256, nullptr, 8), "q8");
}

TEST(PrefixCache, StaysWithinItsBudgetAndKeepsTheRecentPrefixes) {
    // About 1.2 MB: a few blocks with their running states (420 KB each on the default model).
    auto engine = load(tiny_next(), 32, 2048, uint64_t{1200} << 10);
    ASSERT_TRUE(engine);
    EXPECT_EQ(engine->memory_plan().prefix_cache_bytes, uint64_t{1200} << 10);
    const std::vector<int32_t> text = testing::heldout_ids(*engine, 3000);
    for (size_t i = 0; i < 5; ++i) {
        const auto prompt = std::span(text).subspan(400 * i, 330);
        generate(*engine, prompt, true);
        const PrefixCacheStats s = engine->prefix_cache_stats();
        EXPECT_LE(s.bytes, s.budget_bytes);
    }
    EXPECT_GT(engine->prefix_cache_stats().evictions, 0u);
    // The most recent prefix is still there, and what it restores is right.
    const auto last = concat(std::span(text).subspan(1600, 256), std::span(text).subspan(2500, 40));
    const GenRun warm = generate(*engine, last, true);
    EXPECT_EQ(warm.stats.prefix_cache_tokens, 256);
    expect_same(warm, generate(*engine, last, false), "after evictions");
}

TEST(PrefixCache, ThePlanReservesItsShareAndRefusesWhatDoesNotFit) {
    auto by_default = load(tiny_next());
    ASSERT_TRUE(by_default);
    const MemoryPlan& plan = by_default->memory_plan();
    EXPECT_EQ(plan.prefix_cache_bytes, plan.budget_bytes / 16);  // 2 GiB / 16 = 128 MiB
    EXPECT_NE(plan.describe().find("prefix cache"), std::string::npos) << plan.describe();
    EXPECT_EQ(by_default->prefix_cache_stats().budget_bytes, plan.prefix_cache_bytes);

    auto off = load(tiny_next(), 32, 2048, uint64_t{0});
    ASSERT_TRUE(off);
    EXPECT_EQ(off->memory_plan().prefix_cache_bytes, 0u);
    const std::vector<int32_t> text = testing::heldout_ids(*off, 400);
    generate(*off, text, true);
    const GenRun again = generate(*off, text, true);
    EXPECT_EQ(again.stats.prefix_cache_tokens, 0);
    EXPECT_EQ(off->prefix_cache_stats().lookups, 0u);

    EngineOptions eo;
    eo.model_dir = tiny_next();
    eo.context_tokens = 2048;
    eo.memory_bytes = 1ull << 30;
    eo.prefix_cache_bytes = 4ull << 30;
    auto too_big = Engine::load(eo);
    ASSERT_FALSE(too_big.has_value());
    EXPECT_EQ(too_big.status().code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(too_big.status().message().find("prefix cache"), std::string::npos)
        << too_big.status().message();
}

// Four sessions of a batching engine (their forwards run together) start conversations that share a
// prefix, twice over: whoever stores first, every restore is a cold prefill's.
TEST(PrefixCache, ConcurrentSessionsRestoreAndStoreTheSamePrefixes) {
    auto engine = load(tiny_next(), 32, 1024, std::nullopt, 4);
    ASSERT_TRUE(engine);
    const std::vector<int32_t> text = testing::heldout_ids(*engine, 1200);
    const auto shared = std::span(text).first(300);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < 8; ++i)
        prompts.push_back(concat(shared, std::span(text).subspan(400 + 90 * i, 20 + i)));
    std::vector<GenRun> cold;
    for (const auto& p : prompts) cold.push_back(generate(*engine, p, false));
    std::vector<GenRun> warm(prompts.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (size_t i = t; i < prompts.size(); i += 4) warm[i] = generate(*engine, prompts[i], true);
        });
    for (auto& th : threads) th.join();
    int64_t restored = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        expect_same(warm[i], cold[i], "conversation " + std::to_string(i));
        restored += warm[i].stats.prefix_cache_tokens;
    }
    EXPECT_GT(restored, 0);
    const PrefixCacheStats s = engine->prefix_cache_stats();
    EXPECT_EQ(s.lookups, s.hits + s.misses);
    EXPECT_LE(s.bytes, s.budget_bytes);
}

}  // namespace
}  // namespace sluice
