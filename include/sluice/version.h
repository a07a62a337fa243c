// What this build of sluice is: version, the commit it was configured from, build type, the CPU
// kernels it selected on this machine and whether it has the CUDA backend (`sluice --version`).
#pragma once

#include <string>

#include "sluice/export.h"

namespace sluice {

struct BuildInfo {
    std::string version;      // "0.1.0"
    std::string commit;       // short git commit at configure time, "" outside a checkout
    std::string commit_date;  // its date, YYYY-MM-DD ("" outside a checkout)
    std::string build_type;   // "Release", "Debug", ...
    std::string cpu_isa;      // the CPU kernels chosen at run time: "avx512", "avx2" or "scalar"
    bool cuda = false;        // the CUDA backend is compiled in
    std::string cuda_archs;   // its GPU architectures, e.g. "86-real,90-real,90-virtual"
};

SLUICE_API BuildInfo build_info();

// "sluice 0.1.0 (commit 0238e6e1a2b3, Release, CPU kernels avx2, CUDA 86-real,90-real)".
SLUICE_API std::string version_line();

}  // namespace sluice
