// GGUF: the reader (format/gguf.h) on gguf-py's files and on hostile ones, and ggml's weight formats
// (kernels/ggml_quants.h) against gguf-py's dequantisation.
//
// Fixtures: tests/data/gguf/, written by tools/make_gguf_fixtures.py with gguf-py (its docstring says
// how): quants.gguf (metadata of every value type, one tensor per ggml type, alignment 64), quants/
// NAME.npy (gguf-py's dequantize of tensor NAME), a split pair.
//
// Tolerances. Dequantisation: none — bit for bit (each element is the same one or two f32 roundings
// in gguf-py, ggml and here; kernels/ggml_quants.h). The fast dot product against its twin
// (dequantize, then sum in double): |fast − twin| ≤ 2e-6 · S, S = Σ over 32-element chunks of
// max|w| · Σ|x|. The fast path never forms the weights (d·Σq·x − dmin·m·Σx in place of
// Σ(d·q − dmin·m)·x) and sums in f32 lanes, so it differs from the twin by f32 roundings, each relative
// to a partial sum below S: the test prints the observed worst, 1.3e-8 (AVX2) and 1.5e-8 (AVX-512) of S
// on rows of up to 4096 — the bound leaves a ~130× margin, while one wrong code, nibble or scale moves
// the result by ~d·|x| ≳ 1e-4 of S.
#include "format/gguf.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "core/thread_pool.h"
#include "gguf_bytes.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/ggml_quants.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kernels/weight_format.h"
#include "test_util.h"

namespace sluice::format {
namespace {

using sluice::testing::TempDir;
using sluice::testing::test_data_dir;

std::string gguf_dir() {
    return test_data_dir() + "/gguf";
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A float32 C-order .npy (format 1.x or 2.x), as np.save writes it.
struct Npy {
    std::vector<int64_t> shape;
    std::vector<float> data;
};

std::optional<Npy> read_npy_f32(const std::string& path) {
    const std::string b = read_bytes(path);
    if (b.size() < 12 || b.compare(0, 6, "\x93NUMPY") != 0) return std::nullopt;
    size_t header_len = 0, header_start = 0;
    if (b[6] == 1) {
        uint16_t n;
        std::memcpy(&n, b.data() + 8, 2);
        header_len = n;
        header_start = 10;
    } else {
        uint32_t n;
        std::memcpy(&n, b.data() + 8, 4);
        header_len = n;
        header_start = 12;
    }
    const std::string header = b.substr(header_start, header_len);
    if (header.find("'descr': '<f4'") == std::string::npos ||
        header.find("'fortran_order': False") == std::string::npos)
        return std::nullopt;
    const size_t open = header.find("'shape': (");
    if (open == std::string::npos) return std::nullopt;
    Npy out;
    int64_t numel = 1;
    for (size_t p = open + 10; p < header.size() && header[p] != ')';) {
        if (header[p] >= '0' && header[p] <= '9') {
            size_t used = 0;
            out.shape.push_back(std::stoll(header.substr(p), &used));
            numel *= out.shape.back();
            p += used;
        } else {
            ++p;
        }
    }
    const size_t data_start = header_start + header_len;
    if (b.size() != data_start + static_cast<size_t>(numel) * 4) return std::nullopt;
    out.data.resize(static_cast<size_t>(numel));
    std::memcpy(out.data.data(), b.data() + data_start, b.size() - data_start);
    return out;
}

// ---- hand-built GGUF bytes for the hostile cases -------------------------------------------------

using sluice::testing::gstr;
using sluice::testing::le32;
using sluice::testing::le64;
std::string kv_u32(std::string_view key, uint32_t v) {
    return gstr(key) + le32(4) + le32(v);
}
std::string kv_str(std::string_view key, std::string_view s) {
    return gstr(key) + le32(8) + gstr(s);
}
std::string tensor_info(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    std::string s = gstr(name) + le32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) s += le64(d);
    return s + le32(type) + le64(offset);
}

struct Built {
    uint32_t version = 3;
    std::vector<std::string> kvs;
    std::vector<std::string> tensors;
    std::string data;
    uint64_t alignment = 32;
    std::optional<uint64_t> n_kv, n_tensors;  // overrides of the counts

    std::string bytes() const {
        std::string s = "GGUF" + le32(version) + le64(n_tensors.value_or(tensors.size())) +
                        le64(n_kv.value_or(kvs.size()));
        for (const auto& kv : kvs) s += kv;
        for (const auto& t : tensors) s += t;
        if (!tensors.empty())
            while (s.size() % alignment != 0) s.push_back('\0');
        return s + data;
    }
};

Expected<GgufHeader> parse(const std::string& bytes) {
    return parse_gguf_header(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "t.gguf");
}

std::string error_of(const std::string& bytes) {
    auto h = parse(bytes);
    EXPECT_FALSE(h.has_value());
    if (h.has_value()) return "";
    EXPECT_EQ(h.status().code(), ErrorCode::kCorrupt);
    EXPECT_EQ(h.status().message().rfind("[gguf] t.gguf: ", 0), 0u) << h.status().message();
    return h.status().message();
}

// A valid file with one F32 tensor [2, 8] = 0..15: what the hostile cases break one field of.
Built valid_file() {
    Built b;
    b.kvs = {kv_str("general.architecture", "x"), kv_u32("x.block_count", 1)};
    b.tensors = {tensor_info("t", {8, 2}, 0, 0)};
    for (int i = 0; i < 16; ++i) {
        const float f = static_cast<float>(i);
        b.data += std::string(reinterpret_cast<const char*>(&f), 4);
    }
    return b;
}

// ---- metadata and tensors of gguf-py's file -----------------------------------------------------

class GgufQuantsFile : public ::testing::Test {
 protected:
    void SetUp() override {
        auto f = GgufFile::open(gguf_dir() + "/quants.gguf");
        ASSERT_TRUE(f.has_value()) << f.status().message();
        file_ = *f;
    }
    std::shared_ptr<GgufFile> file_;
};

TEST_F(GgufQuantsFile, ReadsMetadataOfEveryType) {
    const GgufHeader& h = file_->header();
    EXPECT_EQ(h.version, 3u);
    EXPECT_EQ(h.alignment, 64u);
    EXPECT_EQ(h.data_start % 64, 0u);
    const GgufMetadata& md = file_->metadata();
    EXPECT_EQ(*md.get_string("general.architecture"), "sluice-test");
    EXPECT_EQ(*md.get_uint("general.alignment"), 64u);

    const std::map<std::string, std::pair<GgufValueType, int64_t>> ints = {
        {"test.u8", {GgufValueType::kU8, 255}},
        {"test.i8", {GgufValueType::kI8, -128}},
        {"test.u16", {GgufValueType::kU16, 65535}},
        {"test.i16", {GgufValueType::kI16, -32768}},
        {"test.u32", {GgufValueType::kU32, 4294967295}},
        {"test.i32", {GgufValueType::kI32, -2147483648LL}},
        {"test.i64", {GgufValueType::kI64, std::numeric_limits<int64_t>::min()}},
    };
    for (const auto& [key, want] : ints) {
        SCOPED_TRACE(key);
        ASSERT_TRUE(md.has(key));
        EXPECT_EQ(md.find(key)->type(), want.first);
        EXPECT_EQ(*md.get_int(key), want.second);
        EXPECT_EQ(md.get_uint(key).has_value(), want.second >= 0);
    }
    EXPECT_EQ(md.find("test.u64")->type(), GgufValueType::kU64);
    EXPECT_EQ(*md.get_uint("test.u64"), std::numeric_limits<uint64_t>::max());
    EXPECT_FALSE(md.get_int("test.u64").has_value());  // does not fit int64
    EXPECT_EQ(md.find("test.f32")->type(), GgufValueType::kF32);
    EXPECT_EQ(*md.get_float("test.f32"), static_cast<double>(static_cast<float>(-1.5e-7)));
    EXPECT_EQ(md.find("test.f64")->type(), GgufValueType::kF64);
    EXPECT_EQ(*md.get_float("test.f64"), 2.718281828459045);
    EXPECT_TRUE(*md.get_bool("test.bool_true"));
    EXPECT_FALSE(*md.get_bool("test.bool_false"));
    EXPECT_EQ(*md.get_string("test.string"), "h\xC3\xA9llo, \xE4\xB8\x96\xE7\x95\x8C\n");

    EXPECT_EQ(*md.get_ints("test.arr_u8"), (std::vector<int64_t>{0, 1, 255}));
    EXPECT_EQ(*md.get_ints("test.arr_i8"), (std::vector<int64_t>{-128, 0, 127}));
    EXPECT_EQ(*md.get_ints("test.arr_u16"), (std::vector<int64_t>{0, 65535}));
    EXPECT_EQ(*md.get_ints("test.arr_i16"), (std::vector<int64_t>{-32768, 32767}));
    EXPECT_EQ(*md.get_ints("test.arr_u32"), (std::vector<int64_t>{0, 4294967295}));
    EXPECT_EQ(*md.get_ints("test.arr_i32"), (std::vector<int64_t>{-2147483648LL, 2147483647}));
    EXPECT_EQ(*md.get_ints("test.arr_i64"), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                                                  std::numeric_limits<int64_t>::max()}));
    const GgufValue* u64s = md.find("test.arr_u64");
    ASSERT_NE(u64s, nullptr);
    EXPECT_EQ(u64s->describe(), "ARRAY[U64, 2]");
    EXPECT_EQ(*u64s->at(1).to_uint(), std::numeric_limits<uint64_t>::max());
    EXPECT_FALSE(md.get_ints("test.arr_u64").has_value());  // 2^64 − 1 is no int64
    EXPECT_EQ(*md.get_floats("test.arr_f32"),
              (std::vector<double>{0.5, -1.25, static_cast<double>(3.0e38f)}));
    EXPECT_EQ(*md.get_floats("test.arr_f64"), (std::vector<double>{0.1, -1e300}));
    EXPECT_EQ(*md.find("test.arr_bool")->to_bools(), (std::vector<bool>{true, false, true}));
    EXPECT_EQ(*md.get_strings("test.arr_str"), (std::vector<std::string>{"a", "",
                                                                         "\xC3\xBCn\xC3\xAF"
                                                                         "c\xC3\xB6"
                                                                         "de",
                                                                         "tab\there"}));
    const GgufValue* nested = md.find("test.arr_nested");
    ASSERT_NE(nested, nullptr);
    EXPECT_EQ(nested->describe(), "ARRAY[ARRAY, 3]");
    ASSERT_EQ(nested->arrays().size(), 3u);
    EXPECT_EQ(nested->arrays()[0].strings(), (std::vector<std::string>{"x", "yy"}));
    EXPECT_EQ(nested->arrays()[1].strings(), (std::vector<std::string>{"z"}));
    EXPECT_EQ(nested->arrays()[2].strings(), (std::vector<std::string>{"", "w", "v"}));

    // Wrong types and missing keys name the file and the key.
    auto wrong = md.get_uint("test.string");
    ASSERT_FALSE(wrong.has_value());
    EXPECT_EQ(wrong.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(wrong.status().message().find(
                  "quants.gguf: key 'test.string': expected a non-negative integer, got STRING"),
              std::string::npos)
        << wrong.status().message();
    EXPECT_NE(md.get_strings("test.arr_u8").status().message().find("got ARRAY[U8, 3]"), std::string::npos);
    auto missing = md.get_string("qwen3moe.block_count");
    ASSERT_FALSE(missing.has_value());
    EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(missing.status().message().find("key 'qwen3moe.block_count' not found"), std::string::npos);
}

TEST_F(GgufQuantsFile, FindsTensorsWithShapesAndOffsets) {
    const std::vector<std::string> names = {
        "f32",  "f16",  "bf16", "q4_0", "q4_1",   "q5_0",   "q5_1",  "q8_0",
        "q4_K", "q5_K", "q6_K", "q8_K", "iq4_nl", "iq4_xs", "mxfp4", "mxfp4_all_scales"};
    ASSERT_EQ(file_->tensors().size(), names.size() + 2);
    const auto* base = file_->tensors().front().data - file_->header().data_start;
    uint64_t next_offset = 0;
    for (const GgufTensor& t : file_->tensors()) {
        SCOPED_TRACE(t.name);
        EXPECT_EQ(t.offset % 64, 0u);
        EXPECT_GE(t.offset, next_offset);  // in file order, not overlapping
        next_offset = t.offset + t.size_bytes;
        EXPECT_EQ(t.file_offset, file_->header().data_start + t.offset);
        EXPECT_EQ(t.data, base + t.file_offset);
        EXPECT_EQ(t.file_index, 0u);
        EXPECT_EQ(t.size_bytes, static_cast<uint64_t>(t.rows()) * t.row_bytes());
        EXPECT_EQ(file_->find(t.name), &t);
    }
    EXPECT_LE(next_offset + file_->header().data_start, file_->size_bytes());
    for (const std::string& name : names) {
        const GgufTensor* t = file_->find(name);
        ASSERT_NE(t, nullptr) << name;
        const std::string type_name = name == "mxfp4_all_scales" ? "mxfp4" : name;
        EXPECT_EQ(ggml_type_name(t->type), type_name);
        EXPECT_EQ(t->dims, (std::vector<int64_t>{512, 8}));  // GGUF order: row length first
        EXPECT_EQ(t->shape(), (std::vector<int64_t>{8, 512}));
        EXPECT_EQ(t->rows(), 8);
        EXPECT_EQ(t->cols(), 512);
    }
    const GgufTensor* q4k = file_->find("q4_K");
    EXPECT_EQ(q4k->row_bytes(), 2u * 144);
    EXPECT_EQ(describe(*q4k), "q4_K [8,512]");

    // A MoE layer's experts: [n_expert, rows, cols], each expert a contiguous slice.
    const GgufTensor* exps = file_->find("blk.0.ffn_up_exps");
    ASSERT_NE(exps, nullptr);
    EXPECT_EQ(exps->type, GgmlType::kQ4_K);
    EXPECT_EQ(exps->dims, (std::vector<int64_t>{256, 8, 4}));
    EXPECT_EQ(exps->shape(), (std::vector<int64_t>{4, 8, 256}));
    EXPECT_EQ(exps->rows(), 32);
    EXPECT_EQ(exps->size_bytes, 4u * 8 * 144);
    const GgufTensor* norm = file_->find("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->shape(), (std::vector<int64_t>{512}));
    EXPECT_EQ(norm->rows(), 1);
    EXPECT_EQ(file_->find("missing"), nullptr);
}

TEST_F(GgufQuantsFile, DequantizationIsGgufPysBitForBit) {
    int checked = 0;
    for (const GgufTensor& t : file_->tensors()) {
        SCOPED_TRACE(t.name);
        const kernels::GgmlFormat* f = kernels::ggml_format(static_cast<uint32_t>(t.type));
        ASSERT_NE(f, nullptr);
        auto expected = read_npy_f32(gguf_dir() + "/quants/" + t.name + ".npy");
        ASSERT_TRUE(expected.has_value());
        EXPECT_EQ(expected->shape, t.shape());
        ASSERT_EQ(expected->data.size(), static_cast<size_t>(t.numel()));
        std::vector<float> row(static_cast<size_t>(t.cols()));
        int64_t mismatches = 0;
        for (int64_t r = 0; r < t.rows(); ++r) {
            kernels::reference::ggml_dequantize_row(static_cast<kernels::GgmlType>(t.type),
                                                    t.data + r * t.row_bytes(), t.cols(), row.data());
            for (int64_t i = 0; i < t.cols(); ++i) {
                const float want = expected->data[static_cast<size_t>(r * t.cols() + i)];
                if (std::bit_cast<uint32_t>(row[i]) != std::bit_cast<uint32_t>(want)) {
                    if (++mismatches <= 3)
                        ADD_FAILURE()
                            << "row " << r << " col " << i << ": " << row[i] << " vs gguf-py " << want;
                }
            }
        }
        EXPECT_EQ(mismatches, 0);
        ++checked;
    }
    EXPECT_EQ(checked, 18);
    // Every format with kernels is covered by the fixture.
    for (const kernels::GgmlFormat& f : kernels::ggml_formats()) {
        bool found = false;
        for (const GgufTensor& t : file_->tensors())
            found |= static_cast<uint32_t>(t.type) == static_cast<uint32_t>(f.type);
        EXPECT_TRUE(found) << f.name;
    }
}

TEST(GgufFormats, KernelAndReaderTablesAgree) {
    for (const kernels::GgmlFormat& f : kernels::ggml_formats()) {
        SCOPED_TRACE(f.name);
        const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(f.type));
        ASSERT_NE(info, nullptr);
        EXPECT_STREQ(info->name, f.name);
        EXPECT_EQ(info->block_elems, static_cast<uint32_t>(f.block_elems));
        EXPECT_EQ(info->block_bytes, static_cast<uint32_t>(f.block_bytes));
    }
    for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 1000u})
        EXPECT_EQ(ggml_type_info(removed), nullptr);
    EXPECT_EQ(kernels::ggml_format(uint32_t{10}), nullptr);  // Q2_K: read, but no kernels yet
    EXPECT_EQ(kernels::e8m0_to_f32_half(0), std::ldexp(1.0f, -128));
    EXPECT_EQ(kernels::e8m0_to_f32_half(1), std::ldexp(1.0f, -127));
    EXPECT_EQ(kernels::e8m0_to_f32_half(127), 0.5f);
    EXPECT_EQ(kernels::e8m0_to_f32_half(255), std::ldexp(1.0f, 127));
}

// ---- the fast dot product against its twin ------------------------------------------------------

std::vector<uint8_t> random_row(kernels::GgmlType type, int64_t cols, std::mt19937& rng) {
    return testing::random_ggml_row(type, cols, rng);
}

// S of the tolerance (file comment): Σ over 32-element chunks of max|w| · Σ|x|.
double dot_bound(kernels::GgmlType type, const uint8_t* row, const float* x, int64_t cols) {
    std::vector<float> w(static_cast<size_t>(cols));
    kernels::reference::ggml_dequantize_row(type, row, cols, w.data());
    double s = 0.0;
    for (int64_t c = 0; c < cols; c += 32) {
        double wmax = 0.0, xsum = 0.0;
        for (int64_t i = c; i < c + 32; ++i) {
            wmax = std::max(wmax, static_cast<double>(std::fabs(w[i])));
            xsum += std::fabs(x[i]);
        }
        s += wmax * xsum;
    }
    return s;
}

template <typename Body>
void for_each_isa(Body body) {
    for (const std::string& isa : kernels::testing::supported_isas()) {
        SCOPED_TRACE("isa=" + isa);
        ASSERT_TRUE(kernels::testing::force_isa(isa));
        body(isa);
    }
    kernels::testing::force_isa("");
}

TEST(GgufDot, FastMatchesTheTwinOnEveryIsa) {
    std::mt19937 rng(26);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for_each_isa([&](const std::string& isa) {
        double worst = 0.0;
        for (const kernels::GgmlFormat& f : kernels::ggml_formats()) {
            if (!f.fast_dot) continue;
            SCOPED_TRACE(f.name);
            for (int64_t cols : {256, 512, 2048, 4096}) {
                for (int trial = 0; trial < 4; ++trial) {
                    const auto row = random_row(f.type, cols, rng);
                    // Rows and x at odd addresses: GGUF rows are only block-size aligned (Q8_0: 2 bytes).
                    std::vector<uint8_t> row_buf(row.size() + 1);
                    std::memcpy(row_buf.data() + 1, row.data(), row.size());
                    std::vector<float> x_buf(static_cast<size_t>(cols) + 1);
                    for (auto& v : x_buf) v = normal(rng);
                    const float* x = x_buf.data() + 1;
                    const uint8_t* r = row_buf.data() + 1;

                    const float twin = kernels::reference::ggml_vec_dot(f.type, r, x, cols);
                    const float fast = kernels::ggml_vec_dot(f.type, r, x, cols);
                    const double bound_sum = dot_bound(f.type, r, x, cols);
                    const double err = std::fabs(static_cast<double>(fast) - twin);
                    EXPECT_LE(err, 2e-6 * bound_sum)
                        << "cols " << cols << ": fast " << fast << " twin " << twin;
                    worst = std::max(worst, err / bound_sum);
                    if (isa == "portable") {
                        EXPECT_EQ(fast, twin);
                    }
                }
            }
        }
        std::cout << "[ gguf dot ] " << isa << ": worst |fast - twin| / S = " << worst << " (bound 2e-6)\n";
    });
}

TEST_F(GgufQuantsFile, FastDotOnTheFixtureRows) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(512);
    for (auto& v : x) v = normal(rng);
    for_each_isa([&](const std::string&) {
        for (const GgufTensor& t : file_->tensors()) {
            const kernels::GgmlFormat* f = kernels::ggml_format(static_cast<uint32_t>(t.type));
            if (!f->fast_dot || t.name == "mxfp4_all_scales" || t.cols() != 512)
                continue;  // (that one holds inf)
            SCOPED_TRACE(t.name);
            for (int64_t r = 0; r < t.rows(); ++r) {
                const uint8_t* row = t.data + r * t.row_bytes();
                const float twin = kernels::reference::ggml_vec_dot(f->type, row, x.data(), 512);
                const float fast = kernels::ggml_vec_dot(f->type, row, x.data(), 512);
                EXPECT_NEAR(fast, twin, 2e-6 * dot_bound(f->type, row, x.data(), 512));
            }
        }
    });
}

// ---- ggml formats as weights: every linear op (kernels.h) over a kGgml* view --------------------

// What the model binds a GGUF tensor to (kernels/weight_format.h): every ggml block type the registry
// holds runs dequantize_row (bit for bit the definition), matvec (the fast dot, within the dot's bound
// of the double-summed reference), matvec_batch and matvec_jobs (bit for bit matvec, whatever n and
// the other jobs) and matmul (the definition's weights in f32 GEMM tiles: within the same bound), on
// every ISA and with and without a pool.
TEST(GgufLinear, EveryOpOverEveryBlockFormatOnEveryIsa) {
    std::mt19937 rng(261);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ThreadPool two{2};
    const int64_t rows = 37, cols = 512, n = 5;
    int formats = 0;
    for (const kernels::WeightFormat& f : kernels::weight_formats()) {
        if (!f.ggml_blocks() || f.row_tiles()) continue;  // tiles: ggml_tiles_test.cpp
        ++formats;
        SCOPED_TRACE(f.name);
        ASSERT_EQ(kernels::ggml_weight_format(static_cast<uint32_t>(f.ggml)), &f);
        std::vector<uint8_t> data;
        for (int64_t r = 0; r < rows; ++r) {
            const auto row = random_row(f.ggml, cols, rng);
            data.insert(data.end(), row.begin(), row.end());
        }
        // One byte in: GGUF rows are only block aligned.
        std::vector<uint8_t> buf(data.size() + 1);
        std::memcpy(buf.data() + 1, data.data(), data.size());
        kernels::WeightView w;
        w.type = f.type;
        w.rows = rows;
        w.cols = cols;
        w.data = buf.data() + 1;
        ASSERT_EQ(w.row_bytes(), kernels::ggml_row_bytes(kernels::ggml_format(f.ggml), cols));
        std::vector<float> x(static_cast<size_t>(n * cols));
        for (auto& v : x) v = normal(rng);
        std::vector<float> ref(static_cast<size_t>(n * rows)), row(cols), ref_row(cols);
        kernels::reference::matmul(w, x.data(), n, ref.data(), nullptr);
        for (int64_t r = 0; r < rows; ++r) {
            kernels::reference::dequantize_row(w, r, ref_row.data());
            for (int64_t i = 0; i < cols; i += 97) ASSERT_EQ(ref_row[i], f.reference_element(w, r, i));
        }
        for_each_isa([&](const std::string&) {
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
                std::vector<float> one(static_cast<size_t>(rows)), batch(static_cast<size_t>(n * rows)),
                    jobs_y(static_cast<size_t>(2 * n * rows)), mm(static_cast<size_t>(n * rows));
                kernels::matvec_batch(w, x.data(), n, batch.data(), pool);
                const kernels::MatvecJob jobs[2] = {{&w, x.data(), n, jobs_y.data()},
                                                    {&w, x.data() + cols, 1, jobs_y.data() + n * rows}};
                kernels::matvec_jobs(jobs, 2, pool);
                kernels::matmul(w, x.data(), n, mm.data(), pool);
                for (int64_t t = 0; t < n; ++t) {
                    kernels::matvec(w, x.data() + t * cols, one.data(), pool);
                    for (int64_t r = 0; r < rows; ++r) {
                        const uint8_t* wr = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
                        const double bound = 2e-6 * dot_bound(f.ggml, wr, x.data() + t * cols, cols);
                        const size_t at = static_cast<size_t>(t * rows + r);
                        ASSERT_NEAR(one[r], ref[at], bound) << "matvec row " << r << " vector " << t;
                        ASSERT_EQ(batch[at], one[r]) << "matvec_batch row " << r << " vector " << t;
                        ASSERT_EQ(jobs_y[at], one[r]) << "matvec_jobs row " << r << " vector " << t;
                        ASSERT_NEAR(mm[at], ref[at], bound) << "matmul row " << r << " token " << t;
                    }
                }
                ASSERT_EQ(std::vector<float>(jobs_y.begin() + n * rows, jobs_y.begin() + n * rows + rows),
                          std::vector<float>(batch.begin() + rows, batch.begin() + 2 * rows));
                kernels::dequantize_row(w, rows - 1, row.data());
                kernels::reference::dequantize_row(w, rows - 1, ref_row.data());
                ASSERT_EQ(row, ref_row);
            }
        });
    }
    EXPECT_EQ(formats, 11);
}

// ---- int8 activations (kernels.h, Activations::kInt8) over every block format -----------------------
//
// The definition is reference::ggml_vec_dot_int8 (x quantised per block of 32; per weight sub-block the
// integer Σ code·q, scaled by the sub-block's scale and x's d, summed in double). Tolerances:
//   - the fast products against the definition: |fast − def| ≤ 2e-6 · S8, S8 = Σ_s (|scale_s|·d_b·Σ|code·q|
//     + |bias_s|·d_b·Σ|q|) (the sum of the magnitudes every partial sum is made of). The integer sums are
//     exact, so only f32 roundings remain: a lane's scale product, its FMA into the lane accumulator and
//     the horizontal sum, each relative to a partial sum below S8. The test prints the observed worst
//     (4.3e-8 of S8 on AVX-2, 5.2e-8 on AVX-512 VNNI, rows of up to 4096: a ~40× margin) — while one wrong
//     code, nibble, offset or scale moves a product by ~d·|q| ≳ 1e-4 of S8;
//   - the portable path is the definition, bit for bit; matvec_batch and matvec_jobs are matvec bit for bit
//     (whatever n, the other jobs, and a job sharing x's preparation with another type); matmul within
//     the fast bound;
//   - against the f32 product (reference::matmul with f32 activations): the activation's rounding,
//     |int8 − f32| ≤ Σ_b d_b/2 · Σ_{i∈b} |w_i| plus both products' own roundings (2e-6 of S8 and of the
//     f32 dot's S). Printed as the worst share of that bound used (0.31: the rounding errors of a block's
//     32 inputs are independent and partly cancel).

// x quantised as the definition says (the bounds need q and d).
void quantize_x(const float* x, int64_t cols, std::vector<int8_t>& q, std::vector<float>& d) {
    q.resize(static_cast<size_t>(cols));
    d.resize(static_cast<size_t>(cols / 32));
    for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
        d[b] = amax / 127.0f;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t i = 0; i < 32; ++i)
            q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(x[b * 32 + i] * id));
    }
}

// S8 of the fast bound (above).
double int8_bound_sum(kernels::GgmlType type, const uint8_t* row, const float* x, int64_t cols) {
    const kernels::GgmlFormat& f = kernels::ggml_format(type);
    const int sub = kernels::ggml_int8_sub_elems(type);
    std::vector<int8_t> q;
    std::vector<float> d;
    quantize_x(x, cols, q, d);
    int8_t codes[256];
    float scales[16], biases[16];
    double s = 0.0;
    for (int64_t i = 0; i < cols / f.block_elems; ++i) {
        kernels::reference::ggml_block_codes(type, row + i * f.block_bytes, codes, scales, biases);
        for (int e = 0; e < f.block_elems; ++e) {
            const int64_t at = i * f.block_elems + e;
            const double dx = d[static_cast<size_t>(at / 32)], qa = std::abs(q[static_cast<size_t>(at)]);
            s += std::fabs(scales[e / sub]) * dx * std::abs(codes[e]) * qa +
                 std::fabs(biases[e / sub]) * dx * qa;
        }
    }
    return s;
}

// Σ_b d_b/2 · Σ_{i∈b} |w_i|: how far x's rounding can move the product.
double activation_rounding_bound(kernels::GgmlType type, const uint8_t* row, const float* x, int64_t cols) {
    std::vector<float> w(static_cast<size_t>(cols));
    kernels::reference::ggml_dequantize_row(type, row, cols, w.data());
    std::vector<int8_t> q;
    std::vector<float> d;
    quantize_x(x, cols, q, d);
    double s = 0.0;
    for (int64_t i = 0; i < cols; ++i) s += 0.5 * d[static_cast<size_t>(i / 32)] * std::fabs(w[i]);
    return s;
}

kernels::WeightView int8_view(const kernels::WeightFormat& f, int64_t rows, int64_t cols,
                              const uint8_t* data) {
    kernels::WeightView w;
    w.type = f.type;
    w.rows = rows;
    w.cols = cols;
    w.data = data;
    w.activations = kernels::Activations::kInt8;
    return w;
}

// Rows of random blocks, one byte in (GGUF rows are only block aligned).
std::vector<uint8_t> random_rows(kernels::GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::vector<uint8_t> buf(1);
    for (int64_t r = 0; r < rows; ++r) {
        const auto row = random_row(type, cols, rng);
        buf.insert(buf.end(), row.begin(), row.end());
    }
    return buf;
}

TEST(GgufInt8, EveryBlockFormatHasIntegerKernels) {
    int formats = 0;
    for (const kernels::WeightFormat& f : kernels::weight_formats()) {
        if (!f.ggml_blocks() || f.row_tiles()) continue;  // tiles: ggml_tiles_test.cpp
        ++formats;
        EXPECT_TRUE(f.int8_kernels) << f.name;
        kernels::WeightView w = int8_view(f, 1, 256, nullptr);
        EXPECT_TRUE(w.int8_activations()) << f.name << ": group_size 0 is a ggml block's own";
        w.activations = kernels::Activations::kF32;
        EXPECT_FALSE(w.int8_activations()) << f.name;
    }
    EXPECT_EQ(formats, 11);
}

// The integer form of a block is the definition: scale_s·code + bias_s is the dequantised element, bit for
// bit.
TEST(GgufInt8, BlockCodesAreTheDequantisation) {
    std::mt19937 rng(18);
    for (const kernels::GgmlFormat& f : kernels::ggml_formats()) {
        if (f.block_elems == 1 || f.type == kernels::GgmlType::kQ8_K) continue;
        SCOPED_TRACE(f.name);
        const int sub = kernels::ggml_int8_sub_elems(f.type);
        for (int trial = 0; trial < 8; ++trial) {
            const auto row = random_row(f.type, f.block_elems, rng);
            std::vector<float> want(static_cast<size_t>(f.block_elems));
            kernels::reference::ggml_dequantize_row(f.type, row.data(), f.block_elems, want.data());
            int8_t codes[256];
            float scales[16], biases[16];
            kernels::reference::ggml_block_codes(f.type, row.data(), codes, scales, biases);
            for (int e = 0; e < f.block_elems; ++e) {
                const float scaled = scales[e / sub] * static_cast<float>(codes[e]);
                ASSERT_EQ(scaled + biases[e / sub], want[static_cast<size_t>(e)]) << "element " << e;
            }
        }
    }
}

// x's quantisation is the definition's on every ISA, element by element: a Q8_0 identity (row r has code 1
// at column r, d = 1) returns d_b·q_r exactly, with x's ties (k + 0.5 after scaling) rounded to even.
TEST(GgufInt8, EveryIsaQuantisesXAsTheDefinition) {
    const int64_t n = 160;  // 5 blocks: an odd count leaves AVX-512 a lone block
    const kernels::WeightFormat& f =
        *kernels::ggml_weight_format(static_cast<uint32_t>(kernels::GgmlType::kQ8_0));
    std::vector<uint8_t> data(static_cast<size_t>(n * f.data_row_bytes(n)), 0);
    const uint16_t one = kernels::f32_to_f16(1.0f);
    for (int64_t r = 0; r < n; ++r) {
        uint8_t* row = data.data() + r * f.data_row_bytes(n);
        for (int64_t b = 0; b < n / 32; ++b) std::memcpy(row + b * 34, &one, 2);
        row[r / 32 * 34 + 2 + r % 32] = 1;
    }
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng);
    for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(32 + i)] = static_cast<float>(i % 8) - 3.5f;
    x[63] = 127.0f;  // block 1: d = 1, so its other inputs are ties
    x[64] = 0.0f;
    for (int64_t i = 96; i < 128; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
    const kernels::WeightView w = int8_view(f, n, n, data.data());
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    kernels::reference::matvec(w, x.data(), want.data(), nullptr);
    EXPECT_EQ(want[33], -2.0f);  // −2.5 → −2
    EXPECT_EQ(want[37], 2.0f);   // 1.5 → 2
    EXPECT_EQ(want[38], 2.0f);   // 2.5 → 2
    for_each_isa([&](const std::string&) {
        kernels::matvec(w, x.data(), got.data(), nullptr);
        for (int64_t r = 0; r < n; ++r) ASSERT_EQ(got[r], want[r]) << "input " << r;
    });
}

TEST(GgufInt8, FastMatchesTheDefinitionOnEveryIsa) {
    std::mt19937 rng(27);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for_each_isa([&](const std::string& isa) {
        double worst = 0.0;
        for (const kernels::WeightFormat& f : kernels::weight_formats()) {
            if (!f.ggml_blocks() || f.row_tiles()) continue;  // tiles: ggml_tiles_test.cpp
            SCOPED_TRACE(f.name);
            std::vector<int64_t> shapes = {256, 512, 2048, 4096};
            if (f.block_elems == 32) shapes.insert(shapes.end(), {32, 96, 288});  // lone trailing blocks
            for (int64_t cols : shapes) {
                const int64_t rows = 6;
                const auto buf = random_rows(f.ggml, rows, cols, rng);
                const kernels::WeightView w = int8_view(f, rows, cols, buf.data() + 1);
                std::vector<float> x_buf(static_cast<size_t>(cols) + 1);
                for (auto& v : x_buf) v = normal(rng);
                const float* x = x_buf.data() + 1;
                std::vector<float> def(static_cast<size_t>(rows)), fast(static_cast<size_t>(rows));
                kernels::reference::matvec(w, x, def.data(), nullptr);
                kernels::matvec(w, x, fast.data(), nullptr);
                for (int64_t r = 0; r < rows; ++r) {
                    const auto* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
                    const double s8 = int8_bound_sum(f.ggml, row, x, cols);
                    const double err = std::fabs(static_cast<double>(fast[r]) - def[r]);
                    EXPECT_LE(err, 2e-6 * s8) << "cols " << cols << " row " << r;
                    worst = std::max(worst, err / s8);
                    if (isa == "portable") {
                        EXPECT_EQ(fast[r], def[r]) << "cols " << cols << " row " << r;
                    }
                }
            }
        }
        std::cout << "[ gguf int8 ] " << isa << " (" << kernels::cpu_int8_kernel_isa()
                  << "): worst |fast - definition| / S8 = " << worst << " (bound 2e-6)\n";
    });
}

// Every linear op with int8 activations, as GgufLinear does with f32 ones: matvec against the definition,
// matvec_batch and matvec_jobs bit for bit matvec (11 vectors: passes of the row kernels and two calls of
// kRowVectors), matmul (11 tokens: the blocked loop) within the bound, and the whole against the f32
// product within the activation's rounding; on every ISA, with and without a pool.
TEST(GgufInt8, EveryOpOverEveryBlockFormatOnEveryIsa) {
    std::mt19937 rng(262);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    ThreadPool two{2};
    const int64_t rows = 37, n = 11;
    const kernels::WeightFormat& q8 =
        *kernels::ggml_weight_format(static_cast<uint32_t>(kernels::GgmlType::kQ8_0));
    double worst_fast = 0.0, worst_act = 0.0;
    for (const kernels::WeightFormat& f : kernels::weight_formats()) {
        if (!f.ggml_blocks() || f.row_tiles()) continue;  // tiles: ggml_tiles_test.cpp
        for (int64_t cols : {int64_t{512}, int64_t{f.block_elems == 32 ? 288 : 768}}) {
            SCOPED_TRACE(std::string(f.name) + " cols " + std::to_string(cols));
            const auto buf = random_rows(f.ggml, rows, cols, rng);
            const kernels::WeightView w = int8_view(f, rows, cols, buf.data() + 1);
            ASSERT_TRUE(w.int8_activations());
            // A Q8_0 job on the same x: its preparation is shared with w's (one x form for every type).
            const auto other_buf = random_rows(kernels::GgmlType::kQ8_0, 5, cols, rng);
            const kernels::WeightView other = int8_view(q8, 5, cols, other_buf.data() + 1);
            std::vector<float> x(static_cast<size_t>(n * cols));
            for (auto& v : x) v = normal(rng);
            std::vector<float> def(static_cast<size_t>(n * rows)), exact(static_cast<size_t>(n * rows));
            kernels::reference::matmul(w, x.data(), n, def.data(), nullptr);
            kernels::WeightView w_f32 = w;
            w_f32.activations = kernels::Activations::kF32;
            kernels::reference::matmul(w_f32, x.data(), n, exact.data(), nullptr);
            for_each_isa([&](const std::string&) {
                for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
                    std::vector<float> one(static_cast<size_t>(rows)), batch(static_cast<size_t>(n * rows)),
                        jobs_y(static_cast<size_t>(n * rows)), other_y(static_cast<size_t>(n * 5)),
                        other_one(5), mm(static_cast<size_t>(n * rows));
                    kernels::matvec_batch(w, x.data(), n, batch.data(), pool);
                    const kernels::MatvecJob jobs[2] = {{&w, x.data(), n, jobs_y.data()},
                                                        {&other, x.data(), n, other_y.data()}};
                    kernels::matvec_jobs(jobs, 2, pool);
                    kernels::matmul(w, x.data(), n, mm.data(), pool);
                    for (int64_t t = 0; t < n; ++t) {
                        const float* xt = x.data() + t * cols;
                        kernels::matvec(w, xt, one.data(), pool);
                        kernels::matvec(other, xt, other_one.data(), pool);
                        for (int64_t r = 0; r < 5; ++r)
                            ASSERT_EQ(other_y[static_cast<size_t>(t * 5 + r)], other_one[r])
                                << "Q8_0 job, vector " << t;
                        for (int64_t r = 0; r < rows; ++r) {
                            const uint8_t* wr = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
                            const size_t at = static_cast<size_t>(t * rows + r);
                            const double s8 = int8_bound_sum(f.ggml, wr, xt, cols);
                            ASSERT_NEAR(one[r], def[at], 2e-6 * s8) << "matvec row " << r << " vector " << t;
                            ASSERT_EQ(batch[at], one[r]) << "matvec_batch row " << r << " vector " << t;
                            ASSERT_EQ(jobs_y[at], one[r]) << "matvec_jobs row " << r << " vector " << t;
                            ASSERT_NEAR(mm[at], def[at], 2e-6 * s8) << "matmul row " << r << " token " << t;
                            worst_fast =
                                std::max(worst_fast, std::fabs(static_cast<double>(one[r]) - def[at]) / s8);
                            const double act = activation_rounding_bound(f.ggml, wr, xt, cols) + 2e-6 * s8 +
                                               2e-6 * dot_bound(f.ggml, wr, xt, cols);
                            const double moved = std::fabs(static_cast<double>(one[r]) - exact[at]);
                            ASSERT_LE(moved, act) << "against f32 activations, row " << r << " vector " << t;
                            worst_act = std::max(worst_act, moved / act);
                        }
                    }
                }
            });
        }
    }
    std::cout << "[ gguf int8 ] every op: worst |fast - definition| / S8 = " << worst_fast
              << " (bound 2e-6); worst |int8 - f32| / activation bound = " << worst_act << " (bound 1)\n";
}

// GGUF's Q4_0, Q4_1 and Q8_0 as the MLX affine 4/8-bit they exactly are (kernels/quantize.h): every weight
// of the converted view is the block format's, bit for bit, by each format's reference definition.
TEST(GgufAsMlxAffine, Q4_0Q4_1AndQ8_0ConvertExactly) {
    std::mt19937 rng(262);
    for (kernels::GgmlType g :
         {kernels::GgmlType::kQ4_0, kernels::GgmlType::kQ4_1, kernels::GgmlType::kQ8_0}) {
        const kernels::WeightFormat* f = kernels::ggml_weight_format(static_cast<uint32_t>(g));
        for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{5, 96}, {3, 4096}}) {
            SCOPED_TRACE(std::string(f->name) + " " + std::to_string(rows) + "x" + std::to_string(cols));
            std::vector<uint8_t> data;
            for (int64_t r = 0; r < rows; ++r) {
                const auto row = random_row(g, cols, rng);
                data.insert(data.end(), row.begin(), row.end());
            }
            kernels::WeightView w;
            w.type = f->type;
            w.rows = rows;
            w.cols = cols;
            w.data = data.data();
            kernels::MlxAffineRows mlx;
            ASSERT_TRUE(kernels::ggml_as_mlx_affine(w, &mlx));
            EXPECT_EQ(mlx.view.type,
                      g == kernels::GgmlType::kQ8_0 ? kernels::WeightType::kQ8 : kernels::WeightType::kQ4);
            EXPECT_EQ(mlx.view.group_size, 32);
            std::vector<float> a(cols), b(cols);
            for (int64_t r = 0; r < rows; ++r) {
                kernels::reference::dequantize_row(w, r, a.data());
                kernels::reference::dequantize_row(mlx.view, r, b.data());
                for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(a[i], b[i]) << "row " << r << " col " << i;
            }
        }
    }
    // Another type, and a Q8_0 block whose bias −128·d would not fit f16: not converted.
    std::vector<uint8_t> k = random_row(kernels::GgmlType::kQ4_K, 256, rng);
    kernels::WeightView w;
    w.type = kernels::WeightType::kGgmlQ4_K;
    w.rows = 1;
    w.cols = 256;
    w.data = k.data();
    kernels::MlxAffineRows mlx;
    EXPECT_FALSE(kernels::ggml_as_mlx_affine(w, &mlx));
    std::vector<uint8_t> q8 = random_row(kernels::GgmlType::kQ8_0, 32, rng);
    const uint16_t big = kernels::f32_to_f16(1000.0f);
    std::memcpy(q8.data(), &big, 2);
    w.type = kernels::WeightType::kGgmlQ8_0;
    w.cols = 32;
    w.data = q8.data();
    EXPECT_FALSE(kernels::ggml_as_mlx_affine(w, &mlx));
}

// ---- split files ------------------------------------------------------------------------------

TEST(GgufSplit, OpensEveryFileFromTheFirst) {
    auto ckpt = GgufCheckpoint::open(gguf_dir() + "/split-00001-of-00002.gguf");
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    const GgufCheckpoint& c = **ckpt;
    ASSERT_EQ(c.files().size(), 2u);
    EXPECT_EQ(c.size(), 4u);
    EXPECT_EQ(*c.metadata().get_string("general.name"), "split fixture");
    EXPECT_EQ(*c.metadata().get_uint("sluice-test.block_count"), 2u);
    EXPECT_EQ(*c.metadata().get_uint("split.count"), 2u);

    const GgufTensor* emb = c.find("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->file_index, 0u);
    EXPECT_EQ(emb->shape(), (std::vector<int64_t>{4, 64}));
    for (int i = 0; i < 256; ++i) {
        float v;
        std::memcpy(&v, emb->data + 4 * i, 4);
        ASSERT_EQ(v, static_cast<float>(i));
    }
    const GgufTensor* out = c.find("output.weight");
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->file_index, 1u);
    EXPECT_EQ(out->shape(), (std::vector<int64_t>{2, 64}));
    for (int i = 0; i < 128; ++i) {
        float v;
        std::memcpy(&v, out->data + 4 * i, 4);
        ASSERT_EQ(v, -static_cast<float>(i));
    }
    const GgufTensor* down = c.find("blk.1.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, GgmlType::kQ8_0);
    EXPECT_EQ(down->file_index, 1u);
    std::vector<float> row(64);
    kernels::reference::ggml_dequantize_row(kernels::GgmlType::kQ8_0, down->data + down->row_bytes(), 64,
                                            row.data());
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(row[i], (64 + i) / 256.0f, 1.0f / 256);  // Q8_0 of index/256
    ASSERT_EQ(c.tensors().size(), 4u);
    EXPECT_EQ(c.tensors()[0]->name, "token_embd.weight");
    EXPECT_EQ(c.tensors()[3]->name, "output.weight");
    EXPECT_EQ(c.total_bytes(), 4u * 64 * 4 + 64 * 2 + 4 * 2 * 34 + 2 * 64 * 4);
}

TEST(GgufSplit, RefusesWhatDoesNotAddUp) {
    // The second file named directly.
    auto second = GgufCheckpoint::open(gguf_dir() + "/split-00002-of-00002.gguf");
    ASSERT_FALSE(second.has_value());
    EXPECT_NE(second.status().message().find("is split 2 of 2: open the first, '" + gguf_dir() +
                                             "/split-00001-of-00002.gguf'"),
              std::string::npos)
        << second.status().message();

    TempDir dir;
    const std::string first = read_bytes(gguf_dir() + "/split-00001-of-00002.gguf");
    const std::string last = read_bytes(gguf_dir() + "/split-00002-of-00002.gguf");
    // The folder holding one first split opens it; a missing second file names itself.
    dir.write("m-00001-of-00002.gguf", first);
    auto missing = GgufCheckpoint::open(dir.path());
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.status().message().find("split 2 of 2"), std::string::npos)
        << missing.status().message();
    EXPECT_NE(missing.status().message().find("m-00002-of-00002.gguf"), std::string::npos);
    dir.write("m-00002-of-00002.gguf", last);
    auto both = GgufCheckpoint::open(dir.path());
    ASSERT_TRUE(both.has_value()) << both.status().message();
    EXPECT_EQ((*both)->size(), 4u);

    // A first split whose name does not say so.
    dir.write("renamed.gguf", first);
    auto renamed = GgufCheckpoint::open(dir.file("renamed.gguf"));
    ASSERT_FALSE(renamed.has_value());
    EXPECT_NE(renamed.status().message().find("does not end in '-00001-of-00002.gguf'"), std::string::npos);

    // A second file that is really the first (split.no 0).
    TempDir dup;
    dup.write("d-00001-of-00002.gguf", first);
    dup.write("d-00002-of-00002.gguf", first);
    auto wrong_no = GgufCheckpoint::open(dup.file("d-00001-of-00002.gguf"));
    ASSERT_FALSE(wrong_no.has_value());
    EXPECT_NE(wrong_no.status().message().find("key 'split.no' is 0, expected 1"), std::string::npos)
        << wrong_no.status().message();
}

TEST(GgufSplit, ASingleFileOrFolder) {
    TempDir dir;
    dir.write("model.gguf", valid_file().bytes());
    for (const std::string& path : {dir.path(), dir.file("model.gguf")}) {
        auto c = GgufCheckpoint::open(path);
        ASSERT_TRUE(c.has_value()) << c.status().message();
        EXPECT_EQ((*c)->files().size(), 1u);
        ASSERT_NE((*c)->find("t"), nullptr);
    }
    dir.write("other.gguf", valid_file().bytes());
    auto two = GgufCheckpoint::open(dir.path());
    ASSERT_FALSE(two.has_value());
    EXPECT_NE(two.status().message().find("holds 2 .gguf files"), std::string::npos);
    TempDir empty;
    EXPECT_EQ(GgufCheckpoint::open(empty.path()).status().code(), ErrorCode::kNotFound);
    EXPECT_EQ(GgufCheckpoint::open(empty.file("nope.gguf")).status().code(), ErrorCode::kNotFound);
}

// ---- hostile files ----------------------------------------------------------------------------

TEST(GgufHostile, TheValidBaseParses) {
    const std::string bytes = valid_file().bytes();  // the tensors point into it
    auto h = parse(bytes);
    ASSERT_TRUE(h.has_value()) << h.status().message();
    ASSERT_EQ(h->tensors.size(), 1u);
    EXPECT_EQ(h->tensors[0].shape(), (std::vector<int64_t>{2, 8}));
    EXPECT_EQ(h->data_start % 32, 0u);
    float v;
    std::memcpy(&v, h->tensors[0].data + 15 * 4, 4);
    EXPECT_EQ(v, 15.0f);
    Built v2 = valid_file();
    v2.version = 2;
    EXPECT_TRUE(parse(v2.bytes()).has_value());
}

TEST(GgufHostile, TruncatedAnywhereIsAnErrorNamingTheProblem) {
    const std::string bytes = read_bytes(gguf_dir() + "/quants.gguf");
    auto full = parse(bytes);
    ASSERT_TRUE(full.has_value()) << full.status().message();
    const uint64_t data_start = full->data_start;
    // Every prefix of the header, and the data section cut short by one byte per tensor.
    std::vector<size_t> cuts;
    for (size_t n = 0; n < data_start; ++n) cuts.push_back(n);
    for (const GgufTensor& t : full->tensors) cuts.push_back(t.file_offset + t.size_bytes - 1);
    for (size_t n : cuts) {
        const std::string msg = error_of(bytes.substr(0, n));
        const bool names_it = msg.find("truncated") != std::string::npos ||
                              msg.find("run past the end") != std::string::npos ||
                              msg.find("past the end of the") != std::string::npos ||
                              msg.find("remain before the end of the file") != std::string::npos;
        ASSERT_TRUE(names_it) << "cut at " << n << ": " << msg;
        if (n >= data_start) {
            EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
        }
    }
    // A prefix of a longer file (what a ranged download would hold): short of the header it says so;
    // with the whole header the tensors are known, without data pointers.
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    auto part = parse_gguf_header(std::span<const uint8_t>(p, 100), bytes.size(), "t.gguf");
    ASSERT_FALSE(part.has_value());
    EXPECT_NE(part.status().message().find("only the first 100 bytes of the file were given"),
              std::string::npos)
        << part.status().message();
    auto header_only = parse_gguf_header(std::span<const uint8_t>(p, data_start), bytes.size(), "t.gguf");
    ASSERT_TRUE(header_only.has_value()) << header_only.status().message();
    EXPECT_EQ(header_only->tensors.size(), full->tensors.size());
    EXPECT_EQ(header_only->tensors[3].data, nullptr);
    EXPECT_EQ(header_only->tensors[3].file_offset, full->tensors[3].file_offset);
}

TEST(GgufHostile, EveryByteOfTheHeaderFlippedNeverCrashes) {
    const std::string bytes = read_bytes(gguf_dir() + "/quants.gguf");
    const uint64_t data_start = parse(bytes)->data_start;
    int ok = 0, refused = 0;
    for (size_t i = 0; i < data_start; ++i) {
        for (uint8_t flip : {0x01, 0x80, 0xFF}) {
            std::string mutated = bytes;
            mutated[i] = static_cast<char>(mutated[i] ^ flip);
            auto h = parse(mutated);
            if (!h.has_value()) {
                ++refused;
                continue;
            }
            ++ok;
            const auto* base = reinterpret_cast<const uint8_t*>(mutated.data());
            for (const GgufTensor& t : h->tensors) {  // whatever parses lies inside the file
                ASSERT_GE(t.data, base + h->data_start) << t.name;
                ASSERT_LE(t.data + t.size_bytes, base + mutated.size()) << t.name;
            }
        }
    }
    EXPECT_GT(refused, 0);
    EXPECT_GT(ok, 0);  // values and padding may change harmlessly
}

TEST(GgufHostile, EachBrokenFieldIsNamed) {
    struct Case {
        const char* what;
        std::function<void(Built&)> breaks;
        const char* message;
    };
    const uint64_t huge = uint64_t{1} << 62;
    auto nested = [](int depth) {
        std::string v = le32(4) + le64(0);  // the innermost: an empty U32 array
        for (int d = 0; d < depth; ++d) v = le32(9) + le64(1) + v;
        return gstr("deep") + le32(9) + v;
    };
    const std::vector<Case> cases = {
        {"no tensors", [](Built& b) { b.tensors.clear(); }, nullptr},  // valid: trailing bytes are allowed
        {"version 1", [](Built& b) { b.version = 1; }, "GGUF version 1 is not supported"},
        {"version 4", [](Built& b) { b.version = 4; }, "unsupported GGUF version 4"},
        {"big-endian", [](Built& b) { b.version = 0x03000000; }, "looks byte-swapped"},
        {"kv count", [&](Built& b) { b.n_kv = huge; },
         "metadata count 4611686018427387904 needs at least 14 bytes each"},
        {"tensor count", [&](Built& b) { b.n_tensors = huge; },
         "tensor count 4611686018427387904 needs at least 25 bytes each"},
        {"kv count + 1", [](Built& b) { b.n_kv = 3; }, "tensor 0 name length"},
        {"tensor count + 1", [](Built& b) { b.n_tensors = 2; }, "tensor 1 has an empty name"},
        {"key length", [&](Built& b) { b.kvs[0] = le64(uint64_t{1} << 63) + "x"; },
         "key 0 length 9223372036854775808 exceeds the 65536-byte limit"},
        {"string length", [&](Built& b) { b.kvs[0] = gstr("k") + le32(8) + le64(huge) + "abc"; },
         "truncated: key 'k' string of length 4611686018427387904 needs"},
        {"empty key", [](Built& b) { b.kvs[0] = gstr("") + le32(4) + le32(1); }, "key 0 is empty"},
        {"duplicate key", [](Built& b) { b.kvs[1] = kv_u32("general.architecture", 1); },
         "key 'general.architecture' appears twice"},
        {"value type", [](Built& b) { b.kvs[1] = gstr("k") + le32(13) + le32(0); },
         "key 'k' has unknown value type 13"},
        {"array element type", [](Built& b) { b.kvs[1] = gstr("k") + le32(9) + le32(99) + le64(1); },
         "key 'k': unknown array element type 99"},
        {"array count", [&](Built& b) { b.kvs[1] = gstr("k") + le32(9) + le32(4) + le64(huge); },
         "key 'k': array of 4611686018427387904 U32 needs at least 4 bytes each"},
        {"string array count", [&](Built& b) { b.kvs[1] = gstr("k") + le32(9) + le32(8) + le64(huge); },
         "array of 4611686018427387904 STRING"},
        {"nesting", [&](Built& b) { b.kvs[1] = nested(9); }, "arrays nested deeper than 8"},
        {"nesting 8 deep", [&](Built& b) { b.kvs[1] = nested(7); }, nullptr},
        {"alignment type", [](Built& b) { b.kvs[1] = gstr("general.alignment") + le32(10) + le64(64); },
         "key 'general.alignment': expected U32, got U64"},
        {"alignment 48", [](Built& b) { b.kvs[1] = kv_u32("general.alignment", 48); },
         "key 'general.alignment': 48 is not a power of two"},
        {"alignment 0", [](Built& b) { b.kvs[1] = kv_u32("general.alignment", 0); },
         "0 is not a power of two"},
        {"ggml type",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, 2}, 99, 0);
         },
         "tensor 't' has unknown ggml type 99"},
        {"removed ggml type",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, 2}, 4, 0);
         },
         "tensor 't' has unknown ggml type 4"},
        {"n_dims",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {1, 1, 1, 1, 1}, 0, 0);
         },
         "tensor 't' has 5 dims, ggml tensors have at most 4"},
        {"negative dim",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, uint64_t(-2)}, 0, 0);
         },
         "tensor 't' dim 1 is negative (-2)"},
        {"dims overflow",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0);
         },
         "tensor 't' dims {1099511627776,1099511627776}: the element count overflows"},
        {"dims overflow past a zero",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {0, uint64_t{1} << 42, uint64_t{1} << 42}, 0, 0);
         },
         "the element count overflows"},
        {"byte size overflow",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {256, uint64_t{1} << 54}, 15, 0);
         },
         "the byte size overflows"},
        {"partial block",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {33, 1}, 2, 0);
         },
         "tensor 't' dims {33,1}: the row of 33 elements is not a whole number of q4_0 blocks of 32"},
        {"past the end",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, 2}, 0, 1024);
         },
         "tensor 't' f32 [2,8]: its 64 bytes at data offset 1024 run past the end of the data section"},
        {"offset overflow",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, 2}, 0, uint64_t(-32));
         },
         "run past the end of the data section"},
        {"too big",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, 3}, 0, 0);
         },
         "its 96 bytes at data offset 0 run past the end"},
        {"misaligned",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {8, 1}, 0, 16);
         },
         "tensor 't' offset 16 is not a multiple of the alignment 32"},
        {"duplicate tensor", [](Built& b) { b.tensors.push_back(tensor_info("t", {8}, 0, 32)); },
         "tensor 't' appears twice"},
        {"overlap", [](Built& b) { b.tensors.push_back(tensor_info("u", {8}, 0, 32)); },
         "tensors 't' and 'u' overlap"},
        {"empty name",
         [](Built& b) {
             b.tensors[0] = tensor_info("", {8, 2}, 0, 0);
         },
         "tensor 0 has an empty name"},
        {"empty tensor",
         [](Built& b) {
             b.tensors[0] = tensor_info("t", {0}, 0, 0);
             b.data.clear();
         },
         nullptr},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        Built b = valid_file();
        c.breaks(b);
        if (c.message == nullptr) {  // still valid
            EXPECT_TRUE(parse(b.bytes()).has_value()) << parse(b.bytes()).status().message();
            continue;
        }
        const std::string msg = error_of(b.bytes());
        EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    }
    std::string bad_magic = valid_file().bytes();
    bad_magic[3] = 'X';
    EXPECT_NE(error_of(bad_magic).find("not a GGUF file: magic 'GGUX', expected 'GGUF'"), std::string::npos);
    EXPECT_NE(error_of("").find("truncated: the magic needs 4 bytes at offset 0, but the file ends at 0"),
              std::string::npos);
    // A tensor but no data section at all.
    Built no_data = valid_file();
    no_data.data.clear();
    std::string cut = no_data.bytes();
    cut.resize(cut.size() - 1);  // ends inside the padding before the data section
    EXPECT_NE(error_of(cut).find("the data section starts at"), std::string::npos);
}

}  // namespace
}  // namespace sluice::format
