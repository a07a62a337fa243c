// Helpers shared by unit tests: temporary folders, paths to test data.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "convert/packer.h"
#include "io/mapped_file.h"
#include "sluice/engine.h"
#include "sluice/tokenizer.h"

namespace sluice::testing {

// A fresh folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
    TempDir() {
        std::random_device rd;
        path_ = std::filesystem::temp_directory_path() /
                ("sluice-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string path() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    void write(const std::string& name, const std::string& contents) const {
        std::ofstream(path_ / name, std::ios::binary) << contents;
    }

 private:
    std::filesystem::path path_;
};

inline std::string shared_dir() {
    return SLUICE_SHARED_DIR;
}
inline std::string test_data_dir() {
    return SLUICE_TEST_DATA_DIR;
}
inline bool exists(const std::string& path) {
    return std::filesystem::exists(path);
}

// Flips one byte (at offset 100) in each of `records` fixed-stride records of `file` in place — a
// disk fault that an expert store with verify_reads reports; flipping again repairs it. False when
// the file cannot be read and written.
inline bool flip_record_bytes(const std::string& file, uint64_t stride, int64_t records) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    if (!f.good()) return false;
    for (int64_t r = 0; r < records; ++r) {
        const auto at = static_cast<std::streamoff>(static_cast<uint64_t>(r) * stride + 100);
        char c = 0;
        f.seekg(at);
        f.read(&c, 1);
        c = static_cast<char>(c ^ 0x5a);
        f.seekp(at);
        f.write(&c, 1);
    }
    f.flush();
    return f.good();
}

// The default model (models/tiny-next) packed into `out_dir`: the packed model the failure and
// batch tests stream from.
inline ::testing::AssertionResult pack_default_model(const std::string& out_dir) {
    convert::PackOptions o;
    o.src_dir = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
    o.out_dir = out_dir;
    auto packed = convert::pack_model(o);
    if (!packed.has_value()) return ::testing::AssertionFailure() << packed.status().message();
    return ::testing::AssertionSuccess();
}

// `dir` loaded as the session tests run it: 2 threads, a 2 GiB budget, `ctx` tokens of context; null
// (with a test failure naming the error) when it does not load.
inline std::shared_ptr<Engine> load_engine(const std::string& dir, int64_t ctx = 1024) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.context_tokens = ctx;
    eo.memory_bytes = 2ull << 30;
    auto e = Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    return e.has_value() ? *e : nullptr;
}

// The first `n` tokens of the held-out text the default model (models/tiny-next) was not trained on.
inline std::vector<int32_t> heldout_ids(Engine& e, size_t n) {
    auto text = io::read_text_file(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next/heldout.txt");
    EXPECT_TRUE(text.has_value());
    if (!text.has_value()) return {};
    auto ids = e.tokenizer()->encode(text->substr(0, 40000));
    EXPECT_GE(ids.size(), n);
    ids.resize(std::min(ids.size(), n));
    return ids;
}

// How logits `got` [n, V] track `ref` [n, V] along the token sequence `ids`.
struct LogitAgreement {
    double top1 = 0;      // share of positions whose argmax equals ref's
    double max_diff = 0;  // largest |got − ref|
    double nll = 0;       // got's mean next-token NLL along ids
};

inline LogitAgreement logit_agreement(const std::vector<float>& got, const std::vector<float>& ref,
                                      const std::vector<int32_t>& ids, int64_t V) {
    LogitAgreement a;
    const auto n = static_cast<int64_t>(ids.size());
    int64_t same = 0;
    for (int64_t t = 0; t < n; ++t) {
        const float* g = got.data() + t * V;
        const float* r = ref.data() + t * V;
        same += std::max_element(g, g + V) - g == std::max_element(r, r + V) - r;
        for (int64_t i = 0; i < V; ++i)
            a.max_diff = std::max(a.max_diff, static_cast<double>(std::fabs(g[i] - r[i])));
        if (t + 1 < n) {
            const float mx = *std::max_element(g, g + V);
            double sum = 0;
            for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(g[i] - mx));
            a.nll += -(static_cast<double>(g[ids[static_cast<size_t>(t + 1)]] - mx) - std::log(sum));
        }
    }
    a.top1 = static_cast<double>(same) / static_cast<double>(n);
    a.nll /= static_cast<double>(n - 1);
    return a;
}

}  // namespace sluice::testing
