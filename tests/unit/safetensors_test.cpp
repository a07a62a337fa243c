#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace sluice::format {
namespace {

using sluice::testing::TempDir;

std::string raw_file(const std::string& header_json, const std::string& data) {
    std::string out(8, '\0');
    uint64_t n = header_json.size();
    std::memcpy(out.data(), &n, 8);
    return out + header_json + data;
}

Expected<SafetensorsHeader> parse(const std::string& bytes) {
    return parse_safetensors_header(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
        "t.safetensors");
}

std::string error_of(const std::string& bytes) {
    auto h = parse(bytes);
    EXPECT_FALSE(h.has_value());
    return h.has_value() ? "" : h.status().message();
}

TEST(Safetensors, RoundTripsEveryDtype) {
    TempDir dir;
    std::vector<std::string> payloads;
    std::vector<TensorToWrite> tensors;
    const std::vector<std::pair<std::string, DType>> all = {
        {"f32", DType::kF32},     {"f16", DType::kF16}, {"bf16", DType::kBF16}, {"u32", DType::kU32},
        {"i32", DType::kI32},     {"u8", DType::kU8},   {"i8", DType::kI8},     {"e4m3", DType::kF8E4M3},
        {"e5m2", DType::kF8E5M2}, {"i64", DType::kI64}, {"bool", DType::kBool}};
    payloads.reserve(all.size());
    for (const auto& [name, dt] : all) {
        payloads.push_back(std::string(3 * dtype_size(dt), static_cast<char>(payloads.size() + 1)));
        tensors.push_back({name, dt, {3}, payloads.back()});
    }
    // An odd-sized tensor first makes every later data offset unaligned.
    std::string odd(1, 'x');
    tensors.insert(tensors.begin(), {"odd", DType::kU8, {1}, odd});
    ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), tensors, {{"format", "pt"}}).is_ok());

    auto file = SafetensorsFile::open(dir.file("model.safetensors"));
    ASSERT_TRUE(file.has_value()) << file.status().message();
    EXPECT_EQ((*file)->metadata().at("format"), "pt");
    for (size_t i = 0; i < all.size(); ++i) {
        const TensorInfo* t = (*file)->find(all[i].first);
        ASSERT_NE(t, nullptr) << all[i].first;
        EXPECT_EQ(t->dtype, all[i].second);
        EXPECT_EQ(t->shape, std::vector<int64_t>{3});
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->data), t->size_bytes), payloads[i]);
    }
}

TEST(Safetensors, RejectsMalformedHeaders) {
    EXPECT_NE(error_of("abc").find("shorter than the 8-byte header length"), std::string::npos);
    EXPECT_NE(error_of(raw_file("{", "")).find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of(raw_file("[]", "")).find("not a JSON object"), std::string::npos);
    std::string too_long(8, '\0');
    uint64_t n = 1000;
    std::memcpy(too_long.data(), &n, 8);
    EXPECT_NE(error_of(too_long + "{}").find("runs past the end"), std::string::npos);
    n = 200'000'000;
    std::memcpy(too_long.data(), &n, 8);
    EXPECT_NE(error_of(too_long).find("exceeds"), std::string::npos);
}

TEST(Safetensors, RejectsBadTensorsNamingThem) {
    auto msg = error_of(raw_file(R"({"w":{"dtype":"Q5","shape":[2],"data_offsets":[0,2]}})", "ab"));
    EXPECT_NE(msg.find("tensor 'w' has unknown dtype 'Q5'"), std::string::npos) << msg;
    msg = error_of(raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"));
    EXPECT_NE(msg.find("tensor 'w' F32 [2] needs 8 bytes, data_offsets span 4"), std::string::npos) << msg;
    msg = error_of(raw_file(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", "abcd"));
    EXPECT_NE(msg.find("run past the data section"), std::string::npos) << msg;
    msg = error_of(raw_file(
        R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
        "abcdef"));
    EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
    msg = error_of(raw_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""));
    EXPECT_NE(msg.find("non-negative integer"), std::string::npos) << msg;
    msg = error_of(raw_file(
        R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}})", ""));
    EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
    msg = error_of(raw_file(R"({"w":{"dtype":"U8","shape":[1]}})", "a"));
    EXPECT_NE(msg.find("data_offsets"), std::string::npos) << msg;
}

TEST(Safetensors, OpensShardedCheckpoints) {
    TempDir dir;
    std::string a(8, 'a'), b(4, 'b');
    ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"x", DType::kF32, {2}, a}})
                    .is_ok());
    ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"y", DType::kBF16, {2}, b}})
                    .is_ok());
    dir.write(
        "model.safetensors.index.json",
        R"({"metadata":{"total_size":12},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
    auto ckpt = Checkpoint::open(dir.path());
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    EXPECT_EQ((*ckpt)->size(), 2u);
    EXPECT_EQ((*ckpt)->total_bytes(), 12u);
    ASSERT_NE((*ckpt)->find("y"), nullptr);
    EXPECT_EQ((*ckpt)->find("y")->dtype, DType::kBF16);

    // A tensor listed in the index but absent from its shard is an error naming both.
    dir.write(
        "model.safetensors.index.json",
        R"({"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors","z":"model-00002-of-00002.safetensors"}})");
    auto missing = Checkpoint::open(dir.path());
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.status().message().find("tensor 'z' is listed but missing"), std::string::npos);

    dir.write("model.safetensors.index.json", R"({"weight_map":{"x":"../evil.safetensors"}})");
    EXPECT_FALSE(Checkpoint::open(dir.path()).has_value());
}

TEST(Safetensors, MissingDirectoryIsNotFound) {
    auto ckpt = Checkpoint::open("/nonexistent/sluice");
    ASSERT_FALSE(ckpt.has_value());
    EXPECT_EQ(ckpt.status().code(), ErrorCode::kNotFound);
}

TEST(Safetensors, ReadsTheMlxFixtures) {
    std::string dir = sluice::testing::shared_dir() + "/fixtures/mlx-lm/tiny-model-q4";
    if (!sluice::testing::exists(dir)) GTEST_SKIP() << "../shared fixtures absent";
    auto ckpt = Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    const TensorInfo* w = (*ckpt)->find("model.layers.0.mlp.switch_mlp.gate_proj.weight");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(describe(w->dtype, w->shape), "U32 [8,32,8]");
}

}  // namespace
}  // namespace sluice::format
