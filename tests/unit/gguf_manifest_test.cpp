// The checksum manifest beside a GGUF (format/gguf_manifest.h): written on first use, then every
// tensor and every expert slice of a routed-expert tensor checked against it — a damaged byte names
// its tensor (and expert), a changed file is reported as changed, a broken manifest is an error naming
// it. On the fixtures tools/make_gguf_fixtures.py writes (tests/data/gguf).
#include "format/gguf_manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/mapped_file.h"
#include "test_util.h"

namespace sluice::format {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
    return testing::test_data_dir() + "/gguf/" + name;
}

// Flips one byte at `offset` of `path`.
void flip(const std::string& path, uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << path;
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
}

// Where tensor `name` of the GGUF at `path` starts in its file, and its size.
std::pair<uint64_t, uint64_t> where(const std::string& path, const std::string& name) {
    auto ck = GgufCheckpoint::open(path);
    EXPECT_TRUE(ck.has_value()) << ck.status().message();
    const GgufTensor* t = ck.has_value() ? (*ck)->find(name) : nullptr;
    EXPECT_NE(t, nullptr) << name;
    return t != nullptr ? std::pair{t->file_offset, t->size_bytes} : std::pair<uint64_t, uint64_t>{0, 0};
}

bool mentions(const std::vector<std::string>& problems, const std::string& text) {
    for (const auto& p : problems)
        if (p.find(text) != std::string::npos) return true;
    return false;
}

TEST(GgufManifest, FirstUseWritesItThenADamagedExpertSliceOrTensorIsNamed) {
    testing::TempDir tmp;
    const std::string path = tmp.file("m.gguf");
    fs::copy_file(fixture("quants.gguf"), path);

    auto first = verify_gguf(path);
    ASSERT_TRUE(first.has_value()) << first.status().message();
    EXPECT_TRUE(first->manifest_written);
    EXPECT_EQ(first->manifest_path, path + ".sluice-manifest.json");
    EXPECT_TRUE(fs::exists(first->manifest_path));
    EXPECT_EQ(first->expert_slices, 4);  // blk.0.ffn_up_exps: [4 experts, 8, 256]
    EXPECT_GT(first->tensors, 10);
    EXPECT_TRUE(first->problems.empty());

    auto again = verify_gguf(path);
    ASSERT_TRUE(again.has_value()) << again.status().message();
    EXPECT_FALSE(again->manifest_written);
    EXPECT_TRUE(again->problems.empty());

    // One byte of expert 2's slice: that expert alone.
    const auto [exps, exps_size] = where(path, "blk.0.ffn_up_exps");
    flip(path, exps + 2 * (exps_size / 4) + 17);
    auto bad = verify_gguf(path);
    ASSERT_TRUE(bad.has_value()) << bad.status().message();
    ASSERT_EQ(bad->problems.size(), 1u);
    EXPECT_TRUE(mentions(bad->problems, "tensor 'blk.0.ffn_up_exps', expert 2")) << bad->problems[0];
    EXPECT_TRUE(mentions(bad->problems, "damaged"));

    // One byte of another tensor: named too.
    const auto [q8, q8_size] = where(path, "q8_0");
    ASSERT_GT(q8_size, 0u);
    flip(path, q8 + q8_size - 1);
    bad = verify_gguf(path);
    ASSERT_TRUE(bad.has_value());
    EXPECT_EQ(bad->problems.size(), 2u);
    EXPECT_TRUE(mentions(bad->problems, "tensor 'q8_0'"));

    // A deliberate change: --rewrite takes the file as it is now.
    auto rewritten = verify_gguf(path, /*rewrite=*/true);
    ASSERT_TRUE(rewritten.has_value());
    EXPECT_TRUE(rewritten->manifest_written);
    auto ok = verify_gguf(path);
    ASSERT_TRUE(ok.has_value());
    EXPECT_TRUE(ok->problems.empty());
}

TEST(GgufManifest, AChangedFileOrABrokenManifestIsReportedAsSuch) {
    testing::TempDir tmp;
    const std::string path = tmp.file("m.gguf");
    fs::copy_file(fixture("quants.gguf"), path);
    auto first = verify_gguf(path);
    ASSERT_TRUE(first.has_value()) << first.status().message();
    const std::string manifest = first->manifest_path;

    // The manifest of another size of the file: the file changed, not compared tensor by tensor.
    auto text = io::read_text_file(manifest);
    ASSERT_TRUE(text.has_value());
    auto parsed = parse_gguf_manifest(*text, manifest);
    ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
    parsed->files[0].size += 64;
    ASSERT_TRUE(io::write_file_atomic(manifest, serialize_gguf_manifest(*parsed)).is_ok());
    auto changed = verify_gguf(path);
    ASSERT_TRUE(changed.has_value());
    ASSERT_EQ(changed->problems.size(), 1u);
    EXPECT_TRUE(mentions(changed->problems, "the file changed")) << changed->problems[0];

    // Broken manifests: an error naming the manifest and the field, and how to recover.
    for (const std::string& broken :
         {std::string("not json"), std::string(R"({"format": "other", "version": 1})"),
          std::string(
              R"({"format": "sluice-gguf-manifest", "version": 1, "files": [{"name": "m.gguf", "size": 1,
             "mtime_ns": 0}], "tensors": {"a": "xyz"}, "experts": {}})")}) {
        ASSERT_TRUE(io::write_file_atomic(manifest, broken).is_ok());
        auto r = verify_gguf(path);
        ASSERT_FALSE(r.has_value()) << broken;
        EXPECT_NE(r.status().message().find(manifest), std::string::npos) << r.status().message();
        EXPECT_NE(r.status().message().find("--rewrite"), std::string::npos) << r.status().message();
    }
    auto bad_hex = verify_gguf(path);
    EXPECT_NE(bad_hex.status().message().find("tensors['a']"), std::string::npos)
        << bad_hex.status().message();
}

TEST(GgufManifest, ASplitSetIsOneManifestBesideItsFirstFile) {
    testing::TempDir tmp;
    for (const char* name : {"split-00001-of-00002.gguf", "split-00002-of-00002.gguf"})
        fs::copy_file(fixture(name), tmp.file(name));
    const std::string first_file = tmp.file("split-00001-of-00002.gguf");
    auto first = verify_gguf(first_file);
    ASSERT_TRUE(first.has_value()) << first.status().message();
    EXPECT_TRUE(first->manifest_written);
    auto text = io::read_text_file(first->manifest_path);
    ASSERT_TRUE(text.has_value());
    auto m = parse_gguf_manifest(*text, first->manifest_path);
    ASSERT_TRUE(m.has_value()) << m.status().message();
    ASSERT_EQ(m->files.size(), 2u);
    EXPECT_EQ(m->files[1].name, "split-00002-of-00002.gguf");

    // A damaged byte in the second file's tensors is found through the first file.
    auto ck = GgufCheckpoint::open(first_file);
    ASSERT_TRUE(ck.has_value());
    const GgufTensor* in_second = nullptr;
    for (const GgufTensor* t : (*ck)->tensors())
        if (t->file_index == 1 && t->size_bytes > 0) in_second = t;
    ASSERT_NE(in_second, nullptr);
    const std::string name = in_second->name;
    const uint64_t offset = in_second->file_offset;
    ck = Expected<std::shared_ptr<GgufCheckpoint>>(error(ErrorCode::kInternal, "released"));
    flip(tmp.file("split-00002-of-00002.gguf"), offset);
    auto bad = verify_gguf(first_file);
    ASSERT_TRUE(bad.has_value());
    EXPECT_TRUE(mentions(bad->problems, "'" + name + "'"));
}

}  // namespace
}  // namespace sluice::format
