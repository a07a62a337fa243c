// Packs of GGUF files (`sluice pack FILE.gguf OUT`, convert/pack_gguf.cpp): every GGUF fixture of
// tests/data/gguf/weights (F16, Q8_0, Q4_0, Q5_0, MXFP4; Qwen2, Qwen3, Qwen3-MoE, Qwen3-Next, Qwen3.5,
// GLM-4.5, Qwen2-MoE) packed and checked against the file it came from:
// - the bytes: every dense tensor and every expert's slice in the pack is byte for byte the file's, in
//   the file's ggml type (layout.json's ggml_type, or its float dtype);
// - the model: the same config, and bit-identical logits — prefill in chunks and decode steps — the GGUF
//   run directly against the pack streamed through a one-slot expert cache (every acquire a read,
//   checked) and through a cache holding every expert. Bit-identical is the expectation: the pack binds
//   the same bytes in the same types through the same binder (the layout is kGguf either way), so every
//   kernel sees what it saw;
// - the text side: the pack's tokenizer.json gives the file's tokenizer, id for id and on a multilingual
//   sample (tests/oracle/corpus), with the same special tokens.
// Then what must fail, and how: a truncated file, a tensor of the wrong dims, an unknown type, a file
// that is no GGUF, --bits — each an error naming the file (and the tensor), with nothing written under
// OUT; layout.json's ggml sections checked by the parser and the expert store, each error naming the key.
// And a split set packs to the very bytes of the single file; an interrupted pack resumes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "convert/packer.h"
#include "experts/expert_store.h"
#include "format/gguf.h"
#include "format/pack.h"
#include "format/safetensors.h"
#include "gguf_compare.h"
#include "gguf_fixture_prompt.h"
#include "gguf_write.h"
#include "io/mapped_file.h"
#include "model/config_gguf.h"
#include "model/model.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

std::string weights_dir() {
    return testing::test_data_dir() + "/gguf/weights";
}

std::vector<std::string> weight_fixtures() {
    std::ifstream in(weights_dir() + "/index.json");
    const json index = json::parse(in, nullptr, false);
    std::vector<std::string> out;
    if (!index.is_object() || !index.contains("files")) return out;
    for (const auto& [file, e] : index["files"].items()) out.push_back(file);
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Logits of a chunked prefill of all but the last 4 ids, then 4 decode steps (so both stream experts).
Expected<std::vector<float>> run_logits(const std::string& model, const std::vector<int32_t>& ids,
                                        uint64_t cache_bytes, bool verify_reads = false,
                                        ExpertCacheStats* stats = nullptr) {
    EngineOptions eo;
    eo.model_dir = model;
    eo.threads = 2;
    eo.context_tokens = static_cast<int64_t>(ids.size());
    eo.memory_bytes = 4ull << 30;
    eo.expert_cache_bytes = cache_bytes;
    eo.verify_reads = verify_reads;
    SLUICE_ASSIGN_OR_RETURN(auto engine, Engine::load(eo));
    auto session = engine->new_session();
    const size_t split = ids.size() - 4;
    SLUICE_ASSIGN_OR_RETURN(auto logits,
                            session->evaluate(std::span<const int32_t>(ids.data(), split), true, 16));
    for (size_t i = split; i < ids.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(auto step, session->evaluate(std::span<const int32_t>(&ids[i], 1), false));
        logits.insert(logits.end(), step.begin(), step.end());
    }
    if (stats) *stats = engine->expert_cache_stats();
    return logits;
}

// The multilingual sample: the oracle corpus's files and lines, and texts with special tokens.
std::vector<std::string> text_sample() {
    std::vector<std::string> docs;
    for (const char* name : {"multilingual.txt", "english.txt", "code.txt", "emoji.txt", "crlf.txt"}) {
        const std::string text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/oracle/corpus/" + name);
        docs.push_back(text);
        std::istringstream lines(text);
        for (std::string line; std::getline(lines, line);)
            if (!line.empty()) docs.push_back(line);
    }
    docs.insert(docs.end(),
                {"<|im_start|>user\nПривет, 世界! مرحبا <|im_end|>\n<|im_start|>assistant\n",
                 "<|endoftext|>こんにちは 안녕하세요 नमस्ते", "caf\x65\xCC\x81 \xF0\x9F\x91\x8D", ""});
    return docs;
}

// The pack of `gguf` into `out`, or a failure naming the error.
::testing::AssertionResult pack(const std::string& gguf, const std::string& out) {
    convert::PackOptions o;
    o.src_dir = gguf;
    o.out_dir = out;
    auto r = convert::pack_model(o);
    if (!r.has_value()) return ::testing::AssertionFailure() << r.status().message();
    return ::testing::AssertionSuccess();
}

// What a failed pack must leave: no file of a pack under its final name (OUT not even created when the
// source is refused before planning).
bool nothing_final(const std::string& out) {
    std::error_code ec;
    if (!fs::exists(out, ec)) return true;
    for (const auto& e : fs::recursive_directory_iterator(out, ec)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && !name.ends_with(".partial") && name != ".pack-progress.json") return false;
    }
    return true;
}

class GgufPackFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufPackFixture, BytesVerbatimAndLogitsIdenticalToTheGguf) {
    const std::string name = GetParam();
    const std::string src = weights_dir() + "/" + name;
    if (!testing::exists(src)) GTEST_SKIP() << src << " not made (make fixtures)";
    TempDir dir;
    const std::string out = dir.file("packed");
    ASSERT_TRUE(pack(src, out));
    auto problems = convert::verify_packed(out);
    ASSERT_TRUE(problems.has_value()) << problems.status().message();
    EXPECT_TRUE(problems->empty());

    // The bytes, tensor by tensor and expert by expert, in the file's types.
    auto gguf = format::GgufCheckpoint::open(src);
    ASSERT_TRUE(gguf.has_value()) << gguf.status().message();
    auto layout = format::open_packed_dir(out);
    ASSERT_TRUE(layout.has_value()) << layout.status().message();
    EXPECT_EQ(layout->source_layout, "gguf");
    auto dense = format::SafetensorsFile::open(out + "/dense.safetensors");
    ASSERT_TRUE(dense.has_value()) << dense.status().message();
    auto config = model::load_gguf_model_config(**gguf);
    ASSERT_TRUE(config.has_value()) << config.status().message();
    size_t dense_expected = 0;
    for (const format::GgufTensor* t : (*gguf)->tensors()) {
        const int64_t block = t->name.starts_with("blk.") ? std::stoll(t->name.substr(4)) : -1;
        // (gpt-oss's expert biases, ffn_*_exps.bias [E, rows], are dense: resident with the core)
        const bool expert = t->name.find("_exps.weight") != std::string::npos;
        if (block >= config->n_layers + config->mtp_layers || expert) continue;
        ++dense_expected;
        const format::TensorInfo* d = (*dense)->find(t->name);
        ASSERT_NE(d, nullptr) << t->name;
        ASSERT_EQ(d->size_bytes, t->size_bytes) << t->name;
        EXPECT_EQ(std::memcmp(d->data, t->data, t->size_bytes), 0) << t->name;
        const format::PackSection* s = nullptr;
        for (const auto& sec : layout->dense)
            if (sec.name == t->name) s = &sec;
        ASSERT_NE(s, nullptr) << t->name;
        if (auto element = format::ggml_element_dtype(t->type)) {
            EXPECT_EQ(s->dtype, *element) << t->name;
            EXPECT_FALSE(s->ggml_type.has_value()) << t->name;
            EXPECT_EQ(s->shape, t->shape()) << t->name;
        } else {
            ASSERT_TRUE(s->ggml_type.has_value()) << t->name;
            EXPECT_EQ(*s->ggml_type, t->type) << t->name;
            EXPECT_EQ(s->ggml_cols(), t->cols()) << t->name;
        }
    }
    EXPECT_EQ(layout->dense.size(), dense_expected);
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < config->n_layers + config->mtp_layers; ++l) moe_layers += config->is_moe_layer(l);
    ASSERT_EQ(static_cast<int64_t>(layout->expert_files.size()), moe_layers);
    for (const format::PackExpertFile& f : layout->expert_files) {
        auto mapped = io::MappedFile::open(out + "/" + f.file);
        ASSERT_TRUE(mapped.has_value());
        const char* names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        const format::PackProjection* projections[3] = {&f.gate, &f.up, &f.down};
        for (int p = 0; p < 3; ++p) {
            const format::GgufTensor* t =
                (*gguf)->find("blk." + std::to_string(f.layer) + "." + names[p] + ".weight");
            ASSERT_NE(t, nullptr);
            if (format::ggml_element_dtype(t->type))
                EXPECT_EQ(projections[p]->weight.dtype, *format::ggml_element_dtype(t->type));
            else
                EXPECT_EQ(projections[p]->ggml_type, std::optional<format::GgmlType>(t->type));
            const uint64_t slice = t->size_bytes / static_cast<uint64_t>(layout->n_experts);
            ASSERT_EQ(projections[p]->weight.size, slice);
            for (int64_t e = 0; e < layout->n_experts; ++e)
                ASSERT_EQ(std::memcmp((*mapped)->data() + static_cast<uint64_t>(e) * f.record_stride +
                                          projections[p]->weight.offset,
                                      t->data + static_cast<uint64_t>(e) * slice, slice),
                          0)
                    << f.file << " expert " << e << " " << names[p];
        }
    }

    // The model: the same config, and the same logits to the bit.
    auto packed_model = model::Model::load(out);
    ASSERT_TRUE(packed_model.has_value()) << packed_model.status().message();
    testing::expect_same_config(*config, (*packed_model)->config(), name);
    std::vector<int32_t> ids = testing::gguf_fixture_prompt(name);
    ASSERT_GE(ids.size(), 8u) << "no prompt for " << name;
    auto want = run_logits(src, ids, 0);
    ASSERT_TRUE(want.has_value()) << want.status().message();
    ExpertCacheStats stats;
    auto got = run_logits(out, ids, 1, /*verify_reads=*/true, &stats);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    ASSERT_EQ(got->size(), want->size());
    EXPECT_EQ(std::memcmp(got->data(), want->data(), got->size() * sizeof(float)), 0)
        << "the pack's logits differ from the GGUF's";
    if (config->has_experts()) {
        EXPECT_GT(stats.misses, 0u);
        EXPECT_GT(stats.evictions, 0u);
    }
    auto resident = run_logits(out, ids, 1ull << 30);
    ASSERT_TRUE(resident.has_value()) << resident.status().message();
    EXPECT_EQ(std::memcmp(resident->data(), want->data(), resident->size() * sizeof(float)), 0);

    // The text side: the pack's tokenizer files against the metadata, id for id and on the sample.
    auto from_gguf = Tokenizer::load(src, config->vocab);
    auto from_pack = Tokenizer::load(out, config->vocab);
    ASSERT_TRUE(from_gguf.has_value()) << from_gguf.status().message();
    ASSERT_TRUE(from_pack.has_value()) << from_pack.status().message();
    const Tokenizer &g = **from_gguf, &p = **from_pack;
    ASSERT_EQ(p.vocab_size(), g.vocab_size());
    for (int32_t id = 0; id < static_cast<int32_t>(config->vocab); ++id) {
        ASSERT_EQ(p.token_text(id), g.token_text(id)) << id;
        ASSERT_EQ(p.token_bytes(id), g.token_bytes(id)) << id;
        ASSERT_EQ(p.is_special(id), g.is_special(id)) << id;
    }
    EXPECT_EQ(p.eos_token(), g.eos_token());
    EXPECT_EQ(p.bos_token(), g.bos_token());
    EXPECT_EQ(p.pad_token(), g.pad_token());
    EXPECT_EQ(p.bos_id_to_add(), g.bos_id_to_add());
    size_t tokens = 0;
    for (const std::string& text : text_sample()) {
        for (bool special : {true, false}) {
            const auto want_ids = g.encode(text, special);
            ASSERT_EQ(p.encode(text, special), want_ids) << text.substr(0, 60);
            ASSERT_EQ(p.decode(want_ids), g.decode(want_ids)) << text.substr(0, 60);
            tokens += want_ids.size();
        }
    }
    EXPECT_GT(tokens, 1000u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufPackFixture, ::testing::ValuesIn(weight_fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                             std::string n = p.param.substr(0, p.param.size() - 5);
                             for (char& c : n)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufPackFixture);

// ---- what must fail --------------------------------------------------------------------------------

const char* kMoeFixture = "qwen3_moe_yarn_hf_bf16.q8_0.gguf";

// Patches the u32 ggml type of tensor `name` in a GGUF's bytes (the tensor info: name, n_dims, dims, type).
bool set_tensor_type(std::string& bytes, const std::string& name, uint32_t type) {
    const std::string key = testing::gstr(name);
    const size_t at = bytes.find(key);
    if (at == std::string::npos) return false;
    uint32_t n_dims = 0;
    std::memcpy(&n_dims, bytes.data() + at + key.size(), 4);
    std::memcpy(bytes.data() + at + key.size() + 4 + 8 * n_dims, &type, 4);
    return true;
}

TEST(GgufPack, BadInputsAreErrorsNamingTheFileAndWriteNothing) {
    const std::string src = weights_dir() + "/" + kMoeFixture;
    if (!testing::exists(src)) GTEST_SKIP() << src << " not made (make fixtures)";
    const std::string bytes = read_file(src);
    TempDir dir;
    auto expect_refused = [&](const std::string& file, const std::string& contents,
                              const std::vector<std::string>& message, int bits = 0) {
        SCOPED_TRACE(file);
        dir.write(file, contents);
        convert::PackOptions o;
        o.src_dir = dir.file(file);
        o.out_dir = dir.file(file + ".packed");
        o.bits = bits;
        auto r = convert::pack_model(o);
        ASSERT_FALSE(r.has_value());
        for (const std::string& m : message)
            EXPECT_NE(r.status().message().find(m), std::string::npos) << r.status().message();
        EXPECT_TRUE(nothing_final(o.out_dir));
    };
    // Truncated: the last tensor's bytes run past the end.
    expect_refused("truncated.gguf", bytes.substr(0, bytes.size() - 4096),
                   {"truncated.gguf", "past the end"});
    // A type no ggml has.
    std::string unknown = bytes;
    ASSERT_TRUE(set_tensor_type(unknown, "blk.1.ffn_up_exps.weight", 77));
    expect_refused("unknown.gguf", unknown,
                   {"unknown.gguf", "blk.1.ffn_up_exps.weight", "unknown ggml type 77"});
    // A tensor of other dims than the config implies (its bytes cut to match, so the file parses).
    {
        auto ckpt = format::GgufCheckpoint::open(src);
        ASSERT_TRUE(ckpt.has_value());
        std::vector<std::pair<std::string, format::GgufValue>> kv((*ckpt)->metadata().entries());
        auto tensors = testing::gguf_tensors_of(**ckpt);
        for (auto& t : tensors)
            if (t.name == "blk.0.ffn_down_exps.weight") {
                t.dims[1] /= 2;
                t.size /= 2;
            }
        expect_refused("wrong_dims.gguf",
                       testing::gguf_file_bytes(kv, tensors, (*ckpt)->files().front()->header().alignment),
                       {"wrong_dims.gguf", "tensor 'blk.0.ffn_down_exps.weight' has dims"});
    }
    // Not a GGUF at all, and a GGUF with --bits (which would requantise).
    expect_refused("weights.bin", "NOPE" + bytes.substr(4), {"weights.bin", "not a GGUF"});
    expect_refused("q8.gguf", bytes, {"q8.gguf", "--bits"}, 4);
}

// ---- split sets, resuming ---------------------------------------------------------------------------

// The files a pack's loader reads (every one but the progress record, whose source path differs).
std::vector<std::string> pack_files(const std::string& out) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(out))
        if (e.is_regular_file() && e.path().filename() != ".pack-progress.json")
            files.push_back(fs::relative(e.path(), out).string());
    std::sort(files.begin(), files.end());
    return files;
}

TEST(GgufPack, ASplitSetPacksToTheBytesOfTheWholeFile) {
    const std::string src = weights_dir() + "/qwen3_next_hf_bf16.q8_0.gguf";
    if (!testing::exists(src)) GTEST_SKIP() << src << " not made (make fixtures)";
    auto whole = format::GgufCheckpoint::open(src);
    ASSERT_TRUE(whole.has_value());
    TempDir dir;
    const auto parts = testing::gguf_split_bytes(**whole, 3);
    for (int i = 0; i < 3; ++i)
        dir.write(format::gguf_split_path("next", i, 3), parts[static_cast<size_t>(i)]);
    const std::string first = dir.file(format::gguf_split_path("next", 0, 3));
    auto split = format::GgufCheckpoint::open(first);
    ASSERT_TRUE(split.has_value()) << split.status().message();
    ASSERT_EQ((*split)->files().size(), 3u);

    ASSERT_TRUE(pack(src, dir.file("from_whole")));
    ASSERT_TRUE(pack(first, dir.file("from_split")));
    const auto files = pack_files(dir.file("from_whole"));
    EXPECT_EQ(pack_files(dir.file("from_split")), files);
    EXPECT_GE(files.size(), 7u);  // config, layout, manifest, tokenizer ×2, dense, experts
    for (const std::string& f : files)
        EXPECT_EQ(read_file(dir.file("from_split") + "/" + f), read_file(dir.file("from_whole") + "/" + f))
            << f;

    // The later files of a set are no place to start.
    convert::PackOptions o;
    o.src_dir = dir.file(format::gguf_split_path("next", 1, 3));
    o.out_dir = dir.file("from_second");
    auto second = convert::pack_model(o);
    ASSERT_FALSE(second.has_value());
    EXPECT_NE(second.status().message().find("open the first"), std::string::npos)
        << second.status().message();
    EXPECT_TRUE(nothing_final(o.out_dir));
}

TEST(GgufPack, AnInterruptedPackResumesToTheSameBytes) {
    const std::string src = weights_dir() + "/" + kMoeFixture;
    if (!testing::exists(src)) GTEST_SKIP() << src << " not made (make fixtures)";
    TempDir dir;
    convert::PackOptions o;
    o.src_dir = src;
    o.out_dir = dir.file("packed");
    ASSERT_TRUE(convert::pack_model(o).has_value());
    const auto files = pack_files(o.out_dir);
    std::map<std::string, std::string> original;
    for (const auto& f : files) original[f] = read_file(o.out_dir + "/" + f);
    // What a kill part-way leaves: no manifest, layout or descriptions, the data under ".partial", and a
    // progress record whose cursor stops where layer 1's gate experts start in the file; expert 0's
    // gate slice of layer 1 damaged (not yet written, as far as the record knows).
    for (const auto& f : files)
        if (f == "dense.safetensors" || f.starts_with("experts/"))
            fs::rename(o.out_dir + "/" + f, o.out_dir + "/" + f + ".partial");
        else
            fs::remove(o.out_dir + "/" + f);
    ASSERT_TRUE(testing::flip_record_bytes(o.out_dir + "/experts/layer_001.bin.partial", 4096, 1));
    auto gguf = format::GgufCheckpoint::open(src);
    ASSERT_TRUE(gguf.has_value());
    const format::GgufTensor* gate = (*gguf)->find("blk.1.ffn_gate_exps.weight");
    ASSERT_NE(gate, nullptr);
    auto record = json::parse(read_file(o.out_dir + "/.pack-progress.json"));
    record["shards"][0]["cursor"] = gate->file_offset;
    ASSERT_TRUE(io::write_file_atomic(o.out_dir + "/.pack-progress.json", record.dump()).is_ok());
    EXPECT_FALSE(model::Model::load(o.out_dir).has_value());  // an interrupted pack never loads

    auto resumed = convert::pack_model(o);
    ASSERT_TRUE(resumed.has_value()) << resumed.status().message();
    EXPECT_TRUE(resumed->resumed);
    ASSERT_EQ(pack_files(o.out_dir), files);
    for (const auto& f : files) EXPECT_EQ(read_file(o.out_dir + "/" + f), original[f]) << f;
}

// ---- layout.json's ggml sections -------------------------------------------------------------------

TEST(GgufPackLayout, GgmlSectionsAreCheckedNamingTheKey) {
    const std::string src = weights_dir() + "/" + kMoeFixture;
    if (!testing::exists(src)) GTEST_SKIP() << src << " not made (make fixtures)";
    TempDir dir;
    const std::string out = dir.file("packed");
    ASSERT_TRUE(pack(src, out));
    const json layout = json::parse(read_file(out + "/layout.json"));
    ASSERT_TRUE(format::parse_pack_layout(layout.dump(), "layout.json").has_value());
    // The first dense tensor of blocks.
    size_t dense_q = 0;
    while (!layout["dense"][dense_q].contains("ggml_type")) ++dense_q;
    const std::string dq = "dense[" + std::to_string(dense_q) + "]";
    ASSERT_EQ(layout["expert_files"][0]["gate"]["ggml_type"], "q8_0");

    struct Case {
        std::function<void(json&)> edit;
        std::vector<std::string> message;
    };
    const std::vector<Case> cases = {
        {[](json& j) { j["expert_files"][0]["gate"]["ggml_type"] = "q9_Z"; },
         {"expert_files[0].gate.ggml_type", "unknown ggml type 'q9_Z'"}},
        {[](json& j) { j["expert_files"][0]["up"]["ggml_type"] = "q4_0"; },
         {"expert_files[0].up.weight", "ggml_type q8_0, but the projection says q4_0"}},
        {[](json& j) {  // a projection of other rows than its blocks hold
             j["expert_files"][0]["gate"]["rows"] = j["expert_files"][0]["gate"]["rows"].get<int64_t>() * 2;
         },
         {"expert_files[0].gate.weight", "q8_0 blocks", "needs U8"}},
        {[](json& j) {  // cols that are not whole blocks
             j["expert_files"][0]["gate"]["cols"] = j["expert_files"][0]["gate"]["cols"].get<int64_t>() + 1;
         },
         {"expert_files[0].gate", "is not a whole number of q8_0 blocks"}},
        {[](json& j) { j["expert_files"][0]["gate"]["bits"] = 4; }, {"expert_files[0].gate", "bits 4"}},
        {[&](json& j) { j["dense"][dense_q]["ggml_type"] = "f16"; },
         {dq + ".ggml_type", "'f16' is an element type"}},
        {[&](json& j) { j["dense"][dense_q]["dtype"] = "F16"; }, {dq + ".dtype", "stored as U8, not F16"}},
        {[&](json& j) {  // rows of bytes that are not whole blocks
             auto& s = j["dense"][dense_q];
             const int64_t row = s["shape"].back().get<int64_t>();
             s["shape"].back() = row - 1;
             s["size"] =
                 s["size"].get<uint64_t>() / static_cast<uint64_t>(row) * static_cast<uint64_t>(row - 1);
         },
         {dq + ".shape", "whole number of 34-byte blocks"}},
        {[&](json& j) {  // a size that is not the shape's
             j["dense"][dense_q]["size"] = j["dense"][dense_q]["size"].get<uint64_t>() + 34;
         },
         {dq, "but its size says"}},
        {[](json& j) { j["source_layout"] = "huggingface"; },
         {".ggml_type", "source_layout is 'huggingface'", "only a pack of a GGUF"}},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE(i);
        json edited = layout;
        cases[i].edit(edited);
        auto r = format::parse_pack_layout(edited.dump(), "layout.json");
        ASSERT_FALSE(r.has_value());
        EXPECT_NE(r.status().message().find("layout.json"), std::string::npos) << r.status().message();
        for (const std::string& m : cases[i].message)
            EXPECT_NE(r.status().message().find(m), std::string::npos) << r.status().message();
    }

    // A ggml type the layout may name but sluice has no kernels for: refused when the experts are opened.
    json no_kernels = layout;
    auto& gate = no_kernels["expert_files"][0]["gate"];
    gate["ggml_type"] = gate["weight"]["ggml_type"] = "iq2_xxs";  // 256 values in 66 bytes: fits the row
    const int64_t rows = gate["rows"].get<int64_t>();
    ASSERT_GE(gate["weight"]["shape"][1].get<int64_t>(), 66);
    gate["cols"] = 256;
    gate["weight"]["shape"] = {rows, 66};
    gate["weight"]["size"] = rows * 66;
    auto parsed = format::parse_pack_layout(no_kernels.dump(), "layout.json");
    ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
    auto sources = experts::expert_sources_from_pack(out, *parsed);
    ASSERT_FALSE(sources.has_value());
    EXPECT_NE(sources.status().message().find("layer 0 gate"), std::string::npos)
        << sources.status().message();
    EXPECT_NE(sources.status().message().find("iq2_xxs"), std::string::npos) << sources.status().message();
}

}  // namespace
}  // namespace sluice
