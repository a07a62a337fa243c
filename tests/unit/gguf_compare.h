// What the GGUF tests compare: two configs field by field (a GGUF's metadata against config.json, or
// two GGUF readers), and two engines' logits row by row (a GGUF file against the Hugging Face checkpoint it
// was converted from), and a GGUF's tensors against the tensor map and the checkpoint it came from.
// Header-only, included by gguf_model_test.cpp, gguf_glm_test.cpp and
// gguf_qwen2_moe_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/tensor_map_gguf.h"
#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::testing {

// Every field of ModelConfig a checkpoint can state, and what the config derives (the context limit,
// the RoPE frequencies).
inline void expect_same_config(const model::ModelConfig& want, const model::ModelConfig& got,
                               const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(model::family_name(want.family), model::family_name(got.family));
    EXPECT_EQ(want.model_type, got.model_type);
    EXPECT_EQ(want.hidden, got.hidden);
    EXPECT_EQ(want.n_layers, got.n_layers);
    EXPECT_EQ(want.vocab, got.vocab);
    EXPECT_EQ(want.rms_eps, got.rms_eps);
    EXPECT_EQ(want.max_positions, got.max_positions);
    EXPECT_EQ(want.tie_word_embeddings, got.tie_word_embeddings);
    EXPECT_EQ(want.n_heads, got.n_heads);
    EXPECT_EQ(want.n_kv_heads, got.n_kv_heads);
    EXPECT_EQ(want.head_dim, got.head_dim);
    EXPECT_EQ(want.rotary_dim, got.rotary_dim);
    EXPECT_EQ(want.rope_theta, got.rope_theta);
    EXPECT_EQ(want.yarn.enabled, got.yarn.enabled);
    EXPECT_EQ(want.yarn.factor, got.yarn.factor);
    EXPECT_EQ(want.yarn.original_max_positions, got.yarn.original_max_positions);
    EXPECT_EQ(want.yarn.beta_fast, got.yarn.beta_fast);
    EXPECT_EQ(want.yarn.beta_slow, got.yarn.beta_slow);
    EXPECT_EQ(want.yarn.attention_factor, got.yarn.attention_factor);
    EXPECT_EQ(want.yarn.truncate, got.yarn.truncate);
    EXPECT_EQ(want.attn_output_gate, got.attn_output_gate);
    EXPECT_EQ(want.attn_qk_norm, got.attn_qk_norm);
    EXPECT_EQ(want.attn_qkv_bias, got.attn_qkv_bias);
    EXPECT_EQ(want.linear_k_heads, got.linear_k_heads);
    EXPECT_EQ(want.linear_v_heads, got.linear_v_heads);
    EXPECT_EQ(want.linear_k_dim, got.linear_k_dim);
    EXPECT_EQ(want.linear_v_dim, got.linear_v_dim);
    EXPECT_EQ(want.conv_kernel, got.conv_kernel);
    EXPECT_EQ(want.split_linear_projections, got.split_linear_projections);
    EXPECT_EQ(want.n_experts, got.n_experts);
    EXPECT_EQ(want.top_k, got.top_k);
    EXPECT_EQ(want.expert_ffn, got.expert_ffn);
    EXPECT_EQ(want.shared_expert_ffn, got.shared_expert_ffn);
    EXPECT_EQ(want.dense_ffn, got.dense_ffn);
    EXPECT_EQ(want.norm_topk_prob, got.norm_topk_prob);
    EXPECT_EQ(want.decoder_sparse_step, got.decoder_sparse_step);
    EXPECT_EQ(want.mlp_only_layers, got.mlp_only_layers);
    EXPECT_TRUE(want.layer_types == got.layer_types);
    EXPECT_EQ(want.mtp_layers, got.mtp_layers);
    EXPECT_EQ(want.eos_token_ids, got.eos_token_ids);
    EXPECT_EQ(want.bos_token_id, got.bos_token_id);
    EXPECT_EQ(want.quantization.present, got.quantization.present);
    EXPECT_EQ(want.context_limit(), got.context_limit());
    EXPECT_EQ(want.rope_inv_freq(), got.rope_inv_freq());
}

// Row r's max |a − b| over max |b|, per row of V logits.
inline std::vector<double> row_distances(const std::vector<float>& a, const std::vector<float>& b, int64_t V,
                                         int64_t* same_top1) {
    std::vector<double> out;
    *same_top1 = 0;
    for (size_t r = 0; r * static_cast<size_t>(V) < b.size(); ++r) {
        const float* x = a.data() + r * V;
        const float* y = b.data() + r * V;
        float diff = 0, scale = 0;
        for (int64_t i = 0; i < V; ++i) {
            diff = std::max(diff, std::fabs(x[i] - y[i]));
            scale = std::max(scale, std::fabs(y[i]));
        }
        out.push_back(static_cast<double>(diff) / std::max(scale, 1e-6f));
        *same_top1 += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
    }
    return out;
}

inline double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// Every position's logits after prefill, then the same tokens fed one at a time (decode kernels).
struct Logits {
    std::vector<float> prefill, decode;
    int64_t vocab = 0;
};

inline Logits engine_logits(const std::string& model_dir, const std::vector<int32_t>& ids,
                            uint64_t expert_cache_bytes = 0) {
    Logits out;
    EngineOptions eo;
    eo.model_dir = model_dir;
    eo.threads = 2;
    eo.cpu_int8_activations = false;
    eo.context_tokens = static_cast<int64_t>(ids.size()) + 1;
    eo.expert_cache_bytes = expert_cache_bytes;
    auto engine = Engine::load(eo);
    EXPECT_TRUE(engine.has_value()) << engine.status().message();
    if (!engine.has_value()) return out;
    out.vocab = (*engine)->info().vocab_size;
    auto prefill = (*engine)->new_session()->evaluate(ids, true);
    EXPECT_TRUE(prefill.has_value()) << prefill.status().message();
    auto decode = (*engine)->new_session()->evaluate_as_decode(ids, true);
    EXPECT_TRUE(decode.has_value()) << decode.status().message();
    if (prefill.has_value()) out.prefill = std::move(*prefill);
    if (decode.has_value()) out.decode = std::move(*decode);
    if (expert_cache_bytes > 0) {
        EXPECT_TRUE((*engine)->memory_plan().streaming);
        EXPECT_GT((*engine)->expert_cache_stats().evictions, 0u);  // one slot: every expert was a read
    }
    return out;
}

// sluice's tensor map of `config` (model/tensor_map_gguf.h) against what the converter wrote into `gguf`:
// every tensor the map names is in the file with its dims and the values it derives from the Hugging
// Face checkpoint `hf` (F32 or BF16 tensors; the file's F32 or F16: within 3e-8, f16's subnormals below
// 6.1e-5 rounded to 2^-24). `mapped` gets the names the map covers (the caller checks the rest).
inline void expect_tensor_map_matches(const format::GgufCheckpoint& gguf, const model::ModelConfig& config,
                                      const format::SafetensorsFile& hf, std::set<std::string>* mapped) {
    auto hf_values = [&](const std::string& n) {
        std::vector<float> v;
        const format::TensorInfo* t = hf.find(n);
        if (t == nullptr) return v;
        v.resize(static_cast<size_t>(t->numel()));
        for (size_t i = 0; i < v.size(); ++i) {
            if (t->dtype == format::DType::kF32) {
                std::memcpy(&v[i], t->data + 4 * i, 4);
            } else {
                uint16_t b = 0;
                std::memcpy(&b, t->data + 2 * i, 2);
                v[i] = kernels::bf16_to_f32(b);
            }
        }
        return v;
    };
    for (const model::GgufTensorSource& s : model::gguf_tensor_map(config)) {
        mapped->insert(s.gguf);
        const format::GgufTensor* t = gguf.find(s.gguf);
        ASSERT_NE(t, nullptr) << "the map names " << s.gguf << ", which the converter did not write";
        EXPECT_EQ(t->dims, s.dims) << s.gguf;
        std::vector<std::vector<float>> in;
        for (const std::string& h : s.hf) {
            in.push_back(hf_values(h));
            ASSERT_FALSE(in.back().empty()) << s.gguf << ": no HF tensor " << h;
        }
        auto want = model::gguf_values_from_hf(s, in);
        ASSERT_TRUE(want.has_value()) << want.status().message();
        ASSERT_EQ(static_cast<int64_t>(want->size()), t->numel()) << s.gguf;
        float worst = 0;
        for (int64_t i = 0; i < t->numel(); ++i) {
            float got = 0;
            if (t->type == format::GgmlType::kF32) {
                std::memcpy(&got, t->data + 4 * i, 4);
            } else {
                ASSERT_EQ(t->type, format::GgmlType::kF16) << s.gguf;
                uint16_t h = 0;
                std::memcpy(&h, t->data + 2 * i, 2);
                got = kernels::f16_to_f32(h);
            }
            worst = std::max(worst, std::fabs(got - (*want)[static_cast<size_t>(i)]));
        }
        EXPECT_LE(worst, 3e-8f) << s.gguf;
    }
}

}  // namespace sluice::testing
