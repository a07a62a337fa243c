// The CPU backend: Model::forward on the engine's thread pool over host state (a ModelState and
// the forward's scratch per sequence), and the device-string parser.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/backend.h"

namespace sluice::runtime {
namespace {

// A sequence's state in host memory: the ModelState the forward reads and writes, its scratch,
// and the snapshot slots (one vector per DeltaNet layer and buffer).
class CpuSequence final : public SequenceState {
 public:
    CpuSequence(const model::Model& model, int64_t capacity, int max_snapshots,
                const model::StateLayout& layout)
        : SequenceState(layout, capacity, max_snapshots), state_(model.new_state(capacity, layout)) {
        slots_.resize(static_cast<size_t>(this->max_snapshots()));
        for (auto& slot : slots_) {
            slot.resize(state_.layers.size());
            for (size_t l = 0; l < state_.layers.size(); ++l) {
                slot[l].conv.assign(state_.layers[l].conv.size(), 0.0f);
                slot[l].recurrent.assign(state_.layers[l].recurrent.size(), 0.0f);
            }
        }
    }

    // Brings the model state's position to the sequence's (truncate moves only the latter).
    model::ModelState& model_state() {
        state_.n_past = position();
        return state_;
    }
    void advanced(int64_t n) { advance(n); }

    Status forward(const model::Model& model, std::span<const int32_t> tokens, float* logits, bool all_logits,
                   ThreadPool* pool, bool decode_rows = false, float* hidden = nullptr) {
        state_.n_past = position();
        model::SequenceStep step{&state_, tokens, logits, all_logits, decode_rows};
        step.hidden = hidden;
        SLUICE_RETURN_IF_ERROR(
            model.forward_batch(std::span<const model::SequenceStep>(&step, 1), ws_, pool));
        advance(static_cast<int64_t>(tokens.size()));
        return Status::ok();
    }
    Status forward_mtp(const model::Model& model, std::span<const int32_t> tokens, const float* hidden,
                       float* logits, bool all_logits, float* hidden_out, ThreadPool* pool) {
        state_.n_past = position();
        SLUICE_RETURN_IF_ERROR(
            model.forward_mtp(state_, tokens, hidden, logits, all_logits, hidden_out, ws_, pool));
        advance(static_cast<int64_t>(tokens.size()));
        return Status::ok();
    }

 protected:
    Status read_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                     void* dst) const override {
        const size_t row = row_bytes(layer, buffer);
        std::memcpy(dst, bytes_of(slot, layer, buffer) + static_cast<size_t>(row0) * row,
                    static_cast<size_t>(rows) * row);
        return Status::ok();
    }
    Status write_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                      const void* src) override {
        const size_t row = row_bytes(layer, buffer);
        std::memcpy(bytes_of(slot, layer, buffer) + static_cast<size_t>(row0) * row, src,
                    static_cast<size_t>(rows) * row);
        return Status::ok();
    }
    Status copy_recurrent(int from, int to) override {
        for (size_t l = 0; l < state_.layers.size(); ++l) {
            for (int b : {model::kConvBuffer, model::kRecurrentBuffer}) {
                if (state_.layers[l].conv.empty()) continue;  // attention layer
                const auto& src = buffer_of(from, static_cast<int64_t>(l), b);
                std::vector<float>& dst = buffer_of(to, static_cast<int64_t>(l), b);
                std::copy(src.begin(), src.end(), dst.begin());
            }
        }
        return Status::ok();
    }
    Status zero_recurrent() override {
        state_.reset();
        return Status::ok();
    }

 private:
    struct Recurrent {
        std::vector<float> conv, recurrent;
    };
    size_t row_bytes(int64_t layer, int buffer) const {
        return static_cast<size_t>(
            layout().layers[static_cast<size_t>(layer)].buffers[static_cast<size_t>(buffer)].row_bytes());
    }
    // A buffer's bytes: attention KV rows in the layout's KV type, or the f32 recurrent state.
    uint8_t* bytes_of(int slot, int64_t layer, int buffer) {
        model::ModelState::Layer& st = state_.layers[static_cast<size_t>(layer)];
        if (slot == kLive && !st.k_cache.empty())
            return buffer == model::kKeysBuffer     ? st.k_cache.data()
                   : buffer == model::kValuesBuffer ? st.v_cache.data()
                                                    : st.recent.data();  // the whole ring, tags included
        return reinterpret_cast<uint8_t*>(buffer_of(slot, layer, buffer).data());
    }
    const uint8_t* bytes_of(int slot, int64_t layer, int buffer) const {
        return const_cast<CpuSequence*>(this)->bytes_of(slot, layer, buffer);
    }
    // A DeltaNet layer's recurrent buffer (conv or recurrent) of the live state or of a slot.
    std::vector<float>& buffer_of(int slot, int64_t layer, int buffer) {
        const auto l = static_cast<size_t>(layer);
        if (slot == kLive) {
            model::ModelState::Layer& st = state_.layers[l];
            return buffer == model::kConvBuffer ? st.conv : st.recurrent;
        }
        Recurrent& r = slots_[static_cast<size_t>(slot)][l];
        return buffer == model::kConvBuffer ? r.conv : r.recurrent;
    }
    const std::vector<float>& buffer_of(int slot, int64_t layer, int buffer) const {
        return const_cast<CpuSequence*>(this)->buffer_of(slot, layer, buffer);
    }

    model::ModelState state_;
    model::Workspace ws_;
    std::vector<std::vector<Recurrent>> slots_;  // [snapshot slot][layer]
};

class CpuBackend final : public Backend {
 public:
    CpuBackend(std::shared_ptr<const model::Model> model, ThreadPool* pool)
        : model_(std::move(model)), pool_(pool) {}
    std::string name() const override { return "cpu"; }
    Expected<std::unique_ptr<SequenceState>> new_sequence(int64_t max_positions, int max_snapshots,
                                                          const model::StateLayout* layout) override {
        return std::unique_ptr<SequenceState>(new CpuSequence(
            *model_, max_positions, max_snapshots, layout != nullptr ? *layout : model_->state_layout()));
    }
    Status forward(SequenceState& seq, std::span<const int32_t> tokens, float* logits,
                   bool all_logits) override {
        auto* cpu = dynamic_cast<CpuSequence*>(&seq);
        if (cpu == nullptr)
            return error(ErrorCode::kInvalidArgument, "[cpu] the sequence was made by another backend");
        return cpu->forward(*model_, tokens, logits, all_logits, pool_);
    }
    Status forward_batch(std::span<const BatchStep> steps) override {
        if (steps.size() == 1) {
            if (steps[0].seq == nullptr)
                return error(ErrorCode::kInvalidArgument, "[cpu] a batch step has no sequence");
            auto* cpu = dynamic_cast<CpuSequence*>(steps[0].seq);
            if (cpu == nullptr)
                return error(ErrorCode::kInvalidArgument, "[cpu] the sequence was made by another backend");
            return cpu->forward(*model_, steps[0].tokens, steps[0].logits, steps[0].all_logits, pool_,
                                steps[0].decode_rows, steps[0].hidden);
        }
        std::vector<CpuSequence*> seqs(steps.size());
        model_steps_.resize(steps.size());
        for (size_t i = 0; i < steps.size(); ++i) {
            seqs[i] = dynamic_cast<CpuSequence*>(steps[i].seq);
            if (seqs[i] == nullptr)
                return error(ErrorCode::kInvalidArgument, "[cpu] batch step " + std::to_string(i) +
                                                              "'s sequence was made by another backend");
            model_steps_[i] = {&seqs[i]->model_state(), steps[i].tokens,      steps[i].logits,
                               steps[i].all_logits,     steps[i].decode_rows, steps[i].hidden};
        }
        SLUICE_RETURN_IF_ERROR(model_->forward_batch(model_steps_, batch_ws_, pool_));
        for (size_t i = 0; i < steps.size(); ++i)
            seqs[i]->advanced(static_cast<int64_t>(steps[i].tokens.size()));
        return Status::ok();
    }
    bool runs_mtp() const override { return model_->has_mtp(); }
    Expected<std::unique_ptr<SequenceState>> new_mtp_sequence(int64_t max_positions,
                                                              const model::StateLayout* layout) override {
        if (!model_->has_mtp())
            return error(ErrorCode::kUnsupported,
                         "[cpu] " + model_->dir() + " has no multi-token-prediction head");
        const model::StateLayout mtp =
            model_->mtp_layout(layout != nullptr ? *layout : model_->state_layout());
        return std::unique_ptr<SequenceState>(new CpuSequence(*model_, max_positions, 0, mtp));
    }
    Status forward_mtp(SequenceState& seq, std::span<const int32_t> tokens, const float* hidden,
                       float* logits, bool all_logits, float* hidden_out) override {
        auto* cpu = dynamic_cast<CpuSequence*>(&seq);
        if (cpu == nullptr)
            return error(ErrorCode::kInvalidArgument, "[cpu] the sequence was made by another backend");
        return cpu->forward_mtp(*model_, tokens, hidden, logits, all_logits, hidden_out, pool_);
    }

 private:
    std::shared_ptr<const model::Model> model_;
    ThreadPool* pool_;
    // A batched forward's scratch (one call at a time per backend); a sequence's own is used alone.
    model::Workspace batch_ws_;
    std::vector<model::SequenceStep> model_steps_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const model::Model> model, ThreadPool* pool) {
    return std::make_unique<CpuBackend>(std::move(model), pool);
}

Expected<int> parse_device(const std::string& device) {
    if (device.empty() || device == "cpu") return -1;
    if (device == "cuda") return 0;
    if (device.rfind("cuda:", 0) == 0 && device.size() > 5) {
        char* end = nullptr;
        const long index = std::strtol(device.c_str() + 5, &end, 10);
        if (*end == '\0' && index >= 0 && index < 1024) return static_cast<int>(index);
    }
    return error(ErrorCode::kInvalidArgument,
                 "[engine] device '" + device + "' is not one of cpu, cuda, cuda:N");
}

Expected<std::vector<int>> parse_devices(const std::string& devices) {
    if (devices.find(',') == std::string::npos) {
        SLUICE_ASSIGN_OR_RETURN(const int index, parse_device(devices));
        if (index < 0) return std::vector<int>{};
        return std::vector<int>{index};
    }
    std::vector<int> out;
    size_t at = 0;
    while (at <= devices.size()) {
        const size_t comma = std::min(devices.find(',', at), devices.size());
        const std::string one = devices.substr(at, comma - at);
        if (one.rfind("cuda", 0) != 0)
            return error(ErrorCode::kInvalidArgument,
                         "[engine] device list '" + devices + "': '" + one +
                             "' is not a GPU (cuda or cuda:N); a list names GPUs only");
        SLUICE_ASSIGN_OR_RETURN(const int index, parse_device(one));
        out.push_back(index);
        at = comma + 1;
    }
    // One device repeated runs the expert-parallel path as ranks of one GPU (a test of it); a list
    // that mixes repeats with other devices has no meaning.
    std::vector<int> sorted = out;
    std::sort(sorted.begin(), sorted.end());
    const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    const bool one_device = sorted.front() == sorted.back();
    if (!distinct && !one_device)
        return error(ErrorCode::kInvalidArgument,
                     "[engine] device list '" + devices +
                         "' repeats a GPU beside others: name distinct GPUs, or one GPU repeated (its ranks "
                         "then share it, which tests the expert-parallel path on one GPU)");
    return out;
}

}  // namespace sluice::runtime
