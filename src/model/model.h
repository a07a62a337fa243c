// Model: a loaded checkpoint (config + weights) and the forward pass shared by the three Qwen MoE
// families. ModelState: one sequence's caches (KV for attention layers, conv + recurrent state for
// Gated DeltaNet layers).
//
// The forward runs a batch of consecutive tokens of ONE sequence (a prefill chunk, or one token in
// decode) layer by layer: projections as matmuls over the batch, the chunked DeltaNet form for
// batches and the recurrent one for single tokens, and a MoE that groups the batch's tokens by
// expert so each routed expert is read once per batch (models.md; lessons.md on prefill).
//
// Data flow per layer (shapes for a batch of n tokens):
//   x [n,H] → rms_norm → mixer (attention | gated deltanet) → +x → rms_norm → MoE (+shared) → +x
//
// Lifetime: a Model is immutable after load and may be shared by many sessions; every ModelState
// and Workspace belongs to one caller at a time. The forward allocates only when a batch is larger
// than any before it (workspace growth), never in steady-state decode.
// Threading: forward() uses the given ThreadPool for kernels; one forward per state at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "format/pack.h"
#include "model/config.h"
#include "model/expert_source.h"
#include "model/plan.h"
#include "model/state_layout.h"
#include "model/weights.h"
#include "sluice/status.h"

namespace sluice::model {

struct ModelState;

// Steps of at most this many tokens of one sequence run the Gated DeltaNet in its recurrent form (a
// decode token, a speculative verification), longer ones in the chunked form (chunks of 64 from the
// step's first token): the two round differently, so where a prompt's forwards begin and end shows in
// the last bits of a hybrid model's state (the prefix cache relies on it: runtime/prefix_cache.h).
constexpr int64_t kRecurrentStepTokens = 16;

// One sequence's part of a batched forward (Model::forward_batch): `tokens` (consecutive, from
// state->n_past), and where its logits go — [tokens.size(), V] when all_logits, else the last
// token's [V]; null when none are wanted.
struct SequenceStep {
    ModelState* state = nullptr;
    std::span<const int32_t> tokens;
    float* logits = nullptr;
    bool all_logits = false;
    // Every token through the decode kernels (the matvec path, each token as lone in the MoE), as if
    // fed one at a time: a speculative verification then gets exactly plain decoding's logits, also
    // where the prefill kernels round differently (int8 activations). For short steps (<= 16 tokens).
    bool decode_rows = false;
    // [tokens.size(), H]: every token's hidden state after the final norm (the rows lm_head reads),
    // for a multi-token-prediction drafter (forward_mtp); null when not wanted.
    float* hidden = nullptr;
};

// How a batched forward lays its steps out as rows of one [rows, H] stream: the steps of a single
// token first (rows [0, singles), one each; then decode_rows steps, whose every row counts as a
// single), then the longer ones, each a run of consecutive rows.
// Every linear over the stream runs the single rows through the matvec path and the rest through one
// matmul (workspace.h, linear_rows): exactly the kernels each row gets in a forward of its own.
struct BatchLayout {
    struct Part {
        ModelState* state;
        int64_t step;  // index into the caller's steps
        int64_t row0, n;
        bool decode_rows;  // the step's rows are among the singles (SequenceStep::decode_rows)
    };
    std::vector<Part> parts;
    std::vector<int32_t> part_of_row;  // [rows]
    int64_t singles = 0;
    int64_t rows = 0;
};

// One sequence's state on the host (the CPU backend's; model/state_layout.h sizes it). Positions
// 0..n_past-1 have been processed.
//
// Failure atomicity: when the expert source can fail (a streamed model's disk reads), a forward
// reads the committed DeltaNet state (conv, recurrent) and writes the new one into conv_next /
// recurrent_next; only when every layer has run does it swap them in and advance n_past. Attention
// KV rows are written at positions >= n_past, which nothing reads until n_past moves past them. So a
// forward that fails part-way (an expert read error) leaves the state exactly as it was — up to the
// --kv-window ring, whose rows it may have overwritten; their positions are then read from the
// compressed cache (the tags say so), as after a cut-back deeper than the ring's slack. With
// resident experts nothing can fail once the first layer has started, and the state is updated in
// place: out of place costs the CPU one more pass over the state per token (each line of the other
// buffer is read before it is written), 6.0 → 10.6 ms per 80B token (BM_DeltaRecurrentDecode).
struct ModelState {
    int64_t n_past = 0;
    int64_t max_positions = 0;                   // KV capacity in tokens
    kernels::KvType kv = kernels::KvType::kF32;  // the attention cache's type (its StateLayout's)
    int64_t kv_window = 0;                       // positions also kept in the f16 ring (0: none)
    int64_t ring_slots = 0;                      // --kv-window ring rows per attention layer (0: no ring)
    int64_t ring_row_bytes = 0;                  // bytes of one ring row (n_kv_heads f16 heads)
    struct Layer {
        std::vector<uint8_t> k_cache;                  // attention: max_positions rows of the KV type
        std::vector<uint8_t> v_cache;                  // (state_layout: [nkv, hd] each, kv_format.h)
        std::vector<uint8_t> recent;                   // --kv-window: the f16 ring (ring_view)
        std::vector<float> conv;                       // deltanet: [K-1, conv_dim] raw inputs, oldest first
        std::vector<float> recurrent;                  // deltanet: [nv, dk, dv]
        std::vector<float> conv_next, recurrent_next;  // what the running forward writes
    };
    std::vector<Layer> layers;

    // Forgets everything (position 0, zero state, an empty ring) without freeing memory.
    void reset();
    // An attention layer's ring (kernels::KvRing) in its `recent`: K rows, V rows, then the tags.
    struct Ring {
        uint8_t* k;
        uint8_t* v;
        int64_t* tags;
    };
    Ring ring(Layer& layer) const;
    // The forward's end: n_past += n, and after an out-of-place forward the written DeltaNet state
    // becomes the committed one.
    void commit(int64_t n, bool out_of_place);
    uint64_t bytes() const;
};

// One sequence's step of an attention layer on its cache (attention.cpp): k, v [n, nkv, hd] stored at
// positions state.n_past.. in the cache's type (and the --kv-window ring), then attention_kv of
// q [n, nh, hd] over the cache into out. v null: latent attention, whose key rows are also its values.
// `extras`: gpt-oss's sliding window and sink logits.
void attend_step(ModelState& state, ModelState::Layer& layer, const float* k, const float* v, const float* q,
                 int64_t n, int64_t nh, int64_t nkv, int64_t hd, float scale, float* out, ThreadPool* pool,
                 const kernels::AttentionExtras& extras = {});

// Scratch buffers of the forward, grown on demand and reused.
// A byte range of a mapped checkpoint file.
struct MappedRange {
    const uint8_t* begin = nullptr;
    uint64_t bytes = 0;
};

// Told before and after each decoder layer of a forward (from the forward's thread).
class LayerObserver {
 public:
    virtual ~LayerObserver() = default;
    virtual void before_layer(int64_t layer) = 0;
    virtual void after_layer(int64_t layer) = 0;
};

struct Workspace {
    std::vector<float> x, norm, mix, tmp, q, k, v, z, gate, beta, g, conv_in, conv_out, attn, y;
    std::vector<float> router, expert_in, expert_gate, expert_up, expert_act, expert_out;
    std::vector<int32_t> topk_ids;
    std::vector<float> topk_weights;
    std::vector<int32_t> expert_tokens, expert_offsets, expert_fill, expert_ids, predicted_ids;
    std::vector<kernels::MatvecJob> jobs;  // a decode step's grouped products (moe.cpp)
    std::vector<ExpertWeights> expert_views;
    std::vector<float> expert_token_weights;
    std::vector<int32_t> expert_rows;            // one expert's rows, single-step rows first
    std::vector<float> expert_ring;              // [2n, H]: outputs of experts ahead of the frontier
    std::vector<int32_t> expert_state;           // per expert of a round: waiting, held, in the ring, added
    std::vector<kernels::WeightView> latent_uv;  // latent attention: each head's value rows of kv_b
    BatchLayout batch;
    Status moe_status;  // first error of a streaming expert read in the running forward
    // A multi-token step's next-layer prediction (predicted_ids), handed to the expert source once this
    // layer's experts hold their slots (moe.cpp); layer -1: none waiting.
    int64_t deferred_prefetch_layer = -1, deferred_prefetch_count = 0;

    // Heap bytes held by the buffers (the memory plan's scratch estimate must cover this).
    uint64_t bytes() const {
        uint64_t b = 0;
        for (const auto* v : {&x,
                              &norm,
                              &mix,
                              &tmp,
                              &q,
                              &k,
                              &v,
                              &z,
                              &gate,
                              &beta,
                              &g,
                              &conv_in,
                              &conv_out,
                              &attn,
                              &y,
                              &router,
                              &expert_in,
                              &expert_gate,
                              &expert_up,
                              &expert_act,
                              &expert_out,
                              &expert_ring,
                              &topk_weights,
                              &expert_token_weights})
            b += v->capacity() * sizeof(float);
        for (const auto* v : {&topk_ids, &expert_tokens, &expert_offsets, &expert_fill, &expert_ids,
                              &predicted_ids, &expert_rows, &expert_state})
            b += v->capacity() * sizeof(int32_t);
        return b + expert_views.capacity() * sizeof(ExpertWeights) +
               latent_uv.capacity() * sizeof(kernels::WeightView) +
               jobs.capacity() * sizeof(kernels::MatvecJob);
    }
};

// A packed folder's layout.json against its config.json: one expert file per MoE layer and none
// elsewhere, each projection of the config's shape and quantized as the config says (bits, group).
// So a layout that does not describe this model is refused at load, naming the layer.
Status check_pack_layout(const ModelConfig& config, const format::PackLayout& layout, const std::string& dir);
// layout.json's dense tensors against the dense file's safetensors header (dtype, size, offset):
// the two descriptions of one file must agree, naming the tensor where they do not.
Status check_pack_dense(const format::PackLayout& layout, const format::Checkpoint& dense,
                        const std::string& dir);

class Model {
 public:
    // Loads config.json and the safetensors checkpoint in `dir` (Hugging Face or MLX layout), or a
    // packed folder (format/pack.h): then only the dense weights are bound, and the caller must
    // set an expert source that streams the routed experts (packed_layout() describes them). A GGUF
    // (format::is_gguf_model_path: a .gguf file, split set or folder of one) loads its config from
    // the metadata (config_gguf.h) and binds every tensor in place (weights_gguf.h).
    static Expected<std::shared_ptr<Model>> load(const std::string& dir);

    // A model over weights bound elsewhere (load_weights, load_gguf_weights, or views a caller made):
    // its plan and state layout from `config` and the weights' layout. `dir` names it in messages.
    static std::shared_ptr<Model> create(ModelConfig config, ModelWeights weights, std::string dir);

    bool packed() const { return packed_; }
    const format::PackLayout& packed_layout() const { return packed_layout_; }

    const ModelConfig& config() const { return config_; }
    // The per-layer decisions both backends run the layer program from (plan.h).
    const ModelPlan& plan() const { return plan_; }
    const ModelWeights& weights() const { return weights_; }
    const std::string& dir() const { return dir_; }

    // The buffers of one sequence's state; attention KV as state_layout().kv (f32 unless
    // use_kv_type chose another).
    const StateLayout& state_layout() const { return state_layout_; }
    // Stores attention KV as `type` from now on (before any state is made): an error naming the
    // problem when the model's head_dim cannot be stored so.
    Status use_kv_type(kernels::KvType type, int64_t kv_window = 0);
    // How the products of quantized weights take their activations on the CPU (kernels.h,
    // Activations): every bound view and every expert view the expert source hands out. kF32 (the
    // default) is the reference arithmetic; kInt8 the integer dot products.
    void use_activations(kernels::Activations activations);
    // The dense core's products in the CPU's decode layout (row tiles, kernels/ggml_tiles.h;
    // model/weights_gguf.h use_dense_row_tiles), and resident routed experts held in the model's own
    // buffers (in place): for a forward on the CPU with int8 activations, before any forward. Returns the
    // bytes rewritten (0: no weight has row tiles).
    uint64_t use_row_tiles();
    kernels::Activations activations() const { return activations_; }
    // The state layout of a sequence whose attention cache is `type` with `kv_window` positions also
    // in f16 (state_layout() is the model's default, use_kv_type()); an error naming the problem when
    // head_dim cannot be stored so or the window is negative.
    Expected<StateLayout> layout_for(kernels::KvType type, int64_t kv_window) const;
    // A fresh state able to hold `max_positions` tokens of context, laid out as `layout` (one of
    // this model's layouts: state_layout() or a layout_for()).
    ModelState new_state(int64_t max_positions) const { return new_state(max_positions, state_layout_); }
    ModelState new_state(int64_t max_positions, const StateLayout& layout) const;

    // Runs `tokens` (consecutive, starting at state.n_past) through the model. Writes logits
    // [tokens.size(), V] when all_logits, else only the last token's [V], into `logits` (may be
    // null when no logits are wanted). Advances state.n_past; on failure leaves `state` as it was.
    Status forward(ModelState& state, std::span<const int32_t> tokens, float* logits, bool all_logits,
                   Workspace& ws, ThreadPool* pool, bool decode_rows = false) const;

    // The multi-token-prediction head (models.md §3.7; config().mtp_layers > 0): one more decoder
    // layer that drafts the token after next from a token and the target's hidden state there.
    bool has_mtp() const { return config_.mtp_layers > 0; }
    // The state of the head's own attention layer for a sequence whose main state is laid out as
    // `base`: that layer's KV (same type and window), every other layer empty.
    StateLayout mtp_layout(const StateLayout& base) const;
    // Runs the MTP head over `tokens` at positions state.n_past.. of an mtp_layout() state: row i
    // takes token tokens[i] (the one after position n_past + i) and `hidden` row i ([n, H]: the
    // target's final-normed hidden state at that position, or the head's own `hidden_out` row of the
    // position before, for a chained draft). Writes logits as forward() does (the draft of the token
    // after tokens[i]) and, when hidden_out is not null, every row's output [n, H] as the next chained
    // proposal reads it: after mtp.norm, or before it for a nextn head (ModelPlan::mtp_chain_normed).
    // Advances state.n_past; on failure leaves `state` as it was.
    Status forward_mtp(ModelState& state, std::span<const int32_t> tokens, const float* hidden, float* logits,
                       bool all_logits, float* hidden_out, Workspace& ws, ThreadPool* pool) const;

    // Runs several sequences' steps (prefill chunks and single decode tokens, mixed; distinct states)
    // as one forward: every linear reads its weights once for all of them, and the MoE groups all
    // the steps' tokens by expert, so each routed expert is acquired (read from disk when streamed)
    // once for every sequence; attention and DeltaNet run per sequence. Every step gets the logits,
    // bit for bit, of a forward of its own (each row takes the kernel it would take alone). On
    // failure no state has moved.
    Status forward_batch(std::span<const SequenceStep> steps, Workspace& ws, ThreadPool* pool) const;

    // Where routed experts come from: resident (the checkpoint holds them) unless a streaming
    // source is set (packed models). The source must outlive the model's use of it.
    void set_expert_source(ExpertSource* source) { experts_ = source != nullptr ? source : &resident_; }
    ExpertSource* expert_source() const { return experts_; }

    // Told around each decoder layer a forward runs (the dense core's layer streamer,
    // runtime/dense_stream.h); null: none. Must outlive the model's use of it.
    void set_layer_observer(LayerObserver* observer) { layer_observer_ = observer; }
    // Where layer l's own weights (projections, router, shared and dense MLPs; not routed experts,
    // not the small f32 copies) lie in the mapped safetensors files, merged where adjacent — what
    // streaming the dense core reads per layer. Weights held elsewhere (row tiles made at load, a
    // GGUF's) are not in it.
    std::vector<MappedRange> layer_mapped_ranges(int64_t l) const;

    // Hidden states after each layer for the last forward call's tokens, when `capture` is set
    // (tests and debugging: per-layer comparison against the reference).
    mutable std::vector<std::vector<float>>* capture_layers = nullptr;
    mutable std::vector<float>* capture_final_norm = nullptr;

 private:
    // The layer program over ws.batch's rows: ws.norm [rows, H] in, ws.mix [rows, H] out.
    void attention_layer(const AttentionPlan& plan, const LayerWeights& lw, int64_t layer, Workspace& ws,
                         ThreadPool* pool) const;
    void latent_attention_layer(const LatentAttentionPlan& plan, const LayerWeights& lw, int64_t layer,
                                Workspace& ws, ThreadPool* pool) const;
    void deltanet_layer(const DeltaNetPlan& plan, const LayerWeights& lw, int64_t layer, bool out_of_place,
                        Workspace& ws, ThreadPool* pool) const;
    void moe_layer(const LayerPlan& plan, const LayerWeights& lw, int64_t layer, Workspace& ws,
                   ThreadPool* pool) const;
    void predict_next_experts(int64_t layer, const float* x, Workspace& ws, ThreadPool* pool) const;
    // Checks `steps` against this model and lays them out as ws.batch; `layers`: the states' size.
    Status lay_out_steps(std::span<const SequenceStep> steps, size_t layers, Workspace& ws) const;
    // One decoder layer over ws.batch's rows of the residual stream x [rows, H]; an expert read's
    // failure is returned (the states' committed parts untouched).
    Status run_layer(int64_t l, bool out_of_place, float* x, Workspace& ws, ThreadPool* pool) const;
    Status run_layer_program(int64_t l, bool out_of_place, float* x, Workspace& ws, ThreadPool* pool) const;
    // `norm` [H] over the rows each step wants, then lm_head; each step's `hidden` gets all its
    // rows normed.
    void lm_head(std::span<const SequenceStep> steps, const float* x, const std::vector<float>& norm,
                 float eps, Workspace& ws, ThreadPool* pool) const;

    std::string dir_;
    bool packed_ = false;
    format::PackLayout packed_layout_;
    ModelConfig config_;
    kernels::Activations activations_ = kernels::Activations::kF32;
    ModelPlan plan_;
    StateLayout state_layout_;
    ModelWeights weights_;
    ResidentExperts resident_{weights_};
    ExpertSource* experts_ = &resident_;
    LayerObserver* layer_observer_ = nullptr;
};

}  // namespace sluice::model
