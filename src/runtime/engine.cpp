// Engine: loads a model folder into a Model, describes it (ModelInfo), owns the compute threads.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/log.h"
#include "format/gguf_manifest.h"
#include "format/json_text.h"
#include "io/mapped_file.h"
#include "kernels/kernels.h"
#include "runtime/dense_stream.h"
#include "runtime/engine_impl.h"
#include "runtime/memory_plan.h"
#include "runtime/output_tokens.h"
#include "sluice/chat_template.h"
#include "sluice/tokenizer.h"

namespace sluice {

const char* cache_policy_name(CachePolicy policy) {
    return policy == CachePolicy::kLru ? "lru" : "lfu";
}

Expected<CachePolicy> parse_cache_policy(const std::string& name) {
    if (name == "lfu") return CachePolicy::kLfu;
    if (name == "lru") return CachePolicy::kLru;
    return error(ErrorCode::kInvalidArgument, "[engine] cache policy '" + name + "' is not one of lfu, lru");
}

CudaDiagnostics cuda_diagnostics_from_env() {
    auto is = [](const char* name, const char* value) {
        const char* v = std::getenv(name);
        return v != nullptr && std::strcmp(v, value) == 0;
    };
    CudaDiagnostics d;
    d.unfused = is("SLUICE_CUDA_UNFUSED", "1");
    d.simt_matmul = is("SLUICE_CUDA_MATMUL", "simt");
    d.timing = is("SLUICE_CUDA_TIMING", "1");
    d.no_dependent_launch = is("SLUICE_CUDA_PDL", "0");
    if (const char* v = std::getenv("SLUICE_CUDA_MATVEC_SPLIT")) d.matvec_split = std::atoi(v);
    return d;
}

Engine::Engine() : impl_(std::make_unique<Impl>()) {}
Engine::~Engine() = default;

namespace {

// "gguf q8_0 84%, f16 12%, f32 4%": ggml types by the bytes they hold.
std::string describe_ggml_types(const std::string& what, const std::map<std::string, uint64_t>& bytes) {
    uint64_t total = 0;
    std::vector<std::pair<uint64_t, std::string>> by_size;
    for (const auto& [name, b] : bytes) {
        by_size.emplace_back(b, name);
        total += b;
    }
    std::sort(by_size.rbegin(), by_size.rend());
    std::string s = what;
    for (size_t i = 0; i < by_size.size(); ++i)
        s += fmt::format(
            "{} {} {:.0f}%", i ? "," : "", by_size[i].second,
            total ? 100.0 * static_cast<double>(by_size[i].first) / static_cast<double>(total) : 0.0);
    return s;
}

std::string describe_quantization(const model::Model& m) {
    const model::ModelWeights& w = m.weights();
    const model::ModelConfig& c = m.config();
    if (w.gguf) {  // its tensors' ggml types
        std::map<std::string, uint64_t> bytes;
        for (const format::GgufTensor* t : w.gguf->tensors())
            bytes[format::ggml_type_name(t->type)] += t->size_bytes;
        return describe_ggml_types("gguf", bytes);
    }
    // A pack of a GGUF: the same, from layout.json (its experts are in their files, not in weights).
    if (m.packed() && m.packed_layout().source_layout == "gguf") {
        const format::PackLayout& layout = m.packed_layout();
        std::map<std::string, uint64_t> bytes;
        auto add = [&](const format::PackSection& s, uint64_t count) {
            std::string type =
                s.ggml_type ? format::ggml_type_name(*s.ggml_type) : format::dtype_name(s.dtype);
            if (!s.ggml_type)  // F32 → f32, as ggml spells the element types
                for (char& ch : type) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            bytes[type] += s.size * count;
        };
        for (const format::PackSection& s : layout.dense) add(s, 1);
        for (const format::PackExpertFile& f : layout.expert_files)
            for (const format::PackProjection* p : {&f.gate, &f.up, &f.down})
                add(p->weight, static_cast<uint64_t>(layout.n_experts));
        return describe_ggml_types("gguf pack", bytes);
    }
    const std::string experts = c.mxfp4_experts ? ", routed experts MXFP4" : "";
    if (!c.quantization.present) return kernels::weight_type_name(w.embed.type) + experts;
    std::string s = "mlx affine " + std::to_string(c.quantization.global.bits) + "-bit g" +
                    std::to_string(c.quantization.global.group_size);
    if (!c.quantization.overrides.empty())
        s += " (+" + std::to_string(c.quantization.overrides.size()) + " per-module overrides)";
    return s + experts;
}

// The context a session gets: 0 takes the model's (max_position_embeddings, or what its YaRN
// scaling extends it to) up to kDefaultContext; more than the model runs is refused.
Expected<int64_t> resolve_context(const model::ModelConfig& c, int64_t asked) {
    const int64_t limit = c.context_limit();
    const int64_t context = asked != 0 ? asked : limit > 0 ? std::min(limit, runtime::kDefaultContext) : 4096;
    if (limit > 0 && context > limit) {
        const std::string why =
            c.yarn.enabled ? fmt::format("its YaRN factor {} × original_max_position_embeddings {}",
                                         c.yarn.factor, c.yarn.original_max_positions)
                           : std::string(
                                 "max_position_embeddings; a config with YaRN rope scaling (rope_type yarn) "
                                 "extends it");
        return error(
            ErrorCode::kInvalidArgument,
            fmt::format("[engine] a context of {} tokens is more than this model's {} ({}): lower --ctx-size",
                        context, limit, why));
    }
    return context;
}

// The memory plan: dense (mapped, fully touched during decode) + each session's state (KV,
// DeltaNet state and its turn checkpoints) and scratch; a streaming model's expert cache gets the
// rest. An error naming the numbers when the budget cannot hold the sessions' state or, streamed,
// the dense core and one expert slot besides.
Expected<MemoryPlan> make_plan(const model::ModelConfig& c, const model::StateLayout& layout,
                               const PlannedWeights& w, bool streaming, const EngineOptions& options,
                               int64_t context) {
    MemoryPlan plan;
    plan.streaming = streaming;
    plan.dense_bytes = w.dense_bytes;
    plan.sessions = std::max(1, options.max_sessions);
    plan.context_tokens = context;
    // Per session: KV per context token for attention layers (and the f16 window's ring); the
    // DeltaNet conv + recurrent state twice (committed and being written) plus the snapshots a
    // session keeps at turn boundaries.
    const auto checkpoints = static_cast<int64_t>(runtime::kSessionCheckpoints);
    const auto sessions = static_cast<uint64_t>(plan.sessions);
    plan.state_bytes = layout.sequence_bytes(context, checkpoints) * sessions;
    plan.kv_type = kernels::kv_type_name(layout.kv);
    plan.kv_window = layout.kv_window;
    plan.kv_bytes_per_token = layout.per_position_bytes(1);
    if (options.mtp && c.mtp_layers > 0) {
        // The MTP head beside each session: its layer's KV (one attention layer's) and, per token the
        // target computed but the head has not consumed yet, that token's f32 hidden row.
        int64_t attention_layers = 0;
        for (int64_t l = 0; l < c.n_layers; ++l) attention_layers += c.is_full_attention(l) ? 1 : 0;
        const uint64_t mtp_per_token =
            layout.per_position_bytes(1) / static_cast<uint64_t>(std::max<int64_t>(attention_layers, 1)) +
            sizeof(float) * static_cast<uint64_t>(c.hidden);
        plan.kv_bytes_per_token += mtp_per_token;
        plan.state_bytes += mtp_per_token * static_cast<uint64_t>(context) * sessions;
    }
    plan.scratch_bytes = runtime::scratch_bytes_estimate(c, 256) * sessions;
    plan.budget_bytes = options.memory_bytes;
    if (plan.budget_bytes == 0) {
        // Unset: 80% of what the OS says is available.
        plan.budget_bytes = runtime::available_memory_bytes() / 10 * 8;
    }
    plan.runtime_bytes = 64ull << 20;
    // A dense core the budget cannot hold beside the rest and two layers' routed experts is streamed
    // layer by layer (EngineOptions::dense_streaming; the CPU only): it then holds its embeddings,
    // lm_head and norms, and a window of layers — the one running and the ones read ahead.
    using DenseStreaming = EngineOptions::DenseStreaming;
    constexpr int64_t kDenseWindowLayers = 3;
    const bool can_stream_dense = streaming && w.layers_dense_bytes > 0 && options.device == "cpu";
    if (options.dense_streaming == DenseStreaming::kOn && !can_stream_dense)
        return error(ErrorCode::kInvalidArgument,
                     "[engine] streaming the dense core needs a packed (streamed) model on the CPU");
    const uint64_t held_layers =
        std::min<uint64_t>(w.layers_dense_bytes, kDenseWindowLayers * w.max_layer_dense_bytes);
    const uint64_t two_layers_experts =
        2 * static_cast<uint64_t>(std::max<int64_t>(c.top_k, 1)) * w.record_bytes;
    if (can_stream_dense && (options.dense_streaming == DenseStreaming::kOn ||
                             (options.dense_streaming == DenseStreaming::kAuto &&
                              plan.budget_bytes < plan.dense_bytes + plan.state_bytes + plan.scratch_bytes +
                                                      plan.runtime_bytes + two_layers_experts))) {
        plan.dense_streamed_bytes = w.layers_dense_bytes;
        plan.dense_window_layers = kDenseWindowLayers;
        plan.dense_bytes = plan.dense_bytes - w.layers_dense_bytes + held_layers;
    }
    const uint64_t fixed = plan.dense_bytes + plan.state_bytes + plan.scratch_bytes + plan.runtime_bytes;
    // The sessions' state is allocated up front: a context it cannot hold is an error naming what
    // fits, not an allocation failure later (a streamed model's dense core is in RAM too, and so
    // is one expert slot at least).
    const uint64_t others =
        plan.scratch_bytes + plan.runtime_bytes + (streaming ? plan.dense_bytes + w.record_bytes : 0);
    const uint64_t per_token = plan.kv_bytes_per_token * sessions;
    const uint64_t fixed_state = layout.sequence_bytes(0, checkpoints) * sessions;
    const uint64_t room =
        plan.budget_bytes > others + fixed_state ? plan.budget_bytes - others - fixed_state : 0;
    plan.max_context_tokens = per_token > 0 ? static_cast<int64_t>(room / per_token) : context;
    if (c.context_limit() > 0) plan.max_context_tokens = std::min(plan.max_context_tokens, c.context_limit());
    if (streaming &&
        plan.budget_bytes < plan.scratch_bytes + plan.runtime_bytes + plan.dense_bytes + w.record_bytes)
        return error(
            ErrorCode::kOutOfMemory,
            fmt::format("[engine] the dense core ({}: attention, routers, shared experts, embeddings — "
                        "{}) with one expert slot ({}) and the forward's scratch ({}) "
                        "exceed the budget of {}, before any context: raise --memory or store the "
                        "weights in fewer bits",
                        human_bytes(plan.dense_bytes),
                        plan.dense_streamed_bytes > 0 ? "what stays in memory while its layers stream"
                                                      : "always in memory",
                        human_bytes(w.record_bytes), human_bytes(plan.scratch_bytes + plan.runtime_bytes),
                        human_bytes(plan.budget_bytes)));
    if (plan.budget_bytes <
        plan.scratch_bytes + plan.runtime_bytes + (streaming ? plan.dense_bytes : 0) + plan.state_bytes) {
        // A hybrid model's sessions also hold their recurrent (DeltaNet) state and its turn snapshots
        // whatever the context: Qwen3-Next-80B's is ~475 MB a session, so sessions, not tokens, can be
        // what does not fit (8 sessions under 3 GB); then the advice is fewer sessions, not fewer tokens.
        const std::string recurrent =
            fixed_state > 0 ? fmt::format(
                                  ", and {} a session of recurrent state with its {} snapshots whatever "
                                  "the context",
                                  human_bytes(fixed_state / sessions), checkpoints)
                            : std::string();
        const uint64_t after_others = plan.budget_bytes > others ? plan.budget_bytes - others : 0;
        const bool no_context = plan.max_context_tokens == 0;  // fewer KV bits would not help
        std::string advice;
        if (no_context) {
            advice = fmt::format(
                " (the forward's scratch and runtime{} take {}, leaving {} for the sessions' fixed state of "
                "{}): {}",
                streaming ? ", the dense core and an expert slot" : "", human_bytes(others),
                human_bytes(after_others), human_bytes(fixed_state),
                sessions > 1 && fixed_state > 0 && plan.budget_bytes > others
                    ? "run fewer sessions at once (serve --parallel) or raise --memory"
                    : "raise --memory");
        } else {
            advice = fmt::format(
                ": lower --ctx-size, store KV in fewer bits (--kv-bits 8, 4 or 3){} or raise "
                "--memory",
                sessions > 1 ? ", run fewer sessions at once" : "");
        }
        return error(
            ErrorCode::kOutOfMemory,
            fmt::format("[engine] a context of {} tokens needs {} of session state ({} session(s): {} "
                        "KV, {} per token{}); a budget of {} holds about {} tokens{}",
                        context, human_bytes(plan.state_bytes), plan.sessions, plan.kv_type,
                        human_bytes(plan.kv_bytes_per_token), recurrent, human_bytes(plan.budget_bytes),
                        plan.max_context_tokens, advice));
    }
    // The prefix cache (runtime/prefix_cache.h): what was asked for, which must fit beside the rest
    // (and one expert slot), or by default a sixteenth of the budget, at most 1 GiB, within what the
    // rest leaves — for a streamed model, within a sixteenth of what the rest leaves: its expert cache,
    // which gets what remains, is what makes a small budget run (a default of a sixteenth of the budget
    // took all but one slot of an 86 MB budget's expert cache on the default model).
    const uint64_t least = fixed + (streaming ? w.record_bytes : 0);
    const uint64_t spare = plan.budget_bytes > least ? plan.budget_bytes - least : 0;
    if (options.prefix_cache_bytes) {
        plan.prefix_cache_bytes = *options.prefix_cache_bytes;
        // (A budget the rest alone exceeds fails below, naming the dense core, or holds a resident
        // model's mapped weights as it does without a prefix cache.)
        if (plan.prefix_cache_bytes > spare && plan.budget_bytes >= least)
            return error(
                ErrorCode::kOutOfMemory,
                fmt::format("[engine] a prefix cache of {} does not fit: a budget of {} leaves {} beside "
                            "the dense core {}, session state {}, scratch {} and the runtime {}{}; "
                            "lower --prefix-cache or raise --memory",
                            human_bytes(plan.prefix_cache_bytes), human_bytes(plan.budget_bytes),
                            human_bytes(spare), human_bytes(plan.dense_bytes), human_bytes(plan.state_bytes),
                            human_bytes(plan.scratch_bytes), human_bytes(plan.runtime_bytes),
                            streaming ? " and one expert slot" : ""));
    } else {
        plan.prefix_cache_bytes =
            std::min({plan.budget_bytes / 16, uint64_t{1} << 30, streaming ? spare / 16 : spare});
    }
    if (streaming) {
        const uint64_t slot = w.record_bytes;
        if (plan.budget_bytes < fixed + slot) {
            return error(
                ErrorCode::kOutOfMemory,
                fmt::format(
                    "[engine] a memory budget of {} does not fit this model: the dense core needs {}, "
                    "session state {}, scratch {} and the runtime {} before any expert cache (at least {} "
                    "in all); raise --memory or lower --ctx-size",
                    human_bytes(plan.budget_bytes), human_bytes(plan.dense_bytes),
                    human_bytes(plan.state_bytes), human_bytes(plan.scratch_bytes),
                    human_bytes(plan.runtime_bytes), human_bytes(fixed + slot)));
        }
        plan.slot_bytes = slot;
        plan.cache_slots = static_cast<int64_t>(
            (plan.budget_bytes - fixed - std::min(plan.prefix_cache_bytes, spare)) / slot);
        plan.cache_slots = std::min(plan.cache_slots, w.expert_records);
        if (options.expert_cache_bytes > 0)
            plan.cache_slots = std::max<int64_t>(1, static_cast<int64_t>(options.expert_cache_bytes / slot));
        plan.cache_bytes = static_cast<uint64_t>(plan.cache_slots) * slot;
    } else {
        plan.dense_bytes += w.expert_bytes;  // resident (mapped) experts
    }
    return plan;
}

// Tokens one batched forward of several sessions takes at most: a 256-token prefill chunk (the
// default) beside the running streams' decode tokens; a longer step runs alone.
constexpr int64_t kBatchTokens = 512;

// The plan for the context asked for; with none asked (0), the model's default context or, when the
// budget cannot hold that, the longest one it can (down to kMinDefaultContext) — a default that
// fits instead of an error.
constexpr int64_t kMinDefaultContext = 256;
Expected<MemoryPlan> plan_with_context(const model::ModelConfig& c, const model::StateLayout& layout,
                                       const PlannedWeights& w, bool streaming,
                                       const EngineOptions& options) {
    SLUICE_ASSIGN_OR_RETURN(const int64_t context, resolve_context(c, options.context_tokens));
    Expected<MemoryPlan> plan = make_plan(c, layout, w, streaming, options, context);
    if (plan.has_value() || options.context_tokens != 0 || plan.status().code() != ErrorCode::kOutOfMemory)
        return plan;
    Expected<MemoryPlan> smallest = make_plan(c, layout, w, streaming, options, kMinDefaultContext);
    if (!smallest.has_value()) return plan;  // not even the smallest default: the first error says why
    const int64_t fits = std::min(context, smallest->max_context_tokens);
    Expected<MemoryPlan> fitted = make_plan(c, layout, w, streaming, options, fits);
    if (fitted.has_value())
        log::info(
            "[engine] context {} tokens: the most this budget holds ({} asked by default; --ctx-size or "
            "--memory to choose)",
            fits, context);
    return fitted;
}

Expected<kernels::KvType> kv_type_of(const EngineOptions& options) {
    if (options.context_tokens < 0)
        return error(ErrorCode::kInvalidArgument, "[engine] context_tokens must be >= 0 (0: the model's)");
    kernels::KvType kv_type;
    if (!kernels::kv_type_for_bits(options.kv_bits, &kv_type))
        return error(
            ErrorCode::kInvalidArgument,
            fmt::format("[engine] --kv-bits {}: the KV cache stores 32 (f32), 16 (f16), 8 (q8), 4 (q4) or 3 "
                        "(q3, rotated codebook) bits per element",
                        options.kv_bits));
    if (options.kv_window < 0)
        return error(ErrorCode::kInvalidArgument,
                     fmt::format("[engine] --kv-window {}: a window is 0 (none) or more positions",
                                 options.kv_window));
    return kv_type;
}

// generation_config.json: extra EOS ids (inside the vocabulary) and the sampling defaults. Every
// field is type-checked; a failure names the file and the key.
Status read_generation_config(const std::string& text, const std::string& path, int64_t vocab,
                              std::vector<int32_t>* eos_ids, SamplingParams* d) {
    SLUICE_ASSIGN_OR_RETURN(const nlohmann::json g,
                            format::parse_json_text(text, path, "[engine]", ErrorCode::kInvalidArgument));
    auto bad = [&](const std::string& key, const std::string& what) {
        return error(ErrorCode::kInvalidArgument, "[engine] " + path + ": " + key + ": " + what);
    };
    if (!g.is_object()) return bad("(top level)", "expected an object, got " + format::json_type_of(g));
    if (auto eos = g.find("eos_token_id"); eos != g.end() && !eos->is_null()) {
        const nlohmann::json ids = eos->is_array() ? *eos : nlohmann::json::array({*eos});
        for (const auto& v : ids) {
            if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
                v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
                return bad("eos_token_id", v.dump() + " is not a token id in the vocabulary [0, " +
                                               std::to_string(vocab) + ")");
            eos_ids->push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
    }
    auto number = [&](const char* key, float* out) -> Status {
        auto it = g.find(key);
        if (it == g.end() || it->is_null()) return Status::ok();
        if (!it->is_number() || !std::isfinite(it->get<double>()))
            return bad(key, "expected a number, got " + format::json_type_of(*it) + " " + it->dump());
        *out = it->get<float>();
        return Status::ok();
    };
    bool do_sample = true;
    if (auto it = g.find("do_sample"); it != g.end() && !it->is_null()) {
        if (!it->is_boolean()) return bad("do_sample", "expected true or false, got " + it->dump());
        do_sample = it->get<bool>();
    }
    if (do_sample) {
        d->temperature = 1.0f;
        SLUICE_RETURN_IF_ERROR(number("temperature", &d->temperature));
        if (auto it = g.find("top_k"); it != g.end() && !it->is_null()) {
            if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
                return bad("top_k",
                           "expected an integer in 0.." + std::to_string(INT32_MAX) + ", got " + it->dump());
            d->top_k = static_cast<int32_t>(it->get<int64_t>());
        }
        SLUICE_RETURN_IF_ERROR(number("top_p", &d->top_p));
        SLUICE_RETURN_IF_ERROR(number("min_p", &d->min_p));
    }
    return number("repetition_penalty", &d->repetition_penalty);
}

}  // namespace

Expected<MemoryPlan> plan_memory(const std::string& config_path, const PlannedWeights& weights,
                                 const EngineOptions& options) {
    SLUICE_ASSIGN_OR_RETURN(const kernels::KvType kv_type, kv_type_of(options));
    SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(config_path));
    SLUICE_ASSIGN_OR_RETURN(const model::ModelConfig c, model::parse_model_config(text, config_path));
    if (const char* bad = kernels::kv_shape_error(kv_type, c.kv_cache_dim()))
        return error(ErrorCode::kInvalidArgument,
                     std::string("[engine] a ") + kernels::kv_type_name(kv_type) +
                         " KV cache cannot hold head_dim " + std::to_string(c.kv_cache_dim()) + ": " + bad);
    const model::StateLayout layout = model::state_layout(c, kv_type, options.kv_window);
    return plan_with_context(c, layout, weights, weights.record_bytes > 0, options);
}

Expected<std::shared_ptr<Engine>> Engine::load(const EngineOptions& options) {
    SLUICE_ASSIGN_OR_RETURN(const kernels::KvType kv_type, kv_type_of(options));
    SLUICE_ASSIGN_OR_RETURN(const std::vector<int> devices, runtime::parse_devices(options.device));
    const int device_index = devices.empty() ? -1 : devices[0];
    SLUICE_ASSIGN_OR_RETURN(auto model, model::Model::load(options.model_dir));
    SLUICE_RETURN_IF_ERROR(model->use_kv_type(kv_type, options.kv_window));
    // On the CPU with int8 activations the Q4_0, Q6_K, Q8_0 and MXFP4 products take row tiles
    // (kernels/ggml_tiles.h): the dense core's now, each routed expert's as its read lands (cpu_row_tiles
    // below).
    const bool cpu_int8 = options.cpu_int8_activations && device_index < 0;
    model->use_activations(cpu_int8 ? kernels::Activations::kInt8 : kernels::Activations::kF32);
    if (cpu_int8) {
        if (const uint64_t tiled = model->use_row_tiles(); tiled > 0)
            log::debug("[engine] {:.1f} MB of dense weights as row tiles", static_cast<double>(tiled) / 1e6);
    }
    auto engine = std::shared_ptr<Engine>(new Engine());
    Impl& im = *engine->impl_;
    im.options = options;
    const model::ModelConfig& c = model->config();
    ModelInfo& info = im.info;
    info.family = model::family_name(c.family);
    info.layout = model::layout_name(model->weights().layout);
    info.quantization = describe_quantization(*model);
    info.vocab_size = c.vocab;
    info.hidden_size = c.hidden;
    info.n_layers = c.n_layers;
    for (int64_t l = 0; l < c.n_layers; ++l) {
        info.n_full_attention_layers += c.is_full_attention(l) && c.window_of(l) == 0;
        info.n_sliding_window_layers += c.window_of(l) > 0;
    }
    info.sliding_window = c.sliding_window;
    info.n_experts = c.n_experts;
    info.experts_per_token = c.top_k;
    info.dense_bytes = model->weights().dense_bytes;
    info.expert_bytes = model->weights().expert_bytes;
    info.eos_token_ids = c.eos_token_ids;
    // Routed experts stream from a packed folder's expert files or straight out of a GGUF (its
    // blk.N.ffn_*_exps slices, read in place); a dense model (none) has nothing to stream.
    std::vector<experts::ExpertLayerSource> sources;
    if (model->packed()) {
        SLUICE_ASSIGN_OR_RETURN(sources,
                                experts::expert_sources_from_pack(options.model_dir, model->packed_layout()));
    } else if (const auto& gguf = model->weights().gguf; gguf && c.n_experts > 0) {
        std::string why;
        SLUICE_ASSIGN_OR_RETURN(auto manifest, format::gguf_manifest_for_reads(*gguf, &why));
        if (!manifest)
            log::warn(
                "[engine] {}: {}; streamed experts are not checked against checksums (`sluice verify {}` "
                "writes the manifest)",
                options.model_dir, why, options.model_dir);
        SLUICE_ASSIGN_OR_RETURN(sources, experts::expert_sources_from_gguf(
                                             *gguf, c.n_layers, manifest ? &manifest->experts : nullptr));
    }
    const bool streaming = !sources.empty();
    PlannedWeights w;
    w.dense_bytes = model->weights().dense_bytes;
    w.expert_bytes = model->weights().expert_bytes;
    // The decoder layers' own mapped weights: what streaming the dense core would read per token.
    std::vector<std::vector<model::MappedRange>> layer_ranges;
    if (streaming && device_index < 0) {
        for (int64_t l = 0; l < c.n_layers + c.mtp_layers; ++l) {
            layer_ranges.push_back(model->layer_mapped_ranges(l));
            uint64_t bytes = 0;
            for (const model::MappedRange& r : layer_ranges.back()) bytes += r.bytes;
            if (l >= c.n_layers) continue;  // the MTP head's layer stays with the rest
            w.layers_dense_bytes += bytes;
            w.max_layer_dense_bytes = std::max(w.max_layer_dense_bytes, bytes);
        }
    }
    if (streaming) {
        w.record_bytes = experts::ExpertStore::slot_bytes_for(sources);
        for (const auto& s : sources) w.expert_records += s.n_experts;
    }
    SLUICE_ASSIGN_OR_RETURN(im.plan, plan_with_context(c, model->state_layout(), w, streaming, options));
    im.options.context_tokens = im.plan.context_tokens;
    const MemoryPlan& plan = im.plan;
    if (plan.streaming) {
        experts::ExpertStoreOptions so;
        so.cache_bytes = plan.cache_bytes;
        so.io_threads = options.io_threads;
        so.prefetch = options.prefetch;
        so.verify_reads = options.verify_reads;
        so.verify_first_reads = options.verify_first_reads;
        so.policy = options.cache_policy;
        so.cpu_row_tiles = cpu_int8;
        so.floor_bytes = options.memory_floor_bytes > 0
                             ? options.memory_floor_bytes
                             : static_cast<uint64_t>(std::max<int64_t>(c.top_k, 1)) * plan.slot_bytes;
        SLUICE_ASSIGN_OR_RETURN(im.store, experts::ExpertStore::open(std::move(sources), so));
        model->set_expert_source(im.store.get());
        im.experts_stream = !im.store->holds_every_expert();
        if (options.preload_experts) {
            const uint64_t queued = im.store->preload();
            if (queued > 0)
                log::debug("[engine] every expert fits the cache: reading all {} MB in the background",
                           queued >> 20);
        }
    }
    if (plan.dense_streamed_bytes > 0) {
        im.dense_streamer = std::make_unique<runtime::DenseLayerStreamer>(std::move(layer_ranges), c.n_layers,
                                                                          plan.dense_window_layers);
        model->set_layer_observer(im.dense_streamer.get());
        log::info(
            "[engine] the dense core streams layer by layer: {} of its layers' weights read per token, "
            "{} layers resident at a time",
            human_bytes(plan.dense_streamed_bytes), plan.dense_window_layers);
    }
    im.model = std::move(model);
    int threads =
        options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
    im.pool = std::make_unique<ThreadPool>(threads > 0 ? threads : 1);
    if (device_index < 0) {
        im.backend = runtime::make_cpu_backend(im.model, im.pool.get());
    } else {
        runtime::CudaBackendOptions co;
        co.device_index = device_index;
        if (devices.size() > 1) {
            co.devices = devices;
            // The group's ranks wait for each other inside kernels: CUDA must load modules eagerly
            // (runtime/cuda/collective.h). Takes effect when this is the process's first use of CUDA; the
            // group refuses lazy loading otherwise, saying so. A value the user set is kept.
            setenv("CUDA_MODULE_LOADING", "EAGER", 0);
        }
        co.gpu_memory_bytes = options.gpu_memory_bytes;
        co.context_tokens = im.options.context_tokens;
        co.expert_cache_bytes = options.gpu_expert_cache_bytes;
        co.prefetch = options.prefetch;
        co.cache_policy = options.cache_policy;
        co.int8_prefill = options.gpu_int8_prefill;
        co.diagnostics = options.cuda_diagnostics;
        SLUICE_ASSIGN_OR_RETURN(im.backend, runtime::make_cuda_backend(im.model, co));
    }
    // Several sessions at once: their forwards are batched (runtime/step_batcher.h). The budget
    // takes a prefill chunk and the decode tokens of the others beside it. On CUDA a batch of up to 16
    // decode rows runs the decode kernels over every row (each weight read once per launch) as a graph
    // per batch shape; before those, a few rows took the prefill kernels and cost far more than the
    // decode graphs they replaced (35B on an H100: 4 rows in 17.6 ms against 3.1 ms for one).
    if (options.max_sessions > 1)
        im.batcher =
            std::make_unique<runtime::StepBatcher>(im.backend.get(), &im.compute_mutex, kBatchTokens);
    if (plan.prefix_cache_bytes > 0)
        im.prefix_cache = std::make_unique<runtime::PrefixCache>(plan.prefix_cache_bytes);
    if (options.mtp) {
        if (!im.model->has_mtp())
            return error(ErrorCode::kInvalidArgument,
                         "[engine] " + options.model_dir +
                             " has no multi-token-prediction head (no mtp.* tensors: mlx-lm conversions drop "
                             "it; pack the original Hugging Face checkpoint to keep it)");
        if (!im.backend->runs_mtp())
            return error(ErrorCode::kUnsupported,
                         "[engine] " + im.backend->name() + " does not run multi-token-prediction heads yet");
    }
    // The host cache follows memory pressure where the forward reads it: on the CPU, and on a GPU
    // whose experts are tiered (its slots in use page-locked one by one, cuda::PinnedHostSlots). A GPU
    // holding every expert read the store only to upload them.
    const bool reads_store = device_index < 0 || im.backend->expert_tier_stats().tiered;
    if (im.store && options.adapt_to_memory_pressure && reads_store) {
        const experts::ExpertCacheCapacity cap = im.store->capacity();
        runtime::PressureController::Options po;
        po.ceiling = static_cast<uint64_t>(cap.max_slots) * cap.slot_bytes;
        po.floor = static_cast<uint64_t>(cap.floor_slots) * cap.slot_bytes;
        if (po.floor < po.ceiling)
            im.pressure = runtime::MemoryPressureMonitor::start(
                po, [store = im.store.get()](uint64_t bytes) { return store->set_cache_bytes(bytes); });
    }
    SLUICE_RETURN_IF_ERROR(engine->load_text_side());
    log::debug("[engine] {} ({}, {}), {} threads, {} kernels, {} activations ({})", info.family, info.layout,
               info.quantization, im.pool->size(), kernels::cpu_kernel_isa(),
               im.model->activations() == kernels::Activations::kInt8 ? "int8" : "f32",
               kernels::cpu_int8_kernel_isa());
    return engine;
}

// Tokenizer, chat template, generation defaults, EOS ids, suppressed ids, fingerprint. A model
// folder without tokenizer.json still runs (token-id interfaces only); a malformed one is an error.
Status Engine::load_text_side() {
    Impl& im = *impl_;
    namespace fs = std::filesystem;
    const std::string& dir = im.options.model_dir;
    std::error_code ec;
    const model::ModelWeights& weights = im.model->weights();
    if (weights.gguf) {
        // A GGUF carries its tokenizer and chat template in its metadata (format/tokenizer_gguf.h); a file
        // without tokenizer.ggml.model runs on token ids only, like a folder without tokenizer.json.
        const std::string first = weights.gguf->files().front()->path();
        if (weights.gguf->metadata().has("tokenizer.ggml.model")) {
            SLUICE_ASSIGN_OR_RETURN(im.tokenizer, Tokenizer::load(first, im.info.vocab_size));
            auto tmpl = ChatTemplate::load(first);
            if (tmpl.has_value()) {
                im.chat_template = std::make_shared<const ChatTemplate>(std::move(tmpl).value());
            } else if (tmpl.status().code() != ErrorCode::kNotFound) {
                return tmpl.status();
            }
        }
    } else if (fs::exists(fs::path(dir) / "tokenizer.json", ec)) {
        SLUICE_ASSIGN_OR_RETURN(im.tokenizer, Tokenizer::load(dir, im.info.vocab_size));
        auto tmpl = ChatTemplate::load(dir);
        if (tmpl.has_value()) {
            im.chat_template = std::make_shared<const ChatTemplate>(std::move(tmpl).value());
        } else if (tmpl.status().code() != ErrorCode::kNotFound) {
            return tmpl.status();
        }
    }
    im.eos_ids = im.info.eos_token_ids;
    im.default_sampling.temperature = 0.0f;  // greedy unless the model says otherwise
    const fs::path gen_path = fs::path(dir) / "generation_config.json";
    if (fs::exists(gen_path, ec)) {
        SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(gen_path.string()));
        SLUICE_RETURN_IF_ERROR(read_generation_config(text, gen_path.string(), im.info.vocab_size,
                                                      &im.eos_ids, &im.default_sampling));
    }
    // The tokenizer's eos token ends a sequence too; other special tokens are suppressed, except the
    // markup of harmony's replies (runtime/output_tokens.h).
    runtime::OutputTokens ends =
        runtime::output_tokens(im.tokenizer.get(), std::move(im.eos_ids), im.info.vocab_size);
    im.eos_ids = std::move(ends.eos_ids);
    im.suppressed_ids = std::move(ends.suppressed_ids);
    auto config_text = io::read_text_file((fs::path(dir) / "config.json").string());
    std::string description = config_text.has_value() ? *config_text : std::string();
    if (weights.gguf) {  // the metadata and tensor infos: what config.json is to a folder
        const format::GgufFile& f = *weights.gguf->files().front();
        const auto file = io::MappedFile::open(f.path());
        if (file.has_value())
            description.assign(
                reinterpret_cast<const char*>((*file)->data()),
                static_cast<size_t>(std::min<uint64_t>(f.header().data_start, (*file)->size())));
    }
    const std::string identity =
        description + "|" + std::to_string(im.info.dense_bytes) + "|" + std::to_string(im.info.expert_bytes);
    im.fingerprint = XXH3_64bits(identity.data(), identity.size());
    if (config_text.has_value()) {
        auto cfg = nlohmann::json::parse(*config_text, nullptr, false);
        im.info.synthetic = cfg.is_object() && cfg.contains("sluice_synthetic");
    }
    return Status::ok();
}

const SamplingParams& Engine::default_sampling() const {
    return impl_->default_sampling;
}
const std::vector<int32_t>& Engine::eos_token_ids() const {
    return impl_->eos_ids;
}

const ModelInfo& Engine::info() const {
    return impl_->info;
}
const EngineOptions& Engine::options() const {
    return impl_->options;
}
std::shared_ptr<const Tokenizer> Engine::tokenizer() const {
    return impl_->tokenizer;
}
std::shared_ptr<const ChatTemplate> Engine::chat_template() const {
    return impl_->chat_template;
}
const char* Engine::cpu_kernels() {
    return kernels::cpu_kernel_isa();
}
std::string Engine::backend_name() const {
    return impl_->backend->name();
}
uint64_t Engine::device_weight_bytes() const {
    return impl_->backend->device_weight_bytes();
}
uint64_t Engine::device_decode_bytes_per_token() const {
    return impl_->backend->decode_bytes_per_token();
}
GpuExpertCacheStats Engine::gpu_expert_cache_stats() const {
    std::lock_guard<std::mutex> lock(impl_->compute_mutex);
    return impl_->backend->expert_tier_stats();
}
double Engine::measure_device_memory_gb_s() const {
    std::lock_guard<std::mutex> lock(impl_->compute_mutex);
    return impl_->backend->measure_memory_gb_s();
}
double Engine::measure_all_reduce_us(int64_t rows) const {
    std::lock_guard<std::mutex> lock(impl_->compute_mutex);
    return impl_->backend->measure_all_reduce_us(rows);
}
const MemoryPlan& Engine::memory_plan() const {
    return impl_->plan;
}

ExpertCacheStats Engine::expert_cache_stats() const {
    ExpertCacheStats out;
    if (!impl_->store) return out;
    const experts::ExpertStoreStats s = impl_->store->stats();
    out.hits = s.hits;
    out.misses = s.misses;
    out.bytes_read = s.bytes_read;
    out.reads = s.reads;
    out.io_busy_s = s.io_busy_s;
    out.stall_s = s.stall_s;
    out.prefetch_issued = s.prefetch_issued;
    out.prefetch_used = s.prefetch_used;
    out.prefetch_wasted = s.prefetch_wasted;
    out.evictions = s.evictions;
    out.prefetch_canceled = s.prefetch_canceled;
    return out;
}

BatchingStats Engine::batching_stats() const {
    if (!impl_->batcher) return {};
    const runtime::StepBatcher::Counters c = impl_->batcher->counters();
    return BatchingStats{c.forwards, c.steps, c.tokens};
}

PrefixCacheStats Engine::prefix_cache_stats() const {
    if (!impl_->prefix_cache) return {};
    return impl_->prefix_cache->stats();
}

void Engine::clear_prefix_cache() {
    if (impl_->prefix_cache) impl_->prefix_cache->clear();
}

MemoryPressureStatus Engine::memory_pressure() const {
    MemoryPressureStatus out;
    if (!impl_->store) return out;
    const experts::ExpertCacheCapacity cap = impl_->store->capacity();
    out.ceiling_bytes = static_cast<uint64_t>(cap.max_slots) * cap.slot_bytes;
    out.floor_bytes = static_cast<uint64_t>(cap.floor_slots) * cap.slot_bytes;
    out.budget_bytes = static_cast<uint64_t>(cap.target_slots) * cap.slot_bytes;
    out.cache_bytes = static_cast<uint64_t>(cap.active_slots) * cap.slot_bytes;
    out.bytes_returned = impl_->store->stats().bytes_returned;
    if (impl_->pressure) {
        const runtime::MemoryPressureStats s = impl_->pressure->stats();
        out.adaptive = true;
        out.source = s.source;
        out.pressure_events = s.pressure_events;
        out.grows = s.grows;
        out.available_bytes = s.available_bytes;
    }
    return out;
}

void Engine::wait_for_expert_reads() {
    if (impl_->store) impl_->store->wait_idle();
}

void Engine::reset_expert_cache_stats() {
    if (impl_->store) impl_->store->reset_stats();
    std::lock_guard<std::mutex> lock(impl_->compute_mutex);
    impl_->backend->reset_expert_tier_stats();
}

std::unique_ptr<Session> Engine::new_session() {
    auto impl = std::make_unique<Session::Impl>();
    impl->engine = shared_from_this();
    impl->context_tokens = impl_->options.context_tokens;
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Expected<std::unique_ptr<Session>> Engine::new_session(const SessionOptions& options) {
    const model::StateLayout& engine_layout = impl_->model->state_layout();
    const int64_t window = options.kv_window >= 0 ? options.kv_window : impl_->options.kv_window;
    std::unique_ptr<Session> session = new_session();
    if (options.kv_bits == 0 && options.kv_window < 0) return session;
    kernels::KvType type = engine_layout.kv;
    if (options.kv_bits != 0 && !kernels::kv_type_for_bits(options.kv_bits, &type))
        return error(
            ErrorCode::kInvalidArgument,
            fmt::format("[session] kv_bits {}: the KV cache stores 32 (f32), 16 (f16), 8 (q8), 4 (q4) "
                        "or 3 (q3, rotated codebook) bits per element",
                        options.kv_bits));
    SLUICE_ASSIGN_OR_RETURN(model::StateLayout layout, impl_->model->layout_for(type, window));
    // The plan reserved each session the engine layout's state at this context; a session may use
    // any layout that fits in it.
    const int64_t ctx = impl_->options.context_tokens;
    const auto snapshots = static_cast<int64_t>(runtime::kSessionCheckpoints);
    const uint64_t need = layout.sequence_bytes(ctx, snapshots);
    const uint64_t reserved = engine_layout.sequence_bytes(ctx, snapshots);
    if (need > reserved)
        return error(
            ErrorCode::kInvalidArgument,
            fmt::format("[session] a {} KV cache{} needs {} of state at a context of {} tokens; the "
                        "memory plan reserves {} per session (the engine's {} cache: load it with a "
                        "larger --kv-bits to allow this one)",
                        kernels::kv_type_name(type),
                        layout.kv_window > 0 ? fmt::format(" with a {}-position f16 window", layout.kv_window)
                                             : std::string(),
                        human_bytes(need), ctx, human_bytes(reserved),
                        kernels::kv_type_name(engine_layout.kv)));
    session->impl_->layout = std::move(layout);
    return session;
}

}  // namespace sluice
