// sluice/version.h. SLUICE_GIT_COMMIT, SLUICE_GIT_DATE, SLUICE_BUILD_TYPE, SLUICE_HAS_CUDA and
// SLUICE_CUDA_ARCHS are defined for this file alone (CMakeLists.txt), so a new commit recompiles one file.
#include "kernels/kernels.h"
#include "sluice/version.h"

#ifndef SLUICE_GIT_COMMIT
#define SLUICE_GIT_COMMIT ""
#endif
#ifndef SLUICE_GIT_DATE
#define SLUICE_GIT_DATE ""
#endif
#ifndef SLUICE_BUILD_TYPE
#define SLUICE_BUILD_TYPE ""
#endif
#ifndef SLUICE_CUDA_ARCHS
#define SLUICE_CUDA_ARCHS ""
#endif

namespace sluice {

BuildInfo build_info() {
    BuildInfo b;
    b.version = SLUICE_VERSION;
    b.commit = SLUICE_GIT_COMMIT;
    b.commit_date = SLUICE_GIT_DATE;
    b.build_type = SLUICE_BUILD_TYPE;
    b.cpu_isa = kernels::cpu_kernel_isa();
#if SLUICE_HAS_CUDA
    b.cuda = true;
#endif
    b.cuda_archs = SLUICE_CUDA_ARCHS;
    return b;
}

std::string version_line() {
    const BuildInfo b = build_info();
    std::string s = "sluice " + b.version + " (";
    if (!b.commit.empty()) s += "commit " + b.commit + ", ";
    s += (b.build_type.empty() ? std::string("no build type") : b.build_type) + ", CPU kernels " + b.cpu_isa;
    s += b.cuda ? ", CUDA " + b.cuda_archs : ", no CUDA";
    return s + ")";
}

}  // namespace sluice
