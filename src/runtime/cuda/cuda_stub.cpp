// Stands in for the CUDA backend when sluice is built without it (SLUICE_CUDA=OFF or no CUDA
// toolkit found): `--device cuda` then fails with this message instead of callers testing a macro.
#include "runtime/backend.h"

namespace sluice::runtime {

Expected<std::unique_ptr<Backend>> make_cuda_backend(std::shared_ptr<const model::Model> /*model*/,
                                                     const CudaBackendOptions& options) {
    return error(ErrorCode::kUnsupported,
                 "[cuda] this build of sluice has no CUDA support (device cuda:" +
                     std::to_string(options.device_index) +
                     " requested); rebuild with a CUDA toolkit and -DSLUICE_CUDA=ON");
}

}  // namespace sluice::runtime
