// Expert parallelism over the GPUs of one host (EngineOptions::device "cuda:0,cuda:1"): one CudaBackend
// per GPU, each a rank of the group (runtime/expert_shard.h) — the dense core and every sequence's
// state on every rank, the routed experts dealt out among them — running the same forward in
// lockstep. After each MoE layer a rank's output (its experts' weighted products, and the shared
// expert on the rank that computes it) is summed over the group by a collective (collective.h: NCCL
// between GPUs), so every rank continues with the layer's whole output and ends with the same logits.
//
// Why this form: the MoE is where the bytes are (Qwen3.5-397B's routed experts are 97% of it), so
// sharding them is what lets a model outgrow one GPU; the dense core is small and replicated, and
// each rank's forward is the single-GPU forward unchanged — its kernels, its decode graphs (which
// capture the all-reduce), its expert tier when its shard does not fit. The cost is one all-reduce of
// [tokens, hidden] per MoE layer: 8 KB a layer for a decode token of an 80B-class model. Rejected for
// now: all-to-all dispatch (each token's hidden row sent only to the ranks holding its experts) pays
// when tokens are many and ranks are many; at batch sizes of decode the all-reduce is one small
// message. Pipeline (layer) split, llama.cpp's, keeps every GPU but one idle per token.
//
// Each rank runs on a thread of its own (NCCL's collectives block until every rank has arrived), and
// the caller waits for them. Everything that could fail differently on one rank — the sequence and
// token checks, scratch allocation — is done on every rank before any starts the forward; a rank that
// still fails mid-forward would leave the others waiting inside a collective, so the group aborts its
// collectives to release them and then refuses further work (the sequences are left as they were).
//
// Sequences: a ShardedState (runtime/sharded_state.h) keeps the position and snapshot bookkeeping and holds
// one DeviceState per rank; its buffer primitives write every rank's copy and read rank 0's.
#include <functional>
#include <mutex>

#include "runtime/cuda/backend_impl.h"
#include "runtime/rank_threads.h"
#include "runtime/sharded_state.h"

namespace sluice::runtime::cuda_impl {

namespace {

class ExpertParallelBackend final : public Backend {
 public:
    ExpertParallelBackend(std::shared_ptr<const model::Model> model, std::vector<int> devices)
        : model_(std::move(model)),
          devices_(std::move(devices)),
          threads_(static_cast<int>(devices_.size())) {}

    ~ExpertParallelBackend() override {
        ranks_.clear();  // before the collectives they call
    }

    Status init(const CudaBackendOptions& options) {
        const model::ModelConfig& c = model_->config();
        const auto R = static_cast<int>(devices_.size());
        if (c.n_experts < R)
            return error(
                ErrorCode::kInvalidArgument,
                c.n_experts == 0
                    ? fmt::format("[cuda] {} has no routed experts to share among {} GPUs; run it on one",
                                  model_->dir(), R)
                    : fmt::format("[cuda] {} routed experts cannot be shared among {} GPUs", c.n_experts, R));
        const bool one_device =
            std::all_of(devices_.begin(), devices_.end(), [&](int d) { return d == devices_[0]; });
        if (one_device) {
            SLUICE_ASSIGN_OR_RETURN(collectives_, make_local_collectives(devices_[0], R));
        } else {
            SLUICE_ASSIGN_OR_RETURN(collectives_, make_nccl_collectives(devices_));
        }
        // Ranks load one after another: they read the same expert source, each its own shard.
        for (int r = 0; r < R; ++r) {
            CudaBackendOptions o = options;
            o.device_index = devices_[static_cast<size_t>(r)];
            o.devices.clear();
            auto rank = std::make_unique<CudaBackend>(model_, o.device_index, ExpertShard{r, R},
                                                      collectives_[static_cast<size_t>(r)].get());
            const Status st = rank->init(o);
            if (!st.is_ok())
                return error(st.code(), fmt::format("[cuda] rank {} of {} (cuda:{}): {}", r, R,
                                                    o.device_index, st.message()));
            ranks_.push_back(std::move(rank));
        }
        SLUICE_RETURN_IF_ERROR(
            on_ranks([&](int r) { return ranks_[static_cast<size_t>(r)]->warm_collective(); }));
        std::string names;
        for (const auto& rank : ranks_) names += (names.empty() ? "" : " | ") + rank->name();
        name_ = fmt::format("expert-parallel over {} ranks ({}): {}", R, collectives_[0]->kind(), names);
        log::info("[cuda] {}", name_);
        return Status::ok();
    }

    std::string name() const override { return name_; }

    Expected<std::unique_ptr<SequenceState>> new_sequence(int64_t max_positions, int max_snapshots,
                                                          const model::StateLayout* layout) override {
        SLUICE_RETURN_IF_ERROR(usable());
        std::vector<std::unique_ptr<SequenceState>> parts;
        for (auto& rank : ranks_) {
            SLUICE_ASSIGN_OR_RETURN(auto part, rank->new_sequence(max_positions, max_snapshots, layout));
            parts.push_back(std::move(part));
        }
        return std::unique_ptr<SequenceState>(std::make_unique<ShardedState>(this, std::move(parts)));
    }

    Status forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                   bool all_logits) override {
        BatchStep step;
        step.seq = &seq;
        step.tokens = tokens;
        step.logits = logits;
        step.all_logits = all_logits;
        return forward_batch(std::span<const BatchStep>(&step, 1));
    }

    Status forward_batch(std::span<const BatchStep> steps) override {
        SLUICE_RETURN_IF_ERROR(usable());
        std::vector<const BatchStep*> live;
        for (const BatchStep& s : steps)
            if (!s.tokens.empty()) live.push_back(&s);
        if (live.empty()) return Status::ok();
        std::vector<ShardedState*> seqs;
        int64_t n = 0, logit_rows = 0;
        for (const BatchStep* s : live) {
            SLUICE_ASSIGN_OR_RETURN(ShardedState * seq, check_step(s->seq, s->tokens));
            if (std::find(seqs.begin(), seqs.end(), seq) != seqs.end())
                return error(ErrorCode::kInvalidArgument, "[cuda] a batch has two steps of one sequence");
            seqs.push_back(seq);
            const auto count = static_cast<int64_t>(s->tokens.size());
            n += count;
            logit_rows += s->logits == nullptr ? 0 : (s->all_logits ? count : 1);
        }
        // The rows of logits each rank's scratch must hold, as its forward will count them: one step alone
        // goes through forward_rows (all_logits ? n : 1, logits wanted or not).
        if (live.size() == 1) logit_rows = live[0]->all_logits ? n : 1;
        return run_step(seqs, n, std::max<int64_t>(logit_rows, 1), [&](int r) {
            std::vector<BatchStep> mine;
            for (size_t i = 0; i < live.size(); ++i) {
                BatchStep s = *live[i];
                s.seq = &seqs[i]->part(static_cast<size_t>(r));
                if (r != 0) {  // rank 0's logits and hidden rows are the group's
                    s.logits = nullptr;
                    s.hidden = nullptr;
                }
                mine.push_back(s);
            }
            return ranks_[static_cast<size_t>(r)]->forward_batch(mine);
        });
    }

    bool runs_mtp() const override {
        return std::all_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->runs_mtp(); });
    }
    Expected<std::unique_ptr<SequenceState>> new_mtp_sequence(int64_t max_positions,
                                                              const model::StateLayout* layout) override {
        SLUICE_RETURN_IF_ERROR(usable());
        std::vector<std::unique_ptr<SequenceState>> parts;
        for (auto& rank : ranks_) {
            SLUICE_ASSIGN_OR_RETURN(auto part, rank->new_mtp_sequence(max_positions, layout));
            parts.push_back(std::move(part));
        }
        return std::unique_ptr<SequenceState>(std::make_unique<ShardedState>(this, std::move(parts)));
    }
    Status forward_mtp(SequenceState& seq, std::span<const int32_t> tokens, const float* hidden,
                       float* logits, bool all_logits, float* hidden_out) override {
        SLUICE_RETURN_IF_ERROR(usable());
        if (tokens.empty()) return Status::ok();
        SLUICE_ASSIGN_OR_RETURN(ShardedState * s, check_step(&seq, tokens));
        const auto n = static_cast<int64_t>(tokens.size());
        std::vector<ShardedState*> seqs{s};
        return run_step(seqs, n, all_logits ? n : 1, [&](int r) {
            return ranks_[static_cast<size_t>(r)]->forward_mtp(s->part(static_cast<size_t>(r)), tokens,
                                                               hidden, r == 0 ? logits : nullptr, all_logits,
                                                               r == 0 ? hidden_out : nullptr);
        });
    }

    uint64_t device_weight_bytes() const override {
        uint64_t sum = 0;
        for (const auto& r : ranks_) sum += r->device_weight_bytes();
        return sum;
    }
    // Summed over the ranks: the bytes the group reads per token, against the group's bandwidth.
    uint64_t decode_bytes_per_token() const override {
        uint64_t sum = 0;
        for (const auto& r : ranks_) sum += r->decode_bytes_per_token();
        return sum;
    }
    double measure_memory_gb_s() override {
        double sum = 0;
        for (const auto& r : ranks_) sum += r->measure_memory_gb_s();
        // Ranks sharing one GPU share its bandwidth.
        return devices_.front() == devices_.back() && sum > 0 ? sum / static_cast<double>(ranks_.size())
                                                              : sum;
    }
    // Every rank times its own all-reduces (they run together); the slowest rank's is the layer's.
    double measure_all_reduce_us(int64_t rows) override {
        if (!usable().is_ok() || rows <= 0) return 0.0;
        constexpr int kReps = 50;
        for (auto& rank : ranks_)
            if (!rank->prepare(rows, 1).is_ok()) return 0.0;
        std::vector<double> us(ranks_.size(), 0.0);
        const Status st = on_ranks([&](int r) {
            return ranks_[static_cast<size_t>(r)]->time_all_reduce(rows, kReps, &us[static_cast<size_t>(r)]);
        });
        if (!st.is_ok()) {
            log::warn("[cuda] timing the expert-parallel all-reduce: {}", st.message());
            return 0.0;
        }
        return *std::max_element(us.begin(), us.end());
    }
    GpuExpertCacheStats expert_tier_stats() const override {
        GpuExpertCacheStats out;
        for (const auto& rank : ranks_) {
            const GpuExpertCacheStats s = rank->expert_tier_stats();
            out.tiered = out.tiered || s.tiered;
            out.slots += s.slots;
            out.slot_bytes = std::max(out.slot_bytes, s.slot_bytes);
            out.hits += s.hits;
            out.misses += s.misses;
            out.bytes_copied += s.bytes_copied;
            out.copy_s += s.copy_s;
            out.wait_s = std::max(out.wait_s, s.wait_s);  // the ranks wait at once
            out.prefetch_issued += s.prefetch_issued;
            out.prefetch_used += s.prefetch_used;
            out.prefetch_wasted += s.prefetch_wasted;
            out.evictions += s.evictions;
        }
        return out;
    }
    void reset_expert_tier_stats() override {
        for (auto& r : ranks_) r->reset_expert_tier_stats();
    }
    std::optional<LogitsSummary> logits_summary() const override { return ranks_[0]->logits_summary(); }

 private:
    Status usable() const {
        std::lock_guard<std::mutex> lock(broken_mu_);
        return broken_;
    }

    // The checks every rank would make, made once before any rank starts (so none fails alone).
    Expected<ShardedState*> check_step(SequenceState* seq, std::span<const int32_t> tokens) const {
        auto* s = dynamic_cast<ShardedState*>(seq);
        if (s == nullptr || s->owner() != this)
            return error(ErrorCode::kInvalidArgument, "[cuda] the sequence was made by another backend");
        SLUICE_RETURN_IF_ERROR(check_tokens(*seq, tokens, model_->config().vocab));
        return s;
    }

    // One forward on every rank: scratch prepared on each first, the parts aligned, then `fn` on the
    // rank threads; on success each sequence advances by its steps' tokens (the ranks committed theirs).
    Status run_step(const std::vector<ShardedState*>& seqs, int64_t n, int64_t logit_rows,
                    const std::function<Status(int)>& fn) {
        for (auto& rank : ranks_) SLUICE_RETURN_IF_ERROR(rank->prepare(n, logit_rows));
        std::vector<std::vector<int>> parities;
        std::vector<int64_t> before;
        for (ShardedState* s : seqs) {
            s->align();
            parities.push_back(s->committed_copies());
            before.push_back(s->position());
        }
        Status st = threads_.run(fn, [&] {
            for (auto& c : collectives_) c->abort();
        });
        for (auto& c : collectives_)
            if (st.is_ok()) st = c->check();
        if (!st.is_ok()) {
            for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->restore(parities[i]);
            std::lock_guard<std::mutex> lock(broken_mu_);
            broken_ = error(st.code(),
                            "[cuda] the expert-parallel group stopped after a rank failed: " + st.message());
            for (auto& c : collectives_) c->abort();
            return st;
        }
        for (size_t i = 0; i < seqs.size(); ++i) seqs[i]->committed(seqs[i]->part(0).position() - before[i]);
        return Status::ok();
    }

    Status on_ranks(const std::function<Status(int)>& fn) {
        return threads_.run(fn, [&] {
            for (auto& c : collectives_) c->abort();
        });
    }

    std::shared_ptr<const model::Model> model_;
    std::vector<int> devices_;
    std::vector<std::unique_ptr<Collective>> collectives_;
    std::vector<std::unique_ptr<CudaBackend>> ranks_;
    RankThreads threads_;
    std::string name_;
    mutable std::mutex broken_mu_;
    Status broken_;  // set when a rank failed mid-forward
};

}  // namespace

Expected<std::unique_ptr<Backend>> make_expert_parallel_backend(std::shared_ptr<const model::Model> model,
                                                                const CudaBackendOptions& options) {
    auto backend = std::make_unique<ExpertParallelBackend>(std::move(model), options.devices);
    SLUICE_RETURN_IF_ERROR(backend->init(options));
    return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace sluice::runtime::cuda_impl
