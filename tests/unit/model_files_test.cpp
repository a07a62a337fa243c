// Model files that cannot lie, at the engine's level (issue 20): a flipped byte in an expert file
// fails the forward by default, naming the file and expert; generation_config.json is read
// type-checked; a tokenizer's ids must fit the model's vocabulary. The parsers' own cases live in
// pack_test.cpp, config_test.cpp and tokenizer_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "format/pack.h"
#include "io/mapped_file.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using sluice::testing::TempDir;

const std::string kTinyNext = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";

Expected<std::shared_ptr<Engine>> load(const std::string& dir, EngineOptions eo = {}) {
    eo.model_dir = dir;
    eo.threads = 2;
    eo.context_tokens = 64;
    eo.memory_bytes = 1ull << 30;
    eo.expert_cache_bytes = 1;  // one slot: every expert is read from disk
    return Engine::load(eo);
}

// Every expert of layer 0 read from disk, so whichever the router picks is checked.
Expected<std::vector<float>> run(Engine& engine) {
    auto session = engine.new_session();
    const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
    return session->evaluate(ids, false);
}

TEST(ModelFiles, FlippedExpertByteFailsByDefault) {
    TempDir dir;
    const std::string packed = dir.file("packed");
    ASSERT_TRUE(testing::pack_default_model(packed));
    auto layout = format::open_packed_dir(packed);
    ASSERT_TRUE(layout.has_value()) << layout.status().message();
    const format::PackExpertFile& f = layout->expert_files[0];
    ASSERT_TRUE(testing::flip_record_bytes(packed + "/" + f.file, f.record_stride, layout->n_experts));

    auto engine = load(packed);  // default options
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    auto r = run(**engine);
    ASSERT_FALSE(r.has_value()) << "a corrupt expert record was used silently";
    EXPECT_NE(r.status().message().find("checksum mismatch in '" + f.file + "' layer " +
                                        std::to_string(f.layer) + " expert "),
              std::string::npos)
        << r.status().message();

    EngineOptions off;
    off.verify_reads = false;
    off.verify_first_reads = false;  // --no-verify-reads
    auto unchecked = load(packed, off);
    ASSERT_TRUE(unchecked.has_value());
    EXPECT_TRUE(run(**unchecked).has_value());

    // Repaired: the default engine runs, and matches an engine checking every read.
    ASSERT_TRUE(testing::flip_record_bytes(packed + "/" + f.file, f.record_stride, layout->n_experts));
    auto repaired = load(packed);
    ASSERT_TRUE(repaired.has_value());
    auto a = run(**repaired);
    ASSERT_TRUE(a.has_value()) << a.status().message();
    EngineOptions every;
    every.verify_reads = true;
    auto paranoid = load(packed, every);
    ASSERT_TRUE(paranoid.has_value());
    auto b = run(**paranoid);
    ASSERT_TRUE(b.has_value()) << b.status().message();
    EXPECT_EQ(*a, *b);
}

// A copy of tiny-next (an unpacked checkpoint: no manifest, so its files can be edited).
std::string copy_tiny(const TempDir& dir) {
    const std::string out = dir.file("m");
    fs::copy(kTinyNext, out, fs::copy_options::recursive);
    return out;
}

TEST(ModelFiles, GenerationConfigIsTypeChecked) {
    TempDir dir;
    const std::string m = copy_tiny(dir);
    const std::vector<std::pair<std::string, std::string>> cases = {
        // Once nlohmann's type_error escaped as "internal error: ... type must be boolean".
        {R"({"do_sample": 1})", "generation_config.json: do_sample: expected true or false, got 1"},
        {R"({"temperature": "hot"})", "generation_config.json: temperature: expected a number, got a string"},
        {R"({"eos_token_id": [2, 4294967297]})",
         "generation_config.json: eos_token_id: 4294967297 is not a token id"},
        {R"({"top_k": 1e999})", "generation_config.json: top_k: [json.exception.out_of_range.406]"},
    };
    for (const auto& [text, expect] : cases) {
        std::ofstream(m + "/generation_config.json") << text;
        auto e = load(m);
        ASSERT_FALSE(e.has_value()) << text;
        EXPECT_NE(e.status().message().find(expect), std::string::npos) << e.status().message();
    }
}

TEST(ModelFiles, TokenizerIdsMustFitTheVocabulary) {
    TempDir dir;
    const std::string m = copy_tiny(dir);
    auto config = nlohmann::json::parse(*io::read_text_file(m + "/config.json"));
    auto tok = nlohmann::json::parse(*io::read_text_file(m + "/tokenizer.json"));
    nlohmann::json extra = tok["added_tokens"][0];
    extra["id"] = config["vocab_size"].get<int64_t>();  // one past the embedding rows
    extra["content"] = "<past>";
    tok["added_tokens"].push_back(extra);
    std::ofstream(m + "/tokenizer.json") << tok.dump();
    auto e = load(m);
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("tokenizer.json: added token '<past>' has id"), std::string::npos)
        << e.status().message();
}

}  // namespace
}  // namespace sluice
