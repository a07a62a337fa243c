// The decoder skeleton shared by the three families (models.md §1.8): embedding lookup, layers,
// final norm and lm_head. The mixers and the MoE live in attention.cpp, gated_deltanet.cpp, moe.cpp.
#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "kernels/ggml_tiles.h"
#include "kernels/kernels.h"
#include "kernels/weight_format.h"
#include "model/config_gguf.h"
#include "model/tensor_map.h"
#include "model/weights_gguf.h"
#include "model/workspace.h"

namespace sluice::model {

void ModelState::reset() {
    n_past = 0;
    for (auto& l : layers) {
        std::fill(l.conv.begin(), l.conv.end(), 0.0f);
        std::fill(l.recurrent.begin(), l.recurrent.end(), 0.0f);
        // KV entries past n_past are never read, so the caches need no clearing; ring rows are
        // read by their tags, so those must say "none".
        if (!l.recent.empty()) {
            int64_t* tags = ring(l).tags;
            std::fill(tags, tags + ring_slots, int64_t{-1});
        }
    }
}

ModelState::Ring ModelState::ring(Layer& layer) const {
    uint8_t* k = layer.recent.data();
    uint8_t* v = k + ring_slots * ring_row_bytes;
    return {k, v, reinterpret_cast<int64_t*>(v + ring_slots * ring_row_bytes)};
}

void ModelState::commit(int64_t n, bool out_of_place) {
    if (out_of_place) {
        for (auto& l : layers) {
            l.conv.swap(l.conv_next);
            l.recurrent.swap(l.recurrent_next);
        }
    }
    n_past += n;
}

uint64_t ModelState::bytes() const {
    uint64_t total = 0;
    for (const auto& l : layers)
        total += l.k_cache.size() + l.v_cache.size() + l.recent.size() +
                 4 * (l.conv.size() + l.recurrent.size() + l.conv_next.size() + l.recurrent_next.size());
    return total;
}

Status check_pack_layout(const ModelConfig& c, const format::PackLayout& layout, const std::string& dir) {
    const std::string where = "[model] " + dir + ": layout.json";
    auto corrupt = [&](const std::string& what) { return error(ErrorCode::kCorrupt, where + " " + what); };
    const int64_t n_layers = c.n_layers + c.mtp_layers;  // the MTP layer's experts: index n_layers
    std::vector<int> seen(static_cast<size_t>(n_layers), 0);
    for (const format::PackExpertFile& f : layout.expert_files) {
        const std::string layer = "layer " + std::to_string(f.layer);
        if (f.layer < 0 || f.layer >= n_layers)
            return corrupt("has an expert file for " + layer + " of a " + std::to_string(c.n_layers) +
                           "-layer model (config.json)" +
                           (c.mtp_layers > 0 ? " with " + std::to_string(c.mtp_layers) + " MTP layer" : ""));
        if (!c.is_moe_layer(f.layer))
            return corrupt("has experts for " + layer + ", a dense layer in config.json");
        if (seen[static_cast<size_t>(f.layer)]++ != 0) return corrupt("lists " + layer + " twice");
        const struct {
            const char* name;
            const format::PackProjection& p;
            int64_t rows, cols;
        } projections[] = {{"gate_proj", f.gate, c.expert_ffn, c.hidden},
                           {"up_proj", f.up, c.expert_ffn, c.hidden},
                           {"down_proj", f.down, c.hidden, c.expert_ffn}};
        for (const auto& [name, p, rows, cols] : projections) {
            const std::string what = layer + " " + name;
            if (p.rows != rows || p.cols != cols)
                return corrupt("says " + what + " is [" + std::to_string(p.rows) + ", " +
                               std::to_string(p.cols) + "], config.json [" + std::to_string(rows) + ", " +
                               std::to_string(cols) + "]");
            // The packer quantizes as config.json's quantization block says (keeping float only what
            // the group size does not divide); a pack without the block is float, or (a GGUF's) the
            // file's ggml blocks, whose registry check is the expert store's.
            const QuantSpec spec =
                c.quantization.present
                    ? c.quantization.for_module(tensor_names_for(c).layer(f.layer) +
                                                tensor_names_for(c).stacked_experts() + name)
                    : QuantSpec{};
            const bool as_config = p.bits == spec.bits && (p.bits == 0 || p.group_size == spec.group_size);
            const bool kept_float = p.bits == 0 && spec.group_size > 0 && cols % spec.group_size != 0;
            // gpt-oss's MXFP4 experts stay MXFP4 (ggml blocks) whatever the dense weights were packed to.
            const bool mxfp4 = c.mxfp4_experts && p.ggml_type == format::GgmlType::kMXFP4;
            if (!as_config && !kept_float && !mxfp4)
                return corrupt(
                    "says " + what + " is " +
                    (p.bits        ? std::to_string(p.bits) + "-bit group " + std::to_string(p.group_size)
                     : p.ggml_type ? std::string("ggml ") + format::ggml_type_name(*p.ggml_type)
                                   : std::string("float")) +
                    ", config.json's quantization " +
                    (spec.bits ? std::to_string(spec.bits) + "-bit group " + std::to_string(spec.group_size)
                               : std::string("none")));
        }
    }
    for (int64_t l = 0; l < n_layers; ++l)
        if (c.is_moe_layer(l) && seen[static_cast<size_t>(l)] == 0)
            return corrupt("has no expert file for MoE layer " + std::to_string(l));
    return Status::ok();
}

Status check_pack_dense(const format::PackLayout& layout, const format::Checkpoint& dense,
                        const std::string& dir) {
    const std::string where = "[model] " + dir + ": layout.json dense tensor '";
    for (const format::PackSection& s : layout.dense) {
        const format::TensorInfo* t = dense.find(s.name);
        if (t == nullptr)
            return error(ErrorCode::kCorrupt, where + s.name + "' is not in " + layout.dense_file);
        if (t->dtype != s.dtype || t->shape != s.shape || t->size_bytes != s.size || t->offset != s.offset)
            return error(ErrorCode::kCorrupt,
                         where + s.name + "': layout.json says " + format::dtype_name(s.dtype) + " of " +
                             std::to_string(s.size) + " bytes at " + std::to_string(s.offset) + ", " +
                             layout.dense_file + " " + format::dtype_name(t->dtype) + " of " +
                             std::to_string(t->size_bytes) + " bytes at " + std::to_string(t->offset));
    }
    return Status::ok();
}

Expected<std::shared_ptr<Model>> Model::load(const std::string& dir) {
    auto model = std::shared_ptr<Model>(new Model());
    if (format::is_gguf_model_path(dir)) {
        SLUICE_ASSIGN_OR_RETURN(auto gguf, format::GgufCheckpoint::open(dir));
        SLUICE_ASSIGN_OR_RETURN(ModelConfig config, load_gguf_model_config(*gguf));
        SLUICE_ASSIGN_OR_RETURN(ModelWeights weights, load_gguf_weights(config, std::move(gguf)));
        return create(std::move(config), std::move(weights), dir);
    }
    // A packed folder's manifest first: config.json is believed only once its checksum matches.
    const bool packed = format::is_packed_dir(dir);
    if (packed) {
        SLUICE_ASSIGN_OR_RETURN(model->packed_layout_, format::open_packed_dir(dir));
    }
    SLUICE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
    std::shared_ptr<format::Checkpoint> checkpoint;
    // A pack of a GGUF holds the GGUF's tensors under their own names, bound as a GGUF's are.
    const bool gguf_pack = packed && model->packed_layout_.source_layout == "gguf";
    if (packed) {
        model->packed_ = true;
        SLUICE_ASSIGN_OR_RETURN(checkpoint,
                                format::Checkpoint::open_files(dir, {model->packed_layout_.dense_file}));
        config.mtp_layers = gguf_pack ? gguf_pack_mtp_layers(config, model->packed_layout_)
                                      : mtp_layers_in(config, *checkpoint);
        SLUICE_RETURN_IF_ERROR(check_pack_layout(config, model->packed_layout_, dir));
        SLUICE_RETURN_IF_ERROR(check_pack_dense(model->packed_layout_, *checkpoint, dir));
        if (model->packed_layout_.n_experts != config.n_experts) {
            return error(ErrorCode::kCorrupt, "[model] " + dir + ": layout.json has " +
                                                  std::to_string(model->packed_layout_.n_experts) +
                                                  " experts per layer, config.json " +
                                                  std::to_string(config.n_experts) +
                                                  " (a pack of another architecture?)");
        }
    } else {
        SLUICE_ASSIGN_OR_RETURN(checkpoint, format::Checkpoint::open(dir));
        config.mtp_layers = mtp_layers_in(config, *checkpoint);
    }
    SLUICE_ASSIGN_OR_RETURN(ModelWeights weights,
                            gguf_pack
                                ? load_gguf_pack_weights(config, model->packed_layout_, std::move(checkpoint))
                                : load_weights(config, std::move(checkpoint), !model->packed_));
    model->dir_ = dir;
    model->state_layout_ = model::state_layout(config);
    model->plan_ = make_plan(config, weights.layout);
    model->config_ = std::move(config);
    model->weights_ = std::move(weights);
    return model;
}

std::shared_ptr<Model> Model::create(ModelConfig config, ModelWeights weights, std::string dir) {
    auto model = std::shared_ptr<Model>(new Model());
    model->dir_ = std::move(dir);
    model->state_layout_ = model::state_layout(config);
    model->plan_ = make_plan(config, weights.layout);
    model->config_ = std::move(config);
    model->weights_ = std::move(weights);
    return model;
}

Expected<StateLayout> Model::layout_for(kernels::KvType type, int64_t kv_window) const {
    if (const char* bad = kernels::kv_shape_error(type, config_.kv_cache_dim()))
        return error(ErrorCode::kInvalidArgument, std::string("[model] a ") + kernels::kv_type_name(type) +
                                                      " KV cache cannot hold head_dim " +
                                                      std::to_string(config_.kv_cache_dim()) + ": " + bad);
    if (kv_window < 0)
        return error(ErrorCode::kInvalidArgument, "[model] --kv-window " + std::to_string(kv_window) +
                                                      ": a window is 0 (none) or more positions");
    return model::state_layout(config_, type, kv_window);
}

Status Model::use_kv_type(kernels::KvType type, int64_t kv_window) {
    SLUICE_ASSIGN_OR_RETURN(state_layout_, layout_for(type, kv_window));
    return Status::ok();
}

void Model::use_activations(kernels::Activations activations) {
    activations_ = activations;
    auto set = [&](WeightView& w) { w.activations = activations; };
    auto set_mlp = [&](ExpertWeights& e) {
        set(e.gate);
        set(e.up);
        set(e.down);
    };
    set(weights_.embed);
    set(weights_.lm_head);
    if (has_mtp()) set(weights_.mtp.fc);
    for (LayerWeights& l : weights_.layers) {
        // Routers and the shared-expert gate stay f32: their products are E (or 1) rows, and their
        // outputs pick experts, where a rounding that flips a top-k choice changes the computation
        // discretely (llama.cpp keeps router weights in f32 for the same reason).
        for (WeightView* w : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj,
                              &l.linear.in_qkvz, &l.linear.in_ba, &l.linear.in_qkv, &l.linear.in_z,
                              &l.linear.in_b, &l.linear.in_a, &l.linear.out_proj, &l.attn.q_a_proj,
                              &l.attn.q_b_proj, &l.attn.kv_a_proj, &l.attn.embed_q, &l.attn.unembed_out})
            set(*w);
        for (ExpertWeights& e : l.moe_w.experts) set_mlp(e);
        set_mlp(l.moe_w.shared);
        set_mlp(l.dense_mlp);
    }
}

uint64_t Model::use_row_tiles() {
    uint64_t bytes = use_dense_row_tiles(&weights_);
    // Resident routed experts held in a buffer of the model's own (gpt-oss's MXFP4 blocks repacked from a
    // Hub checkpoint) are tiled in place, as the expert store tiles a streamed expert in its slot, so an
    // expert gives the same bits resident or streamed. Experts in a read-only file mapping keep their layout.
    auto owned = [&](const void* data) {
        for (const std::vector<uint8_t>& buf : weights_.owned)
            if (data >= buf.data() && data < buf.data() + buf.size()) return true;
        return false;
    };
    std::vector<uint8_t> scratch;
    for (LayerWeights& l : weights_.layers)
        for (ExpertWeights& e : l.moe_w.experts)
            for (WeightView* w : {&e.gate, &e.up, &e.down}) {
                const kernels::WeightType tiled = kernels::tiled_type(*w);
                if (tiled == w->type || w->data == nullptr || !owned(w->data)) continue;
                scratch.resize(kernels::ggml_tile_scratch_bytes(w->type, w->cols));
                kernels::ggml_tile_in_place(w->type, static_cast<uint8_t*>(const_cast<void*>(w->data)),
                                            w->rows, w->cols, scratch.data());
                w->type = tiled;
                bytes += static_cast<uint64_t>(w->rows) * w->row_bytes();
            }
    return bytes;
}

ModelState Model::new_state(int64_t max_positions, const StateLayout& layout) const {
    ModelState s;
    s.max_positions = max_positions;
    s.kv = layout.kv;
    s.kv_window = layout.kv_window;
    s.ring_slots = layout.kv_ring_slots;
    s.ring_row_bytes =
        config_.kv_cache_heads() * kernels::kv_head_bytes(kernels::KvType::kF16, config_.kv_cache_dim());
    s.layers.resize(layout.layers.size());
    for (size_t l = 0; l < layout.layers.size(); ++l) {
        const auto& buffers = layout.layers[l].buffers;
        if (buffers.empty()) continue;  // a layer this state does not hold (mtp_layout)
        auto& st = s.layers[l];
        auto size = [&](int b) { return static_cast<size_t>(buffers[static_cast<size_t>(b)].row_elems()); };
        if (buffers[0].per_position) {
            st.k_cache.assign(static_cast<size_t>(buffers[kKeysBuffer].bytes(max_positions)), 0);
            st.v_cache.assign(static_cast<size_t>(buffers[kValuesBuffer].bytes(max_positions)), 0);
            if (buffers.size() > kRecentBuffer)
                st.recent.assign(static_cast<size_t>(buffers[kRecentBuffer].bytes(0)), 0);
        } else {
            st.conv.assign(size(kConvBuffer), 0.0f);
            st.recurrent.assign(size(kRecurrentBuffer), 0.0f);
            st.conv_next.assign(size(kConvBuffer), 0.0f);
            st.recurrent_next.assign(size(kRecurrentBuffer), 0.0f);
        }
    }
    s.reset();  // empty rings
    return s;
}

Status Model::forward(ModelState& state, std::span<const int32_t> tokens, float* logits, bool all_logits,
                      Workspace& ws, ThreadPool* pool, bool decode_rows) const {
    const SequenceStep step{&state, tokens, logits, all_logits, decode_rows};
    return forward_batch(std::span<const SequenceStep>(&step, 1), ws, pool);
}

namespace {

// Lays the steps out as rows (model.h BatchLayout): single-token steps first, then decode_rows
// steps (their rows singles too), then the longer ones, each group in the caller's order; steps
// without tokens get no rows.
void lay_out(std::span<const SequenceStep> steps, BatchLayout& b) {
    b.parts.clear();
    b.rows = 0;
    for (int pass = 0; pass < 3; ++pass) {
        for (size_t i = 0; i < steps.size(); ++i) {
            const auto n = static_cast<int64_t>(steps[i].tokens.size());
            const int group = n == 1 ? 0 : steps[i].decode_rows ? 1 : 2;
            if (n == 0 || group != pass) continue;
            b.parts.push_back(
                {steps[i].state, static_cast<int64_t>(i), b.rows, n, n > 1 && steps[i].decode_rows});
            b.rows += n;
        }
        if (pass == 1) b.singles = b.rows;
    }
    b.part_of_row.resize(static_cast<size_t>(b.rows));
    for (size_t p = 0; p < b.parts.size(); ++p)
        std::fill_n(b.part_of_row.begin() + b.parts[p].row0, b.parts[p].n, static_cast<int32_t>(p));
}

}  // namespace

StateLayout Model::mtp_layout(const StateLayout& base) const {
    StateLayout layout = base;
    layout.layers.assign(static_cast<size_t>(config_.n_layers + config_.mtp_layers), LayerStateLayout{});
    for (int64_t l = 0; l < config_.n_layers; ++l) {
        if (!config_.is_full_attention(l)) continue;
        for (int64_t m = config_.n_layers; m < config_.n_layers + config_.mtp_layers; ++m)
            layout.layers[static_cast<size_t>(m)] = base.layers[static_cast<size_t>(l)];
        break;
    }
    return layout;
}

Status Model::lay_out_steps(std::span<const SequenceStep> steps, size_t layers, Workspace& ws) const {
    const ModelConfig& c = config_;
    for (size_t i = 0; i < steps.size(); ++i) {
        const SequenceStep& s = steps[i];
        const auto n = static_cast<int64_t>(s.tokens.size());
        if (n == 0) continue;
        if (s.state == nullptr || s.state->layers.size() != layers)
            return error(ErrorCode::kInvalidArgument, "[model] state was made for another model");
        for (size_t j = 0; j < i; ++j) {
            if (steps[j].state == s.state && !steps[j].tokens.empty())
                return error(ErrorCode::kInvalidArgument,
                             "[model] a batch has two steps of one sequence (steps " + std::to_string(j) +
                                 " and " + std::to_string(i) + ")");
        }
        if (s.state->n_past + n > s.state->max_positions) {
            return error(ErrorCode::kInvalidArgument,
                         "[model] context full: " + std::to_string(s.state->n_past) + " + " +
                             std::to_string(n) + " tokens exceed the " +
                             std::to_string(s.state->max_positions) + "-token context");
        }
        for (int64_t t = 0; t < n; ++t) {
            if (s.tokens[t] < 0 || s.tokens[t] >= c.vocab) {
                return error(ErrorCode::kInvalidArgument, "[model] token id " + std::to_string(s.tokens[t]) +
                                                              " is outside the vocabulary [0, " +
                                                              std::to_string(c.vocab) + ")");
            }
        }
    }
    lay_out(steps, ws.batch);
    return Status::ok();
}

Status Model::run_layer(int64_t l, bool out_of_place, float* x, Workspace& ws, ThreadPool* pool) const {
    if (layer_observer_ != nullptr) layer_observer_->before_layer(l);
    Status status = run_layer_program(l, out_of_place, x, ws, pool);
    if (layer_observer_ != nullptr) layer_observer_->after_layer(l);
    return status;
}

Status Model::run_layer_program(int64_t l, bool out_of_place, float* x, Workspace& ws,
                                ThreadPool* pool) const {
    const int64_t H = config_.hidden, n = ws.batch.rows;
    const LayerPlan& P = plan_.layers[static_cast<size_t>(l)];
    const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    float* norm = grow(ws.norm, n * H);
    float* mix = grow(ws.mix, n * H);

    for (int64_t t = 0; t < n; ++t)
        kernels::rms_norm(x + t * H, lw.input_norm.data(), H, P.norm_eps, norm + t * H);
    switch (P.mixer) {
        case MixerKind::kAttention: attention_layer(P.attention, lw, l, ws, pool); break;
        case MixerKind::kGatedDeltaNet: deltanet_layer(P.deltanet, lw, l, out_of_place, ws, pool); break;
        case MixerKind::kLatentAttention: latent_attention_layer(P.latent, lw, l, ws, pool); break;
    }
    for (int64_t i = 0; i < n * H; ++i) x[i] += mix[i];
    predict_next_experts(l, x, ws, pool);

    for (int64_t t = 0; t < n; ++t)
        kernels::rms_norm(x + t * H, lw.post_norm.data(), H, P.norm_eps, norm + t * H);
    moe_layer(P, lw, l, ws, pool);
    if (!ws.moe_status.is_ok()) {
        // The committed states are untouched: nothing is swapped in and no n_past moves.
        Status failed = ws.moe_status;
        ws.moe_status = Status::ok();
        return failed.with_context("[model] layer " + std::to_string(l));
    }
    for (int64_t i = 0; i < n * H; ++i) x[i] += mix[i];
    return Status::ok();
}

Status Model::forward_batch(std::span<const SequenceStep> steps, Workspace& ws, ThreadPool* pool) const {
    const ModelConfig& c = config_;
    const int64_t H = c.hidden;
    SLUICE_RETURN_IF_ERROR(lay_out_steps(steps, static_cast<size_t>(c.n_layers), ws));
    const BatchLayout& b = ws.batch;
    const int64_t n = b.rows;
    if (n == 0) return Status::ok();

    float* x = grow(ws.x, n * H);  // [rows, H] residual stream
    for (const BatchLayout::Part& p : b.parts) {
        const std::span<const int32_t> tokens = steps[static_cast<size_t>(p.step)].tokens;
        for (int64_t t = 0; t < p.n; ++t)
            kernels::dequantize_row(weights_.embed, tokens[t], x + (p.row0 + t) * H);
    }
    if (capture_layers != nullptr) capture_layers->clear();

    // Out of place only when the forward can fail part-way (model.h, ModelState).
    const bool out_of_place = experts_->can_fail();
    for (int64_t l = 0; l < c.n_layers; ++l) {
        SLUICE_RETURN_IF_ERROR(run_layer(l, out_of_place, x, ws, pool));
        if (capture_layers != nullptr) capture_layers->emplace_back(x, x + n * H);
    }
    for (const BatchLayout::Part& p : b.parts) p.state->commit(p.n, out_of_place);
    lm_head(steps, x, weights_.final_norm, plan_.final_norm_eps, ws, pool);
    return Status::ok();
}

Status Model::forward_mtp(ModelState& state, std::span<const int32_t> tokens, const float* hidden,
                          float* logits, bool all_logits, float* hidden_out, Workspace& ws,
                          ThreadPool* pool) const {
    const ModelConfig& c = config_;
    if (!has_mtp())
        return error(ErrorCode::kUnsupported, "[model] " + dir_ + " has no multi-token-prediction head");
    const int64_t H = c.hidden;
    SequenceStep step{&state, tokens, logits, all_logits};
    step.hidden = plan_.mtp_chain_normed ? hidden_out : nullptr;
    const int64_t first_position = state.n_past;
    const std::span<const SequenceStep> steps(&step, 1);
    SLUICE_RETURN_IF_ERROR(lay_out_steps(steps, static_cast<size_t>(c.n_layers + c.mtp_layers), ws));
    const int64_t n = ws.batch.rows;
    if (n == 0) return Status::ok();
    if (hidden == nullptr) return error(ErrorCode::kInvalidArgument, "[model] forward_mtp needs hidden rows");

    // x = fc([norm_embedding(embed(token)); norm_hidden(hidden)]), the embedding half first.
    const MtpWeights& m = weights_.mtp;
    const float eps = plan_.layers[static_cast<size_t>(c.n_layers)].norm_eps;
    float* joined = grow(ws.tmp, n * 2 * H);
    float* row = grow(ws.y, H);
    for (int64_t t = 0; t < n; ++t) {
        kernels::dequantize_row(weights_.embed, tokens[t], row);
        if (plan_.mtp_zero_first_embedding && first_position + t == 0) std::fill(row, row + H, 0.0f);
        kernels::rms_norm(row, m.norm_embedding.data(), H, eps, joined + t * 2 * H);
        kernels::rms_norm(hidden + t * H, m.norm_hidden.data(), H, eps, joined + t * 2 * H + H);
    }
    float* x = grow(ws.x, n * H);
    linear_rows(m.fc, joined, n, ws.batch.singles, x, pool);
    SLUICE_RETURN_IF_ERROR(run_layer(c.n_layers, false, x, ws, pool));
    state.commit(n, false);
    if (hidden_out != nullptr && !plan_.mtp_chain_normed) std::copy(x, x + n * H, hidden_out);
    lm_head(steps, x, m.norm, eps, ws, pool);
    return Status::ok();
}

// Final norm and lm_head for the rows each step wants: every position (logits tool, perplexity,
// verifying proposals) or only the last (generation). A step wanting one row gets matvec, one
// wanting more a matmul over its rows, as alone; the one-row steps share one matvec_batch.
void Model::lm_head(std::span<const SequenceStep> steps, const float* x, const std::vector<float>& norm_w,
                    float eps, Workspace& ws, ThreadPool* pool) const {
    const BatchLayout& b = ws.batch;
    const int64_t H = plan_.hidden, V = config_.vocab;
    for (const BatchLayout::Part& p : b.parts) {
        float* hidden = steps[static_cast<size_t>(p.step)].hidden;
        if (hidden == nullptr) continue;
        for (int64_t t = 0; t < p.n; ++t)
            kernels::rms_norm(x + (p.row0 + t) * H, norm_w.data(), H, eps, hidden + t * H);
    }
    const bool alone = b.parts.size() == 1;
    auto wanted = [&](const BatchLayout::Part& p) -> int64_t {
        const SequenceStep& s = steps[static_cast<size_t>(p.step)];
        if (s.logits == nullptr && !alone) return 0;
        return s.all_logits ? p.n : 1;
    };
    int64_t total = 0, ones = 0;
    for (const BatchLayout::Part& p : b.parts) {
        total += wanted(p);
        if (wanted(p) == 1) ones++;
    }
    // The normed rows: the one-row steps' first, in part order, then each longer step's.
    float* norm = grow(ws.norm, total * H);
    int64_t at = 0;
    for (int pass = 0; pass < 2; ++pass) {
        for (const BatchLayout::Part& p : b.parts) {
            const int64_t rows = wanted(p);
            if (rows == 0 || (rows == 1) != (pass == 0)) continue;
            for (int64_t t = 0; t < rows; ++t)
                kernels::rms_norm(x + (p.row0 + p.n - rows + t) * H, norm_w.data(), H, eps,
                                  norm + (at + t) * H);
            at += rows;
        }
    }
    if (capture_final_norm != nullptr) capture_final_norm->assign(norm, norm + total * H);

    if (alone) {
        float* logits = steps[static_cast<size_t>(b.parts[0].step)].logits;
        // A decode_rows step's rows through the decode product too (matvec per row, as fed one
        // at a time): a verification's logits are plain decoding's bit for bit.
        if (logits != nullptr) {
            if (b.parts[0].decode_rows) {
                kernels::matvec_batch(weights_.lm_head, norm, total, logits, pool);
            } else {
                linear(weights_.lm_head, norm, total, logits, pool);
            }
        }
        return;
    }
    // One matvec_batch for the one-row steps into scratch (copied out), a matmul per longer step
    // straight into its logits.
    float* one_rows = grow(ws.router, ones * V);
    if (ones > 0) kernels::matvec_batch(weights_.lm_head, norm, ones, one_rows, pool);
    int64_t one = 0;
    at = ones;
    for (const BatchLayout::Part& p : b.parts) {
        float* logits = steps[static_cast<size_t>(p.step)].logits;
        if (wanted(p) == 1) std::memcpy(logits, one_rows + one++ * V, sizeof(float) * V);
    }
    for (const BatchLayout::Part& p : b.parts) {
        float* logits = steps[static_cast<size_t>(p.step)].logits;
        const int64_t rows = wanted(p);
        if (rows < 2) continue;
        kernels::matmul(weights_.lm_head, norm + at * H, rows, logits, pool);
        at += rows;
    }
}

}  // namespace sluice::model

namespace sluice::model {

std::vector<MappedRange> Model::layer_mapped_ranges(int64_t l) const {
    std::vector<MappedRange> out;
    if (!weights_.checkpoint || l < 0 || l >= static_cast<int64_t>(weights_.layers.size())) return out;
    // Each mapped file's span of tensor bytes: a view points into one of them, or was made at load.
    std::vector<std::pair<const uint8_t*, const uint8_t*>> files;
    for (const auto& f : weights_.checkpoint->files()) {
        const uint8_t *lo = nullptr, *hi = nullptr;
        for (const format::TensorInfo& t : f->tensors()) {
            if (t.data == nullptr) continue;
            if (lo == nullptr || t.data < lo) lo = t.data;
            if (hi == nullptr || t.data + t.size_bytes > hi) hi = t.data + t.size_bytes;
        }
        if (lo != nullptr) files.emplace_back(lo, hi);
    }
    auto add = [&](const void* p, uint64_t bytes) {
        const auto* b = static_cast<const uint8_t*>(p);
        if (b == nullptr || bytes == 0) return;
        for (const auto& [lo, hi] : files)
            if (b >= lo && b + bytes <= hi) out.push_back({b, bytes});
    };
    auto view = [&](const WeightView& v) {
        if (v.data == nullptr) return;
        const kernels::WeightFormat& f = kernels::weight_format(v.type);
        const auto rows = static_cast<uint64_t>(v.rows);
        add(v.data, rows * f.data_row_bytes(v.cols));
        if (v.quantized() && !v.ggml_blocks()) {
            const uint64_t aux = rows * f.aux_row_bytes(v.cols, v.group_size, v.scale_type) / 2;
            add(v.scales, aux);
            add(v.biases, aux);
        }
    };
    const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
    for (const WeightView* v :
         {&w.attn.q_proj,       &w.attn.k_proj,       &w.attn.v_proj,       &w.attn.o_proj,
          &w.attn.q_a_proj,     &w.attn.q_b_proj,     &w.attn.kv_a_proj,    &w.attn.kv_b_proj,
          &w.attn.embed_q,      &w.attn.unembed_out,  &w.linear.in_qkvz,    &w.linear.in_ba,
          &w.linear.in_qkv,     &w.linear.in_z,       &w.linear.in_b,       &w.linear.in_a,
          &w.linear.out_proj,   &w.moe_w.router,      &w.moe_w.shared.gate, &w.moe_w.shared.up,
          &w.moe_w.shared.down, &w.moe_w.shared_gate, &w.dense_mlp.gate,    &w.dense_mlp.up,
          &w.dense_mlp.down})
        view(*v);
    // In address order, merged where they touch or overlap.
    std::sort(out.begin(), out.end(),
              [](const MappedRange& a, const MappedRange& b) { return a.begin < b.begin; });
    std::vector<MappedRange> merged;
    for (const MappedRange& r : out) {
        if (!merged.empty() && r.begin <= merged.back().begin + merged.back().bytes) {
            const uint8_t* end = std::max(merged.back().begin + merged.back().bytes, r.begin + r.bytes);
            merged.back().bytes = static_cast<uint64_t>(end - merged.back().begin);
        } else {
            merged.push_back(r);
        }
    }
    return merged;
}

}  // namespace sluice::model
