// The CPU backend: Model::forward on the engine's thread pool, and the device-string parser.
#include <cstdlib>

#include "runtime/backend.h"

namespace sluice::runtime {
namespace {

class CpuBackend final : public Backend {
 public:
    explicit CpuBackend(std::shared_ptr<const model::Model> model) : model_(std::move(model)) {}
    std::string name() const override { return "cpu"; }
    Status forward(model::ModelState& state, std::span<const int32_t> tokens, float* logits, bool all_logits,
                   model::Workspace& ws, ThreadPool* pool) override {
        return model_->forward(state, tokens, logits, all_logits, ws, pool);
    }

 private:
    std::shared_ptr<const model::Model> model_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const model::Model> model) {
    return std::make_unique<CpuBackend>(std::move(model));
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

}  // namespace sluice::runtime
