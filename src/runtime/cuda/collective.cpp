// The expert-parallel group's collectives (collective.h): NCCL loaded at run time, and the local kind
// over cuda::local_all_reduce.
#include "runtime/cuda/collective.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "kernels/cuda/collective.h"
#include "runtime/cuda/backend_impl.h"

#if SLUICE_HAS_NCCL_HEADER
#include <nccl.h>
#endif

namespace sluice::runtime::cuda_impl {

Status require_eager_module_loading() {
    // cuModuleGetLoadingMode through the runtime (no link against libcuda): 1 eager, 2 lazy.
    using GetLoadingMode = int (*)(int*);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        fn == nullptr) {
        cudaGetLastError();
        return Status::ok();  // a driver without the query loads eagerly
    }
    int mode = 0;
    if (reinterpret_cast<GetLoadingMode>(fn)(&mode) == 0 && mode == 2)
        return error(
            ErrorCode::kUnsupported,
            "[cuda] several GPUs (or ranks) need CUDA's eager module loading: their collectives wait for "
            "each other inside kernels, and loading a kernel lazily can wait for the whole device to go "
            "idle — a deadlock. Set CUDA_MODULE_LOADING=EAGER before the process first uses CUDA (sluice "
            "sets it itself when the device list is its first use of CUDA)");
    return Status::ok();
}

// ---- NCCL --------------------------------------------------------------------------------------
#if SLUICE_HAS_NCCL_HEADER
namespace {

// The entry points sluice calls, resolved from the library found at run time.
struct NcclApi {
    decltype(&ncclGetVersion) get_version = nullptr;
    decltype(&ncclCommInitAll) comm_init_all = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclCommAbort) comm_abort = nullptr;
    decltype(&ncclCommGetAsyncError) async_error = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    int version = 0;
};

Expected<const NcclApi*> load_nccl() {
    static std::mutex mu;
    static std::unique_ptr<NcclApi> api;
    static std::string failure;
    std::lock_guard<std::mutex> lock(mu);
    if (api) return api.get();
    if (!failure.empty()) return error(ErrorCode::kUnsupported, failure);
    const char* env = std::getenv("SLUICE_NCCL_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libnccl.so.2";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = dlerror();
        failure = fmt::format(
            "[cuda] several GPUs need NCCL, and {} could not be loaded ({}); install NCCL (it comes with the "
            "CUDA toolkit's libnccl2 packages, or PyTorch's nvidia-nccl wheel) or name the library in "
            "SLUICE_NCCL_LIBRARY",
            path, why != nullptr ? why : "not found");
        return error(ErrorCode::kUnsupported, failure);
    }
    auto one = std::make_unique<NcclApi>();
    bool missing = false;
    auto resolve = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
        if (fn == nullptr && !missing) {
            missing = true;
            failure = fmt::format("[cuda] {} has no {} (an NCCL older than 2.4?)", path, name);
        }
    };
    resolve(one->get_version, "ncclGetVersion");
    resolve(one->comm_init_all, "ncclCommInitAll");
    resolve(one->all_reduce, "ncclAllReduce");
    resolve(one->comm_destroy, "ncclCommDestroy");
    resolve(one->comm_abort, "ncclCommAbort");
    resolve(one->async_error, "ncclCommGetAsyncError");
    resolve(one->error_string, "ncclGetErrorString");
    if (missing) {
        dlclose(handle);
        return error(ErrorCode::kUnsupported, failure);
    }
    one->get_version(&one->version);  // the handle stays open for the process's life
    api = std::move(one);
    return api.get();
}

// The communicators of one group, aborted together.
struct NcclGroup {
    const NcclApi* api = nullptr;
    std::vector<ncclComm_t> comms;
    std::mutex mu;
    bool aborted = false;
    ~NcclGroup() {
        if (aborted) return;  // ncclCommAbort freed them
        for (ncclComm_t c : comms)
            if (c != nullptr) api->comm_destroy(c);
    }
};

class NcclCollective final : public Collective {
 public:
    NcclCollective(std::shared_ptr<NcclGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
    void all_reduce_sum(float* buf, int64_t count, cudaStream_t stream) override {
        const ncclResult_t r =
            group_->api->all_reduce(buf, buf, static_cast<size_t>(count), ncclFloat32, ncclSum,
                                    group_->comms[static_cast<size_t>(rank_)], stream);
        if (r != ncclSuccess) record(r, "ncclAllReduce");
    }
    Status check() override {
        {
            std::lock_guard<std::mutex> lock(group_->mu);
            if (group_->aborted)
                return error(ErrorCode::kInternal, "[cuda] the expert-parallel group was aborted");
        }
        ncclResult_t async = ncclSuccess;
        group_->api->async_error(group_->comms[static_cast<size_t>(rank_)], &async);
        if (async != ncclSuccess && async != ncclInProgress) record(async, "an NCCL operation");
        std::lock_guard<std::mutex> lock(failure_mu_);
        return failure_;
    }
    void abort() override {
        std::lock_guard<std::mutex> lock(group_->mu);
        if (group_->aborted) return;
        group_->aborted = true;
        for (ncclComm_t c : group_->comms) group_->api->comm_abort(c);
    }
    std::string kind() const override {
        const int v = group_->api->version;
        return v >= 10000 ? fmt::format("nccl {}.{}.{}", v / 10000, v / 100 % 100, v % 100)
                          : fmt::format("nccl {}.{}.{}", v / 1000, v / 100 % 10, v % 100);
    }

 private:
    void record(ncclResult_t r, const char* what) {
        std::lock_guard<std::mutex> lock(failure_mu_);
        if (failure_.is_ok())
            failure_ = error(ErrorCode::kInternal, fmt::format("[cuda] rank {}: {} failed: {}", rank_, what,
                                                               group_->api->error_string(r)));
    }
    std::shared_ptr<NcclGroup> group_;
    int rank_;
    std::mutex failure_mu_;
    Status failure_;
};

}  // namespace

Expected<std::vector<std::unique_ptr<Collective>>> make_nccl_collectives(const std::vector<int>& devices) {
    SLUICE_RETURN_IF_ERROR(require_eager_module_loading());
    SLUICE_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
    auto group = std::make_shared<NcclGroup>();
    group->api = api;
    group->comms.assign(devices.size(), nullptr);
    const ncclResult_t r =
        api->comm_init_all(group->comms.data(), static_cast<int>(devices.size()), devices.data());
    if (r != ncclSuccess) {
        group->comms.assign(devices.size(), nullptr);
        return error(ErrorCode::kInternal,
                     fmt::format("[cuda] creating the NCCL communicator over {} GPUs: {}", devices.size(),
                                 api->error_string(r)));
    }
    std::vector<std::unique_ptr<Collective>> out;
    for (size_t i = 0; i < devices.size(); ++i)
        out.push_back(std::make_unique<NcclCollective>(group, static_cast<int>(i)));
    return out;
}
#else
Expected<std::vector<std::unique_ptr<Collective>>> make_nccl_collectives(const std::vector<int>& devices) {
    return error(
        ErrorCode::kUnsupported,
        fmt::format("[cuda] {} GPUs need NCCL, and this build of sluice was made without nccl.h (install "
                    "the NCCL headers, e.g. Debian's libnccl-dev, and rebuild)",
                    devices.size()));
}
#endif

// ---- ranks sharing one GPU ---------------------------------------------------------------------
namespace {

constexpr int64_t kLocalCapacity = int64_t{1} << 20;  // floats per rank and half: 2 · ranks · 4 MiB

struct LocalGroup {
    int device = 0;
    cuda::LocalReduceShared shared;
    void* block = nullptr;                 // staging, flags and epochs in one allocation
    int* failed_host = nullptr;            // mapped: the kernel's timeout flag, read without a device call
    unsigned long long* epochs = nullptr;  // [ranks][kLocalReduceBlocks]
    std::mutex mu;
    bool aborted = false;
    ~LocalGroup() {
        if (block != nullptr) cudaFree(block);
        if (failed_host != nullptr) cudaFreeHost(failed_host);
    }
};

class LocalCollective final : public Collective {
 public:
    LocalCollective(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
    void all_reduce_sum(float* buf, int64_t count, cudaStream_t stream) override {
        cuda::local_all_reduce(group_->shared, rank_, group_->epochs + rank_ * cuda::kLocalReduceBlocks, buf,
                               count, stream);
    }
    Status check() override {
        std::lock_guard<std::mutex> lock(group_->mu);
        if (group_->aborted)
            return error(ErrorCode::kInternal, "[cuda] the expert-parallel group was aborted");
        if (__atomic_load_n(group_->failed_host, __ATOMIC_ACQUIRE) != 0)
            return error(
                ErrorCode::kInternal,
                "[cuda] a rank sharing the GPU never reached an all-reduce (the others gave up after "
                "20 s)");
        return Status::ok();
    }
    void abort() override {
        std::lock_guard<std::mutex> lock(group_->mu);
        if (group_->aborted) return;
        group_->aborted = true;
        __atomic_store_n(group_->failed_host, 1, __ATOMIC_RELEASE);
        // Every flag past any epoch: a block spinning for a rank that will not come goes on at once.
        cudaSetDevice(group_->device);
        cudaStream_t s = nullptr;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
            cudaMemsetAsync(group_->shared.flags, 0xff,
                            static_cast<size_t>(group_->shared.ranks * cuda::kLocalReduceBlocks) *
                                sizeof(unsigned long long),
                            s);
            cudaStreamSynchronize(s);
            cudaStreamDestroy(s);
        }
    }
    std::string kind() const override { return "local"; }

 private:
    std::shared_ptr<LocalGroup> group_;
    int rank_;
};

}  // namespace

Expected<std::vector<std::unique_ptr<Collective>>> make_local_collectives(int device, int ranks) {
    SLUICE_RETURN_IF_ERROR(require_eager_module_loading());
    auto group = std::make_shared<LocalGroup>();
    group->device = device;
    SLUICE_CUDA_TRY(cudaSetDevice(device), "selecting the device");
    const uint64_t staging = static_cast<uint64_t>(2 * ranks) * kLocalCapacity * sizeof(float);
    const uint64_t counters =
        static_cast<uint64_t>(ranks * cuda::kLocalReduceBlocks) * sizeof(unsigned long long);
    SLUICE_CUDA_TRY(cudaMalloc(&group->block, staging + 2 * counters), "allocating the ranks' staging");
    SLUICE_CUDA_TRY(cudaMemset(static_cast<char*>(group->block) + staging, 0, 2 * counters),
                    "zeroing the ranks' counters");
    // The ranks' streams do not wait for the legacy stream's memset: it must be done before they start.
    SLUICE_CUDA_TRY(cudaDeviceSynchronize(), "zeroing the ranks' counters");
    SLUICE_CUDA_TRY(
        cudaHostAlloc(reinterpret_cast<void**>(&group->failed_host), sizeof(int), cudaHostAllocMapped),
        "allocating the ranks' failure flag");
    *group->failed_host = 0;
    int* failed_dev = nullptr;
    SLUICE_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&failed_dev), group->failed_host, 0),
                    "mapping the ranks' failure flag");
    auto* base = static_cast<char*>(group->block);
    group->shared.staging = reinterpret_cast<float*>(base);
    group->shared.flags = reinterpret_cast<unsigned long long*>(base + staging);
    group->epochs = reinterpret_cast<unsigned long long*>(base + staging + counters);
    group->shared.failed = failed_dev;
    group->shared.ranks = ranks;
    group->shared.capacity = kLocalCapacity;
    std::vector<std::unique_ptr<Collective>> out;
    for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<LocalCollective>(group, r));
    return out;
}

}  // namespace sluice::runtime::cuda_impl
