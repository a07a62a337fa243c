// The pure parts of `sluice pull` and of the shared pack path: SHA-256 (FIPS vectors, and a state
// saved and restored mid-stream), Content-Range parsing, the Hub's JSON answers and paging, glob
// include/exclude selection, and the plan writer fed in odd-sized slices with a resume from a
// saved cursor — which must give the same files as one pass (the property a resumed pull needs).
// The network path itself is tested against a mock Hub in tests/oracle/pull.test.mjs.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>

#include "convert/pack_plan.h"
#include "convert/pack_stream.h"
#include "convert/packer.h"
#include "core/sha256.h"
#include "format/hub_api.h"
#include "format/safetensors.h"
#include "io/http.h"
#include "io/mapped_file.h"
#include "model/config.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using sluice::testing::TempDir;

TEST(Sha256, FipsVectorsAndResume) {
    Sha256 empty;
    EXPECT_EQ(empty.hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    Sha256 abc;
    abc.update("abc", 3);
    EXPECT_EQ(abc.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    Sha256 two;
    two.update(two_blocks.data(), two_blocks.size());
    EXPECT_EQ(two.hex_digest(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

    // A million 'a' in uneven pieces, saved and restored (into a fresh object) at every piece.
    std::string a(1000000, 'a');
    Sha256 h;
    size_t at = 0, step = 1;
    while (at < a.size()) {
        const size_t n = std::min(step, a.size() - at);
        h.update(a.data() + at, n);
        at += n;
        step = step * 3 + 7;
        Sha256 restored;
        ASSERT_TRUE(restored.restore(h.save()));
        h = restored;
    }
    EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    Sha256 bad;
    EXPECT_FALSE(bad.restore("not a state"));
}

// A progress record written by the hand-written implementation this replaced (its save() of the
// first 70001 of 100003 'x') resumes into the libcrypto one and ends at the whole input's digest.
TEST(Sha256, ResumesAStateSavedBeforeTheLibcryptoSwitch) {
    std::string saved = "a9cc239b,0549075c,d74c385f,d220acaa,81466d9d,e5a27533,2fd68132,1d92b98b:70001:";
    for (int i = 0; i < 70001 % 64; ++i) saved += "78";  // the tail: 49 bytes of 'x'
    Sha256 h;
    ASSERT_TRUE(h.restore(saved));
    EXPECT_EQ(h.bytes_hashed(), 70001u);
    EXPECT_EQ(h.save(), saved);
    const std::string rest(100003 - 70001, 'x');
    h.update(rest.data(), rest.size());
    EXPECT_EQ(h.hex_digest(), "68f003dab14596fbb48139f41f183dd7c93a4fbe87b9cc4b621d4a6b4ccf486b");
    Sha256 overflow;
    EXPECT_FALSE(overflow.restore(saved.substr(0, 72) + "99999999999999999999:"));
}

TEST(Http, ContentRange) {
    uint64_t f, l, t;
    ASSERT_TRUE(io::parse_content_range("bytes 0-7/100", &f, &l, &t));
    EXPECT_EQ(f, 0u);
    EXPECT_EQ(l, 7u);
    EXPECT_EQ(t, 100u);
    ASSERT_TRUE(io::parse_content_range("bytes 5-9/*", &f, &l, &t));
    EXPECT_EQ(t, 0u);
    EXPECT_FALSE(io::parse_content_range("bytes 9-5/100", &f, &l, &t));
    EXPECT_FALSE(io::parse_content_range("bytes 0-100/100", &f, &l, &t));  // past the end
    EXPECT_FALSE(io::parse_content_range("items 0-7/100", &f, &l, &t));
    EXPECT_FALSE(io::parse_content_range("bytes */100", &f, &l, &t));
}

TEST(HubApi, UrlsAndAnswers) {
    EXPECT_EQ(format::hub_resolve_url("https://hf.co", "Qwen/Qwen3-Next", "refs/pr/1", "a b.json"),
              "https://hf.co/Qwen/Qwen3-Next/resolve/refs%2Fpr%2F1/a%20b.json");
    EXPECT_EQ(format::hub_tree_url("http://m", "o/r", "abc"),
              "http://m/api/models/o/r/tree/abc?recursive=true");
    auto sha = format::parse_hub_revision(R"({"id":"o/r","sha":"0123456789abcdef0123456789abcdef01234567"})");
    ASSERT_TRUE(sha.has_value());
    EXPECT_FALSE(format::parse_hub_revision(R"({"sha":"main"})").has_value());
    EXPECT_FALSE(format::parse_hub_revision("<html>").has_value());

    auto tree = format::parse_hub_tree(R"([
        {"type":"directory","path":"sub","oid":"x","size":0},
        {"type":"file","path":"config.json","oid":"y","size":12},
        {"type":"file","path":"model.safetensors","oid":"z","size":99,
         "lfs":{"oid":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":99,"pointerSize":134}}])");
    ASSERT_TRUE(tree.has_value()) << tree.status().message();
    ASSERT_EQ(tree->size(), 2u);
    EXPECT_EQ((*tree)[0].sha256, "");
    EXPECT_EQ((*tree)[1].sha256.size(), 64u);
    EXPECT_FALSE(format::parse_hub_tree(R"([{"type":"file","path":"../x","size":1}])").has_value());
    EXPECT_FALSE(format::parse_hub_tree(R"([{"type":"file","path":"m","size":1,"lfs":{"oid":"a","size":2}}])")
                     .has_value());

    EXPECT_EQ(format::hub_next_page(R"(<https://h/api/x?cursor=abc>; rel="next")"),
              "https://h/api/x?cursor=abc");
    EXPECT_EQ(format::hub_next_page(R"(<https://h/p>; rel="prev", <https://h/n>; rel="next")"),
              "https://h/n");
    EXPECT_EQ(format::hub_next_page(R"(<https://h/p>; rel="prev")"), "");
}

TEST(HubApi, GlobSelection) {
    EXPECT_TRUE(format::glob_match("*.md", "README.md"));
    EXPECT_TRUE(format::glob_match("*.md", "docs/a.md"));  // '*' crosses '/', as on the Hub
    EXPECT_FALSE(format::glob_match("*.md", "README.txt"));
    EXPECT_TRUE(format::glob_match("model-0000[1-2]-*", "model-00002-of-00003.safetensors"));

    std::vector<format::HubFile> files = {{"config.json", 10, ""},
                                          {"tokenizer.json", 20, ""},
                                          {"merges.txt", 5, ""},
                                          {"README.md", 3, ""},
                                          {"model.safetensors.index.json", 30, ""},
                                          {"model-00001-of-00002.safetensors", 100, "s1"},
                                          {"model-00002-of-00002.safetensors", 100, "s2"},
                                          {"consolidated.safetensors", 200, "s3"},
                                          {"original/params.json", 4, ""}};
    const std::string index =
        R"({"weight_map":{"b":"model-00002-of-00002.safetensors","a":"model-00001-of-00002.safetensors"}})";
    auto sel = format::select_hub_files(files, index, {"*.md"}, {"merges.txt"});
    ASSERT_TRUE(sel.has_value()) << sel.status().message();
    ASSERT_EQ(sel->shards.size(), 2u);  // the index names the shards; consolidated.safetensors is not one
    EXPECT_EQ(sel->shards[0].path, "model-00001-of-00002.safetensors");
    std::vector<std::string> small;
    for (const auto& f : sel->small_files) small.push_back(f.path);
    EXPECT_EQ(small, (std::vector<std::string>{"config.json", "model.safetensors.index.json",
                                               "tokenizer.json", "README.md"}));
    EXPECT_EQ(sel->extra_files, std::vector<std::string>{"README.md"});
    EXPECT_FALSE(format::select_hub_files(files, index, {}, {"*.safetensors"}).has_value());
    EXPECT_FALSE(format::select_hub_files(files, index, {}, {"config*"}).has_value());
    // No index: every root-level .safetensors file, sorted.
    auto plain = format::select_hub_files(files, "", {}, {});
    ASSERT_TRUE(plain.has_value());
    EXPECT_EQ(plain->shards.size(), 3u);
}

// Packs a golden through the streaming path with a reader that hands over odd-sized slices and
// stops once in the middle (as a kill would); the resumed run must give the files of `sluice pack`.
void expect_resumed_stream_equals_pack(const std::string& golden, int bits) {
    const std::string src = sluice::testing::test_data_dir() + "/goldens/" + golden;
    TempDir dir;
    convert::PackOptions po;
    po.src_dir = src;
    po.out_dir = dir.file("pack");
    po.bits = bits;
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();

    auto cfg = model::load_model_config(src);
    ASSERT_TRUE(cfg.has_value());
    auto ckpt = format::Checkpoint::open(src);
    ASSERT_TRUE(ckpt.has_value());
    auto eff_bits = convert::resolve_pack_bits(*cfg, bits, 64, src);
    ASSERT_TRUE(eff_bits.has_value());
    auto plan = convert::plan_pack(*cfg, **ckpt, *eff_bits, 64);
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    auto mapped = io::MappedFile::open(src + "/model.safetensors");
    ASSERT_TRUE(mapped.has_value());
    plan->shards[0].size_bytes = (*mapped)->size();

    const uint64_t stop_at = (*mapped)->size() * 3 / 5;
    bool interrupt = true;
    std::mt19937 rng(7);
    convert::ShardReader reader = [&](size_t, uint64_t begin, uint64_t end, const convert::ShardSink& sink) {
        for (uint64_t at = begin; at < end;) {
            if (interrupt && at >= stop_at) return error(ErrorCode::kIo, "connection dropped (test)");
            const uint64_t n = std::min<uint64_t>(end - at, 1 + rng() % 5000);
            SLUICE_RETURN_IF_ERROR(sink({(*mapped)->data() + at, n}));
            at += n;
        }
        return Status::ok();
    };
    convert::StreamOptions so;
    so.out_dir = dir.file("stream");
    so.record_name = ".pack-progress.json";
    so.source = "test";
    so.side_dir = src;
    so.flush_every_bytes = 20000;
    so.shard_sha256 = {""};
    auto first = convert::run_pack_plan(*plan, reader, so);
    ASSERT_FALSE(first.has_value());
    auto record = io::read_text_file(so.out_dir + "/.pack-progress.json");
    ASSERT_TRUE(record.has_value());
    auto parsed = convert::parse_stream_record(*record, "record");
    ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
    EXPECT_GT(parsed->shards[0].cursor, 0u);
    EXPECT_LT(parsed->shards[0].cursor, stop_at + 5000);  // the slice that crossed stop_at

    interrupt = false;
    auto second = convert::run_pack_plan(*plan, reader, so);
    ASSERT_TRUE(second.has_value()) << second.status().message();
    EXPECT_TRUE(second->resumed);
    for (const auto& entry : fs::recursive_directory_iterator(po.out_dir)) {
        if (!entry.is_regular_file() || entry.path().filename().string()[0] == '.') continue;
        const std::string rel = fs::relative(entry.path(), po.out_dir).string();
        auto a = io::read_text_file(entry.path().string());
        auto b = io::read_text_file(so.out_dir + "/" + rel);
        ASSERT_TRUE(b.has_value()) << rel;
        EXPECT_TRUE(*a == *b) << rel << " differs between pack and the resumed stream";
    }
}

TEST(PackStream, ResumedQuantizingStreamEqualsPack) {
    expect_resumed_stream_equals_pack("qwen3_5_moe_hf_bf16", 4);
}

TEST(PackStream, ResumedVerbatimStreamEqualsPack) {
    expect_resumed_stream_equals_pack("qwen3_next_mlx_q4", 0);
}

// gpt-oss's pieces (convert/pack_plan.h): the Hub's MXFP4 codes and scales patched into ggml rows (dense
// weights quantized to 4 bits beside them), and float experts transposed a whole expert at a time (the
// piece is one "row", held back from the cursor until it is complete), each cut at odd places and resumed.
TEST(PackStream, ResumedGptOssMxfp4StreamEqualsPack) {
    expect_resumed_stream_equals_pack("gpt_oss_hf_mxfp4", 0);
}

TEST(PackStream, ResumedGptOssTransposingStreamEqualsPack) {
    expect_resumed_stream_equals_pack("gpt_oss_hf_bf16", 4);
}

// The MXFP4 golden split in two shards, its experts' codes in one and their scales in the other, streamed on
// two threads (as `pull` streams shards, one connection each): the two shards' pieces patch the same output
// rows, and the expert files must be those of a pack of the unsplit checkpoint.
TEST(PackStream, Mxfp4CodesAndScalesInTwoShardsOnTwoThreadsEqualPack) {
    const std::string src = sluice::testing::test_data_dir() + "/goldens/gpt_oss_hf_mxfp4";
    TempDir dir;
    const std::string split = dir.file("split");
    fs::create_directories(split);
    fs::copy_file(src + "/config.json", split + "/config.json");
    auto whole = format::Checkpoint::open(src);
    ASSERT_TRUE(whole.has_value()) << whole.status().message();
    std::vector<format::TensorToWrite> shards[2];
    nlohmann::json weight_map;
    const char* names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    for (const std::string& name : (*whole)->names()) {
        const format::TensorInfo* t = (*whole)->find(name);
        const int s = name.ends_with("_scales") ? 1 : 0;
        shards[s].push_back({name, t->dtype, t->shape,
                             std::string_view(reinterpret_cast<const char*>(t->data), t->size_bytes)});
        weight_map[name] = names[s];
    }
    ASSERT_FALSE(shards[1].empty());
    for (int s = 0; s < 2; ++s)
        ASSERT_TRUE(format::write_safetensors(split + "/" + names[s], shards[s]).is_ok());
    ASSERT_TRUE(io::write_file_atomic(split + "/model.safetensors.index.json",
                                      nlohmann::json{{"weight_map", weight_map}}.dump())
                    .is_ok());

    convert::PackOptions po;
    po.src_dir = src;
    po.out_dir = dir.file("pack");
    po.bits = 16;
    auto packed = convert::pack_model(po);
    ASSERT_TRUE(packed.has_value()) << packed.status().message();

    auto cfg = model::load_model_config(split);
    ASSERT_TRUE(cfg.has_value());
    auto ckpt = format::Checkpoint::open(split);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto plan = convert::plan_pack(*cfg, **ckpt, 16, 64);
    ASSERT_TRUE(plan.has_value()) << plan.status().message();
    ASSERT_EQ(plan->shards.size(), 2u);
    std::vector<std::shared_ptr<io::MappedFile>> files;
    for (auto& shard : plan->shards) {
        auto m = io::MappedFile::open(split + "/" + shard.file);
        ASSERT_TRUE(m.has_value());
        shard.size_bytes = (*m)->size();
        files.push_back(std::move(*m));
    }
    std::mt19937 rng(11);
    std::mutex rng_mu;
    convert::ShardReader reader = [&](size_t s, uint64_t begin, uint64_t end,
                                      const convert::ShardSink& sink) {
        for (uint64_t at = begin; at < end;) {
            uint64_t n;
            {
                std::lock_guard<std::mutex> lock(rng_mu);
                n = std::min<uint64_t>(end - at, 1 + rng() % 3000);
            }
            SLUICE_RETURN_IF_ERROR(sink({files[s]->data() + at, n}));
            at += n;
        }
        return Status::ok();
    };
    convert::StreamOptions so;
    so.out_dir = dir.file("stream");
    so.record_name = ".pack-progress.json";
    so.source = "test";
    so.side_dir = split;
    so.parallel_shards = 2;
    so.shard_sha256 = {"", ""};
    auto streamed = convert::run_pack_plan(*plan, reader, so);
    ASSERT_TRUE(streamed.has_value()) << streamed.status().message();
    int compared = 0;
    for (const auto& entry : fs::directory_iterator(po.out_dir + "/experts")) {
        const std::string rel = "experts/" + entry.path().filename().string();
        auto a = io::read_text_file(entry.path().string());
        auto b = io::read_text_file(so.out_dir + "/" + rel);
        ASSERT_TRUE(a.has_value() && b.has_value()) << rel;
        EXPECT_TRUE(*a == *b) << rel << " differs between the pack and the two-shard stream";
        ++compared;
    }
    EXPECT_EQ(compared, 4);
}

}  // namespace
}  // namespace sluice
