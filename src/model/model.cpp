// The decoder skeleton shared by the three families (models.md §1.8): embedding lookup, layers,
// final norm and lm_head. The mixers and the MoE live in attention.cpp, gated_deltanet.cpp, moe.cpp.
#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "kernels/kernels.h"
#include "model/workspace.h"

namespace sluice::model {

void ModelState::reset() {
    n_past = 0;
    for (auto& l : layers) {
        std::fill(l.conv.begin(), l.conv.end(), 0.0f);
        std::fill(l.recurrent.begin(), l.recurrent.end(), 0.0f);
        // KV entries past n_past are never read, so the caches need no clearing.
    }
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
        for (const auto* v : {&l.k_cache, &l.v_cache, &l.conv, &l.recurrent, &l.conv_next, &l.recurrent_next})
            total += 4 * v->size();
    return total;
}

Expected<std::shared_ptr<Model>> Model::load(const std::string& dir) {
    auto model = std::shared_ptr<Model>(new Model());
    SLUICE_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir));
    std::shared_ptr<format::Checkpoint> checkpoint;
    if (format::is_packed_dir(dir)) {
        SLUICE_ASSIGN_OR_RETURN(model->packed_layout_, format::open_packed_dir(dir));
        model->packed_ = true;
        SLUICE_ASSIGN_OR_RETURN(checkpoint,
                                format::Checkpoint::open_files(dir, {model->packed_layout_.dense_file}));
        for (int64_t l = 0; l < config.n_layers; ++l) {
            if (config.is_moe_layer(l) && model->packed_layout_.for_layer(l) == nullptr)
                return error(
                    ErrorCode::kCorrupt,
                    "[model] " + dir + ": layout.json has no expert file for MoE layer " + std::to_string(l));
        }
        if (model->packed_layout_.n_experts != config.n_experts) {
            return error(ErrorCode::kCorrupt, "[model] " + dir + ": layout.json has " +
                                                  std::to_string(model->packed_layout_.n_experts) +
                                                  " experts per layer, config.json " +
                                                  std::to_string(config.n_experts) +
                                                  " (a pack of another architecture?)");
        }
    } else {
        SLUICE_ASSIGN_OR_RETURN(checkpoint, format::Checkpoint::open(dir));
    }
    SLUICE_ASSIGN_OR_RETURN(ModelWeights weights,
                            load_weights(config, std::move(checkpoint), !model->packed_));
    model->dir_ = dir;
    model->state_layout_ = model::state_layout(config);
    model->plan_ = make_plan(config, weights.layout);
    model->config_ = std::move(config);
    model->weights_ = std::move(weights);
    return model;
}

ModelState Model::new_state(int64_t max_positions) const {
    ModelState s;
    s.max_positions = max_positions;
    s.layers.resize(state_layout_.layers.size());
    for (size_t l = 0; l < state_layout_.layers.size(); ++l) {
        const auto& buffers = state_layout_.layers[l].buffers;
        auto& st = s.layers[l];
        auto size = [&](int b) { return static_cast<size_t>(buffers[static_cast<size_t>(b)].row_elems()); };
        if (buffers[0].per_position) {
            st.k_cache.assign(size(kKeysBuffer) * static_cast<size_t>(max_positions), 0.0f);
            st.v_cache.assign(size(kValuesBuffer) * static_cast<size_t>(max_positions), 0.0f);
        } else {
            st.conv.assign(size(kConvBuffer), 0.0f);
            st.recurrent.assign(size(kRecurrentBuffer), 0.0f);
            st.conv_next.assign(size(kConvBuffer), 0.0f);
            st.recurrent_next.assign(size(kRecurrentBuffer), 0.0f);
        }
    }
    return s;
}

Status Model::forward(ModelState& state, std::span<const int32_t> tokens, float* logits, bool all_logits,
                      Workspace& ws, ThreadPool* pool) const {
    const ModelConfig& c = config_;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t H = c.hidden;
    if (n == 0) return Status::ok();
    if (state.layers.size() != static_cast<size_t>(c.n_layers))
        return error(ErrorCode::kInvalidArgument, "[model] state was made for another model");
    if (state.n_past + n > state.max_positions) {
        return error(ErrorCode::kInvalidArgument, "[model] context full: " + std::to_string(state.n_past) +
                                                      " + " + std::to_string(n) + " tokens exceed the " +
                                                      std::to_string(state.max_positions) + "-token context");
    }
    for (int64_t t = 0; t < n; ++t) {
        if (tokens[t] < 0 || tokens[t] >= c.vocab) {
            return error(ErrorCode::kInvalidArgument, "[model] token id " + std::to_string(tokens[t]) +
                                                          " is outside the vocabulary [0, " +
                                                          std::to_string(c.vocab) + ")");
        }
    }

    float* x = grow(ws.x, n * H);  // [n, H] residual stream
    for (int64_t t = 0; t < n; ++t) kernels::dequantize_row(weights_.embed, tokens[t], x + t * H);
    if (capture_layers != nullptr) capture_layers->clear();

    const int64_t pos0 = state.n_past;
    // Out of place only when the forward can fail part-way (model.h, ModelState).
    const bool out_of_place = experts_->can_fail();
    for (int64_t l = 0; l < c.n_layers; ++l) {
        const LayerPlan& P = plan_.layers[static_cast<size_t>(l)];
        const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
        ModelState::Layer& st = state.layers[static_cast<size_t>(l)];
        float* norm = grow(ws.norm, n * H);
        float* mix = grow(ws.mix, n * H);

        for (int64_t t = 0; t < n; ++t)
            kernels::rms_norm(x + t * H, lw.input_norm.data(), H, P.norm_eps, norm + t * H);
        switch (P.mixer) {
            case MixerKind::kAttention: attention_layer(P.attention, lw, st, pos0, n, ws, pool); break;
            case MixerKind::kGatedDeltaNet:
                deltanet_layer(P.deltanet, lw, st, n, out_of_place, ws, pool);
                break;
        }
        for (int64_t i = 0; i < n * H; ++i) x[i] += mix[i];
        predict_next_experts(l, x, n, ws, pool);

        for (int64_t t = 0; t < n; ++t)
            kernels::rms_norm(x + t * H, lw.post_norm.data(), H, P.norm_eps, norm + t * H);
        moe_layer(P, lw, l, n, ws, pool);
        if (!ws.moe_status.is_ok()) {
            // The committed state is untouched: nothing is swapped in and n_past stays.
            Status failed = ws.moe_status;
            ws.moe_status = Status::ok();
            return failed.with_context("[model] layer " + std::to_string(l));
        }
        for (int64_t i = 0; i < n * H; ++i) x[i] += mix[i];

        if (capture_layers != nullptr) capture_layers->emplace_back(x, x + n * H);
    }
    state.commit(n, out_of_place);

    // Final norm and lm_head: every position (logits tool, perplexity) or only the last (generation).
    const int64_t first = all_logits ? 0 : n - 1;
    const int64_t rows = n - first;
    float* norm = grow(ws.norm, rows * H);
    for (int64_t t = 0; t < rows; ++t)
        kernels::rms_norm(x + (first + t) * H, weights_.final_norm.data(), H, plan_.final_norm_eps,
                          norm + t * H);
    if (capture_final_norm != nullptr) capture_final_norm->assign(norm, norm + rows * H);
    if (logits != nullptr) {
        if (rows == 1) {
            kernels::matvec(weights_.lm_head, norm, logits, pool);
        } else {
            kernels::matmul(weights_.lm_head, norm, rows, logits, pool);
        }
    }
    return Status::ok();
}

}  // namespace sluice::model
