// `sluice synth`: a packed model with a real config's exact shapes and random weights, written
// straight into the streaming layout — full-size performance work without downloads
// (benchmarking.md). Quantized weights are random codes with scales chosen so dequantized values
// are uniform in about ±0.035 (std ≈ 0.02, like trained projections); norms are ≈ 1, DeltaNet
// gate parameters in their trained ranges, so activations stay finite through every layer.
// Routers are random too, so routing is close to uniform: cache hit rates measured on these
// models are a pessimistic bound (say so next to every number).
//
// gpt-oss is written as a pack of the Hub's MXFP4 checkpoint is (convert/pack_plan.cpp,
// plan_gpt_oss_experts): routed experts as ggml MXFP4 blocks whatever --bits says, the expert biases
// (gate_up_proj_bias [E, 2I] interleaved, down_proj_bias [E, H]) with the dense core, and the Hub's
// quantization_config (quant_method mxfp4) in config.json beside the MLX block of the dense weights.
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "convert/pack_writer.h"
#include "convert/packer.h"
#include "io/mapped_file.h"
#include "kernels/kernels.h"
#include "kernels/weight_format.h"
#include "model/config.h"
#include "model/gpt_oss_experts.h"
#include "model/tensor_map.h"

namespace sluice::convert {

namespace fs = std::filesystem;
using format::DType;

namespace {

// xoshiro256** seeded per tensor / per record (so any part can be produced independently).
class Rng {
 public:
    explicit Rng(uint64_t seed) {
        uint64_t z = seed;
        for (auto& s : s_) {
            z += 0x9e3779b97f4a7c15ull;
            uint64_t x = z;
            x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
            x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
            s = x ^ (x >> 31);
        }
    }
    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
    float normal() {
        const float u1 = std::max(uniform(), 1e-7f), u2 = uniform();
        return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }

 private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

uint64_t seed_for(uint64_t seed, const std::string& name) {
    return XXH3_64bits_withSeed(name.data(), name.size(), seed);
}

// Random MLX affine weight: codes uniform, per-group scale ≈ 2·0.035/(2^bits − 1) with ±10%
// spread, bias = −scale·(2^bits − 1)/2 (zero-centred values).
void fill_random_quantized(uint64_t seed, int64_t rows, int64_t cols, int bits, int group, uint8_t* words,
                           uint8_t* scales, uint8_t* biases) {
    Rng rng(seed);
    const int64_t n_words = rows * cols * bits / 32;
    auto* w = reinterpret_cast<uint32_t*>(words);
    for (int64_t i = 0; i + 1 < n_words; i += 2) {
        const uint64_t r = rng.next();
        w[i] = static_cast<uint32_t>(r);
        w[i + 1] = static_cast<uint32_t>(r >> 32);
    }
    if (n_words % 2) w[n_words - 1] = static_cast<uint32_t>(rng.next());
    const float levels = static_cast<float>((1 << bits) - 1);
    const int64_t groups = rows * (cols / group);
    auto* s = reinterpret_cast<uint16_t*>(scales);
    auto* b = reinterpret_cast<uint16_t*>(biases);
    for (int64_t g = 0; g < groups; ++g) {
        const float scale = 0.07f / levels * (0.9f + 0.2f * rng.uniform());
        s[g] = kernels::f32_to_bf16(scale);
        b[g] = kernels::f32_to_bf16(-scale * levels * 0.5f);
    }
}

// Random ggml MXFP4 rows (block_mxfp4: an e8m0 scale byte, 16 bytes of e2m1 codes). Uniform codes have
// rms 2.93 in e2m1 units (values 0, ±0.5 … ±6); a scale of 2^-7 or 2^-8 (e8m0 120 or 119) gives an rms
// of about 0.018, like the affine synth weights and gpt-oss's trained experts.
void fill_random_mxfp4(uint64_t seed, int64_t rows, int64_t cols, uint8_t* dst) {
    Rng rng(seed);
    const int64_t blocks = rows * (cols / model::kMxfp4Block);
    for (int64_t b = 0; b < blocks; ++b) {
        uint8_t* block = dst + b * model::kMxfp4BlockBytes;
        const uint64_t r0 = rng.next(), r1 = rng.next();
        block[0] = static_cast<uint8_t>(119 + (r0 >> 63));
        std::memcpy(block + 1, &r1, 8);
        const uint64_t r2 = rng.next();
        std::memcpy(block + 9, &r2, 8);
    }
}

struct Builder {
    const model::ModelConfig& cfg;
    int bits;
    int group;
    uint64_t seed;
    std::vector<DenseTensorSpec> specs;
    std::map<std::string, int> overrides;
    // What the loaded model holds of these tensors: linears mapped as they are, the small vectors
    // (norms, conv, A, dt bias) as f32 copies (model/weights.cpp's dense_bytes).
    uint64_t resident_bytes = 0;
    // Of those, each decoder layer's own mapped weights (the MTP head's not counted): what streaming
    // the dense core reads per layer (Model::layer_mapped_ranges).
    std::map<int64_t, uint64_t> layer_mapped_bytes;

    void count_mapped(const std::string& name, uint64_t bytes) {
        resident_bytes += bytes;
        const size_t at = name.find("layers.");
        if (at == std::string::npos || name.starts_with("mtp.")) return;
        layer_mapped_bytes[std::strtoll(name.c_str() + at + 7, nullptr, 10)] += bytes;
    }

    void linear(const std::string& module, int64_t rows, int64_t cols, int module_bits) {
        if (cols % group != 0) {
            vector(module + ".weight", {rows, cols}, 0.0f, 0.02f, false, /*mapped=*/true);
            return;
        }
        const int64_t words = cols * module_bits / 32, groups = cols / group;
        auto shared = std::make_shared<std::vector<uint8_t>>();
        const uint64_t sbytes = static_cast<uint64_t>(rows * groups) * 2;
        const uint64_t s = seed_for(seed, module);
        const int g = group;
        specs.push_back(
            {module + ".weight", DType::kU32, {rows, words}, module_bits, group, [=](uint8_t* dst) {
                 shared->resize(2 * sbytes);
                 fill_random_quantized(s, rows, cols, module_bits, g, dst, shared->data(),
                                       shared->data() + sbytes);
                 return Status::ok();
             }});
        specs.push_back({module + ".scales", DType::kBF16, {rows, groups}, 0, 0, [=](uint8_t* dst) {
                             std::memcpy(dst, shared->data(), sbytes);
                             return Status::ok();
                         }});
        specs.push_back({module + ".biases", DType::kBF16, {rows, groups}, 0, 0, [=](uint8_t* dst) {
                             std::memcpy(dst, shared->data() + sbytes, sbytes);
                             shared->clear();
                             shared->shrink_to_fit();
                             return Status::ok();
                         }});
        if (module_bits != bits) overrides[module] = module_bits;
        for (size_t i = specs.size() - 3; i < specs.size(); ++i)
            count_mapped(specs[i].name, specs[i].size_bytes());
    }

    // A bf16 (or f32) tensor of N(mean, std) values.
    void vector(const std::string& name, std::vector<int64_t> shape, float mean, float stddev, bool f32,
                bool mapped = false) {
        const uint64_t s = seed_for(seed, name);
        specs.push_back({name, f32 ? DType::kF32 : DType::kBF16, shape, 0, 0, [=](uint8_t* dst) {
                             Rng rng(s);
                             int64_t n = 1;
                             for (int64_t d : shape) n *= d;
                             for (int64_t i = 0; i < n; ++i) {
                                 const float v = mean + stddev * rng.normal();
                                 if (f32) {
                                     std::memcpy(dst + 4 * i, &v, 4);
                                 } else {
                                     const uint16_t h = kernels::f32_to_bf16(v);
                                     std::memcpy(dst + 2 * i, &h, 2);
                                 }
                             }
                             return Status::ok();
                         }});
        if (mapped) {
            count_mapped(name, specs.back().size_bytes());
        } else {
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            resident_bytes += sizeof(float) * static_cast<uint64_t>(n);
        }
    }
};

}  // namespace

Expected<PackResult> synth_model(const SynthOptions& options) {
    SynthOptions o = options;
    if (const kernels::WeightFormat* f = kernels::quantized_format(o.bits); f == nullptr || !f->packable)
        return error(ErrorCode::kInvalidArgument, "[synth] --bits must be " + kernels::packable_bits());
    if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128)
        return error(ErrorCode::kInvalidArgument, "[synth] --group-size must be 32, 64 or 128");
    SLUICE_ASSIGN_OR_RETURN(std::string config_text, io::read_text_file(o.config_path));
    SLUICE_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::parse_model_config(config_text, o.config_path));
    if (cfg.quantization.present && o.dry_run && cfg.quantization.global.bits > 0) {
        // An MLX config: its sizes are its own bits and group size.
        o.bits = cfg.quantization.global.bits;
        o.group_size = cfg.quantization.global.group_size;
        cfg.quantization = {};
    }
    if (cfg.quantization.present)
        return error(ErrorCode::kInvalidArgument, "[synth] " + o.config_path +
                                                      " already has a quantization block; give the "
                                                      "unquantized config (synth quantizes with --bits)");
    std::error_code ec;
    if (!o.dry_run) {
        if (fs::exists(fs::path(o.out_dir) / "manifest.json", ec))
            return error(ErrorCode::kInvalidArgument, "[synth] '" + o.out_dir + "' already holds a model");
        fs::create_directories(fs::path(o.out_dir) / "experts", ec);
        if (ec) return error(ErrorCode::kIo, "[synth] cannot create '" + o.out_dir + "': " + ec.message());
    }

    using Names = model::TensorNames;
    const Names names = model::tensor_names_for(cfg);
    const int64_t H = cfg.hidden, V = cfg.vocab;
    const bool gpt_oss = cfg.family == model::Family::kGptOss;
    if (gpt_oss && (H % model::kMxfp4Block != 0 || cfg.expert_ffn % model::kMxfp4Block != 0))
        return error(ErrorCode::kInvalidArgument,
                     "[synth] " + o.config_path + ": gpt-oss's MXFP4 experts need hidden_size (" +
                         std::to_string(H) + ") and intermediate_size (" + std::to_string(cfg.expert_ffn) +
                         ") to be multiples of 32");
    Builder b{cfg, o.bits, o.group_size, o.seed, {}, {}};
    b.linear(names.embed(), V, H, o.bits);
    b.vector(names.final_norm(), {H}, 1.0f, 0.05f, false);
    b.linear(names.lm_head, V, H, o.bits);
    // The MTP head: Qwen3-Next / Qwen3.5 checkpoints have one; GLM-4.5 and DeepSeek-V3 ones when the
    // config declares num_nextn_predict_layers (the first of them, as the loader runs it).
    const bool mtp_family = cfg.family == model::Family::kQwen3Next ||
                            cfg.family == model::Family::kQwen35Moe || (names.nextn && cfg.nextn_layers > 0);
    const int64_t n_layers = cfg.n_layers + (o.mtp && mtp_family ? 1 : 0);  // the MTP layer last
    if (n_layers > cfg.n_layers) {
        b.linear(names.mtp_fc(), H, 2 * H, o.bits);
        for (const std::string& norm :
             {names.mtp_norm_embedding(), names.mtp_norm_hidden(), names.mtp_norm()})
            b.vector(norm, {H}, 1.0f, 0.05f, false);
    }
    for (int64_t l = 0; l < n_layers; ++l) {
        const std::string p = names.layer(l), att = p + Names::kAttention;
        // Norm weights are stored with any zero-centred +1 already folded (MLX convention), so
        // the loader detects the MLX layout from conv1d's [C, K, 1] shape.
        b.vector(p + Names::kInputNorm, {H}, 1.0f, 0.05f, false);
        b.vector(p + Names::kPostNorm, {H}, 1.0f, 0.05f, false);
        if (cfg.is_full_attention(l) && cfg.latent_attention()) {
            const int64_t nh = cfg.n_heads, qd = cfg.qk_nope_dim + cfg.qk_rope_dim;
            if (cfg.q_lora_rank > 0) {
                b.linear(att + "q_a_proj", cfg.q_lora_rank, H, o.bits);
                b.vector(att + "q_a_layernorm.weight", {cfg.q_lora_rank}, 1.0f, 0.05f, false);
                b.linear(att + "q_b_proj", nh * qd, cfg.q_lora_rank, o.bits);
            } else {
                b.linear(att + "q_proj", nh * qd, H, o.bits);
            }
            b.linear(att + "kv_a_proj_with_mqa", cfg.kv_lora_rank + cfg.qk_rope_dim, H, o.bits);
            b.vector(att + "kv_a_layernorm.weight", {cfg.kv_lora_rank}, 1.0f, 0.05f, false);
            b.linear(att + "kv_b_proj", nh * (cfg.qk_nope_dim + cfg.v_head_dim), cfg.kv_lora_rank, o.bits);
            b.linear(att + "o_proj", H, nh * cfg.v_head_dim, o.bits);
        } else if (cfg.is_full_attention(l)) {
            const int64_t hd = cfg.head_dim;
            b.linear(att + "q_proj", cfg.n_heads * hd * (cfg.attn_output_gate ? 2 : 1), H, o.bits);
            b.linear(att + "k_proj", cfg.n_kv_heads * hd, H, o.bits);
            b.linear(att + "v_proj", cfg.n_kv_heads * hd, H, o.bits);
            b.linear(att + "o_proj", H, cfg.n_heads * hd, o.bits);
            if (cfg.attn_qk_norm) {
                b.vector(att + "q_norm.weight", {hd}, 1.0f, 0.05f, false);
                b.vector(att + "k_norm.weight", {hd}, 1.0f, 0.05f, false);
            }
            // Qwen2's q/k/v biases are large (trained ones reach ±10s); gpt-oss's are small.
            const float bias_std = gpt_oss ? 0.02f : 0.5f;
            if (cfg.attn_qkv_bias) {
                b.vector(att + "q_proj.bias", {cfg.n_heads * hd}, 0.0f, bias_std, false);
                b.vector(att + "k_proj.bias", {cfg.n_kv_heads * hd}, 0.0f, bias_std, false);
                b.vector(att + "v_proj.bias", {cfg.n_kv_heads * hd}, 0.0f, bias_std, false);
            }
            if (cfg.attn_o_bias) b.vector(att + "o_proj.bias", {H}, 0.0f, bias_std, false);
            // Attention sinks: one logit per head, near 0 (a sink as likely as one key).
            if (cfg.attn_sinks) b.vector(att + "sinks", {cfg.n_heads}, 0.0f, 0.1f, false);
        } else {
            const int64_t kd = cfg.linear_key_dim(), vd = cfg.linear_value_dim(), nv = cfg.linear_v_heads;
            const std::string q = p + Names::kDeltaNet;
            if (cfg.split_linear_projections) {
                b.linear(q + "in_proj_qkv", 2 * kd + vd, H, o.bits);
                b.linear(q + "in_proj_z", vd, H, o.bits);
                b.linear(q + "in_proj_b", nv, H, o.bits);
                b.linear(q + "in_proj_a", nv, H, o.bits);
            } else {
                b.linear(q + "in_proj_qkvz", 2 * kd + 2 * vd, H, o.bits);
                b.linear(q + "in_proj_ba", 2 * nv, H, o.bits);
            }
            b.vector(q + "conv1d.weight", {cfg.conv_dim(), cfg.conv_kernel, 1}, 0.0f, 0.3f, false);
            b.vector(q + "A_log", {nv}, 1.0f, 0.5f, true);
            b.vector(q + "dt_bias", {nv}, 0.0f, 1.0f, false);
            b.vector(q + "norm.weight", {cfg.linear_v_dim}, 1.0f, 0.05f, false);
            b.linear(q + "out_proj", H, vd, o.bits);
        }
        if (!cfg.is_moe_layer(l)) {
            b.linear(p + Names::kDenseMlp + "gate_proj", cfg.dense_ffn, H, o.bits);
            b.linear(p + Names::kDenseMlp + "up_proj", cfg.dense_ffn, H, o.bits);
            b.linear(p + Names::kDenseMlp + "down_proj", H, cfg.dense_ffn, o.bits);
            continue;
        }
        const int router_bits = Names::module_bits(cfg, p + names.router(), o.bits);
        if (router_bits == 16) {
            b.vector(p + names.router() + ".weight", {cfg.n_experts, H}, 0.0f, 0.02f, false, /*mapped=*/true);
        } else {
            b.linear(p + names.router(), cfg.n_experts, H, router_bits);
        }
        if (cfg.router_sigmoid) b.vector(p + Names::kRouterBias, {cfg.n_experts}, 0.0f, 0.02f, true);
        if (cfg.router_logit_bias)
            b.vector(p + names.router() + ".bias", {cfg.n_experts}, 0.0f, 0.02f, false);
        if (cfg.expert_bias) {  // gpt-oss: kept with the dense core, gate and up interleaved
            const std::string ep = p + names.experts();
            b.vector(ep + "gate_up_proj_bias", {cfg.n_experts, 2 * cfg.expert_ffn}, 0.0f, 0.02f, false);
            b.vector(ep + "down_proj_bias", {cfg.n_experts, H}, 0.0f, 0.02f, false);
        }
        if (cfg.shared_expert_ffn > 0) {
            const std::string sp = p + Names::shared_expert(cfg);
            b.linear(sp + "gate_proj", cfg.shared_expert_ffn, H, o.bits);
            b.linear(sp + "up_proj", cfg.shared_expert_ffn, H, o.bits);
            b.linear(sp + "down_proj", H, cfg.shared_expert_ffn, o.bits);
            if (cfg.shared_expert_gated)
                b.linear(p + Names::kSharedExpertGate, 1, H,
                         Names::module_bits(cfg, p + Names::kSharedExpertGate, o.bits));
        }
    }

    PackResult result;
    format::PackLayout layout;
    layout.source_layout = "mlx";
    layout.n_experts = cfg.n_experts;
    auto report = [&](uint64_t done, uint64_t total) {
        if (o.progress) o.progress("dense", done, total);
    };
    if (o.dry_run) {
        result.dense_bytes = b.resident_bytes;  // what the model will hold, as Engine::load counts it
        for (const auto& [layer, bytes] : b.layer_mapped_bytes) {
            if (layer >= cfg.n_layers) continue;  // a nextn MTP layer: not streamed with the rest
            result.layers_dense_bytes += bytes;
            result.max_layer_dense_bytes = std::max(result.max_layer_dense_bytes, bytes);
        }
    } else {
        SLUICE_ASSIGN_OR_RETURN(
            layout.dense,
            write_dense_file((fs::path(o.out_dir) / layout.dense_file).string(), b.specs, report));
        for (const auto& s : layout.dense) result.dense_bytes += s.size;
    }

    const int64_t I = cfg.expert_ffn;
    uint64_t experts_total = 0;
    for (int64_t l = 0; l < n_layers; ++l) experts_total += cfg.is_moe_layer(l) ? 1 : 0;
    uint64_t layers_done = 0;
    for (int64_t l = 0; l < n_layers; ++l) {
        if (!cfg.is_moe_layer(l)) continue;
        constexpr format::GgmlType kMxfp4 = format::GgmlType::kMXFP4;
        format::PackExpertFile file =
            gpt_oss ? make_expert_file_layout(l, make_ggml_projection(I, H, kMxfp4),
                                              make_ggml_projection(I, H, kMxfp4),
                                              make_ggml_projection(H, I, kMxfp4))
                    : make_expert_file_layout(l, make_projection(I, H, o.bits, o.group_size, DType::kBF16),
                                              make_projection(I, H, o.bits, o.group_size, DType::kBF16),
                                              make_projection(H, I, o.bits, o.group_size, DType::kBF16));
        result.record_bytes = std::max(result.record_bytes, file.record_stride);
        result.expert_records += cfg.n_experts;
        if (o.dry_run) {
            result.expert_bytes += file.record_stride * static_cast<uint64_t>(cfg.n_experts);
            ++result.expert_files;
            continue;
        }
        SLUICE_RETURN_IF_ERROR(write_expert_file(
            (fs::path(o.out_dir) / file.file).string(), cfg.n_experts, file, [&](int64_t e, uint8_t* record) {
                const uint64_t s =
                    o.seed ^ (static_cast<uint64_t>(l) << 40) ^ (static_cast<uint64_t>(e) << 8);
                int k = 0;
                for (const format::PackProjection* p : {&file.gate, &file.up, &file.down}) {
                    if (p->ggml_type) {
                        fill_random_mxfp4(s + static_cast<uint64_t>(k++), p->rows, p->cols,
                                          record + p->weight.offset);
                        continue;
                    }
                    fill_random_quantized(s + static_cast<uint64_t>(k++), p->rows, p->cols, p->bits,
                                          p->group_size, record + p->weight.offset, record + p->scales.offset,
                                          record + p->biases.offset);
                }
                return Status::ok();
            }));
        result.expert_bytes += file.record_stride * static_cast<uint64_t>(cfg.n_experts);
        layout.expert_files.push_back(std::move(file));
        if (o.progress) o.progress("experts", ++layers_done, experts_total);
    }
    if (o.dry_run) return result;
    result.expert_files = static_cast<int64_t>(layout.expert_files.size());

    SLUICE_RETURN_IF_ERROR(io::write_file_atomic((fs::path(o.out_dir) / "layout.json").string(),
                                                 format::serialize_pack_layout(layout)));
    nlohmann::json config = nlohmann::json::parse(config_text);
    nlohmann::json q = {{"group_size", o.group_size}, {"bits", o.bits}, {"mode", "affine"}};
    for (const auto& [module, bits] : b.overrides) q[module] = {{"group_size", o.group_size}, {"bits", bits}};
    config["quantization"] = q;
    // gpt-oss: the Hub's block (its experts MXFP4, config.mxfp4_experts), as a pack of the Hub's checkpoint
    // keeps it; the MLX block above describes the dense weights.
    const nlohmann::json* hub =
        config.contains("quantization_config") ? &config["quantization_config"] : nullptr;
    if (!gpt_oss) {
        config["quantization_config"] = q;
    } else if (hub == nullptr || !hub->is_object() || hub->value("quant_method", "") != "mxfp4") {
        config["quantization_config"] = {
            {"quant_method", "mxfp4"},
            {"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
    }
    config["sluice_synthetic"] = {{"seed", o.seed}, {"note", "random weights made by sluice synth"}};
    SLUICE_RETURN_IF_ERROR(
        io::write_file_atomic((fs::path(o.out_dir) / "config.json").string(), config.dump(2)));
    std::vector<std::string> side;
    if (!o.tokenizer_dir.empty()) {
        SLUICE_ASSIGN_OR_RETURN(side, copy_model_side_files(o.tokenizer_dir, o.out_dir));
    }
    std::vector<std::string> files = {"config.json", "layout.json", layout.dense_file};
    for (const auto& f : layout.expert_files) files.push_back(f.file);
    files.insert(files.end(), side.begin(), side.end());
    SLUICE_RETURN_IF_ERROR(write_manifest(o.out_dir, files));
    return result;
}

}  // namespace sluice::convert
