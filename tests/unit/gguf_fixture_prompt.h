// The prompt a GGUF fixture of tests/data/gguf/weights is run over (by llama.cpp in
// tools/llama_logits/make_fixture_logits.sh, and by sluice in the tests that compare with it): index.json's
// "source" for the file names the checkpoint it was converted from, under tests/data — a golden, whose
// golden.safetensors holds input_ids, or one of tools/make_glm4_moe_checkpoints.py's, with a prompt.json.
// And the .npy files llama.cpp's logits are kept in (read_npy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "test_util.h"

namespace sluice::testing {

// A parameterised test's name for the fixture it runs ("NAME.OUTTYPE.gguf" → "NAME_OUTTYPE"), for
// INSTANTIATE_TEST_SUITE_P.
struct GgufFixtureTestName {
    template <class ParamInfo>
    std::string operator()(const ParamInfo& info) const {
        std::string n = info.param.substr(0, info.param.size() - 5);  // no ".gguf"
        std::replace(n.begin(), n.end(), '.', '_');
        return n;
    }
};

// The folder (under tests/data) the fixture `gguf_name` ("NAME.OUTTYPE.gguf") was converted from; empty
// when index.json does not list it.
inline std::string gguf_fixture_source(const std::string& gguf_name) {
    std::ifstream in(test_data_dir() + "/gguf/weights/index.json");
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
    if (!index.is_object() || !index.contains("files") || !index["files"].contains(gguf_name)) return {};
    const std::string source = index["files"][gguf_name].value("source", "");
    return source.empty() ? std::string() : test_data_dir() + "/" + source;
}

// The fixture's prompt token ids (empty when none is found).
inline std::vector<int32_t> gguf_fixture_prompt(const std::string& gguf_name) {
    const std::string dir = gguf_fixture_source(gguf_name);
    std::vector<int32_t> ids;
    if (dir.empty()) return ids;
    if (std::filesystem::exists(dir + "/golden.safetensors")) {
        auto ref = format::SafetensorsFile::open(dir + "/golden.safetensors");
        const format::TensorInfo* t = ref.has_value() ? (*ref)->find("input_ids") : nullptr;
        if (t == nullptr) return ids;
        ids.resize(t->size_bytes / 4);
        std::memcpy(ids.data(), t->data, t->size_bytes);
        return ids;
    }
    std::ifstream p(dir + "/prompt.json");
    const nlohmann::json prompt = nlohmann::json::parse(p, nullptr, false);
    if (prompt.is_object() && prompt.contains("input_ids"))
        for (const auto& v : prompt["input_ids"]) ids.push_back(v.get<int32_t>());
    return ids;
}

// A float32 .npy of 2 dims (the shape numpy writes: "'shape': (R, C)").
inline std::vector<float> read_npy(const std::string& path, int64_t* rows, int64_t* cols) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string b = ss.str();
    if (b.size() < 10 || b.compare(1, 5, "NUMPY") != 0) return {};
    uint16_t hlen = 0;
    std::memcpy(&hlen, b.data() + 8, 2);
    const std::string header = b.substr(10, hlen);
    if (header.find("'<f4'") == std::string::npos) return {};
    const size_t at = header.find("'shape': (");
    if (at == std::string::npos) return {};
    *rows = std::strtoll(header.c_str() + at + 10, nullptr, 10);
    *cols = std::strtoll(header.c_str() + header.find(',', at + 10) + 1, nullptr, 10);
    std::vector<float> v(static_cast<size_t>(*rows * *cols));
    if (b.size() < 10 + hlen + v.size() * 4) return {};
    std::memcpy(v.data(), b.data() + 10 + hlen, v.size() * 4);
    return v;
}

}  // namespace sluice::testing
